"""When the user's turn ends: the signals (what was said, how it sounded) and the strategy that
weighs them (:mod:`agent.turns.adaptive_stop`). Measured on ``bench/turn_taking.py``."""
