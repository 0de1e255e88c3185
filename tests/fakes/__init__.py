"""Protocol-faithful stand-ins for what cannot run on a test machine (AWS itself, the GPU model)."""
