"""Contact-centre call analytics: listen-only both-tracks streams, transcribed per speaker,
redacted, shown live to an operator, and summarized after the call (see README, "Call
analytics")."""
