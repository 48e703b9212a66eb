"""`persyn doctor`: one module per thing checked (the store and models in `checks.py`, chat networks, the live bus, PostgreSQL, the tools that read the world)."""
