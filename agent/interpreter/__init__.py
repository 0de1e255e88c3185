"""Interpreted sessions: two calls paired so that each party hears the other in its own
language (:mod:`agent.interpreter.sessions`, :mod:`agent.interpreter.relay`)."""
