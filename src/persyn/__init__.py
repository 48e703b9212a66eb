"""Persyn: autonomous agents with a persistent autobiographical memory."""

__version__ = "0.1.0"
