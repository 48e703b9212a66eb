"""The one schema every backend shares, as SQLAlchemy Core tables, and the numbered migrations that build it."""
