"""The SQL both backends run (SQLAlchemy Core over `store/schema/`): one module per sub-port. SQLite and PostgreSQL override only what their dialects do differently."""
