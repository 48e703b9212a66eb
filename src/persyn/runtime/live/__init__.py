"""The live bus (ARCHITECTURE §5): streams and outbox wake-ups across processes, in process or over Redis, and the relay both share."""
