"""The command groups of `persyn`, one module each, each with `register(app)` (`cli/root.py`
registers them in the order `--help` lists them)."""
