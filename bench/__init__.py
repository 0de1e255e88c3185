"""Benchmarks: run each as a module from the repository root, e.g. ``.venv/bin/python -m
bench.capacity --help``. Results (ratios against a baseline measured in the same run) are in
``bench/results``."""
