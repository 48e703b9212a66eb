"""Which executors are alive, across hosts, on a PostgreSQL system database (ARCHITECTURE §4).

The slot lock files of `_executor.py` tell a dead executor only to processes of the same host
(and data directory). Workers of one deployment on several hosts share only the database, so
there each executor also holds a *session* advisory lock named by its id, on a connection of
its own kept for the life of the process: PostgreSQL releases it when that session ends,
however the process ended (`kill -9`, a lost host, once the server notices the connection
gone). A live worker looks every `[dispatch] dead_executor_seconds` at the executors that
have PENDING workflows of this application version; one whose lock it can take is dead. It
keeps the lock while `DBOS._recover_pending_workflows` re-enqueues that work (so the owner,
restarting meanwhile, waits for it at launch rather than racing it), then lets go. Recovery
re-enqueues; DBOS's ENQUEUED→PENDING dequeue admits one runner, so two workers adopting the
same executor at once still run each workflow once, and its finished steps are not re-run.

Limits: the locks need real sessions (not a transaction-pooling PgBouncer); the lock key is
`hashtext(executor id)`, so two ids that collide would hide a dead executor until it restarts;
a worker whose liveness connection breaks while it runs is taken for dead and its running
turns are re-enqueued, which the workflow's steps make safe (each finished step is not run
again) but can run an unfinished step twice, so the connection has TCP keepalives.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from sqlalchemy import create_engine, text
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.pool import NullPool

from persyn.core.errors import ConfigError

__all__ = ["PostgresLiveness", "is_postgres_url"]

log = logging.getLogger(__name__)

# Arbitrary class id for the two-key advisory lock form ("persyn executors"); the store's
# one-key locks live in another key space.
_LOCK_CLASS = 0x7065_7878

_TRY = text("SELECT pg_try_advisory_lock(:cls, hashtext(:id))")
_UNLOCK = text("SELECT pg_advisory_unlock(:cls, hashtext(:id))")


def is_postgres_url(url: str) -> bool:
    try:
        return make_url(url).get_backend_name() == "postgresql"
    except Exception:
        return False


class PostgresLiveness:
    """Hold this executor's lock; find and adopt dead executors' PENDING workflows."""

    def __init__(self, url: str, *, schema: str = "dbos") -> None:
        self._engine: Engine = create_engine(
            make_url(url).set(drivername="postgresql+psycopg"),
            poolclass=NullPool,
            isolation_level="AUTOCOMMIT",
            connect_args={
                "keepalives": 1,
                "keepalives_idle": 10,
                "keepalives_interval": 5,
                "keepalives_count": 3,
            },
        )
        self._schema = schema
        self._held: Connection | None = None
        self._own: str | None = None

    def hold(self, executor_id: str, *, wait_seconds: float = 30.0) -> None:
        """Take this executor's lock for the life of the process. Waits while another
        worker adopts this id's work (a moment); a live process holding it longer is
        another executor under the same id, a ConfigError."""
        connection = self._engine.connect()
        params = {"cls": _LOCK_CLASS, "id": executor_id}
        deadline = time.monotonic() + wait_seconds
        while not connection.execute(_TRY, params).scalar():
            if time.monotonic() >= deadline:
                connection.close()
                raise ConfigError(
                    f"executor id {executor_id!r} is held by another live process on this database "
                    "(another host with the same name, or a copied [dispatch] executor_id): give each "
                    "worker its own [dispatch] executor_id"
                )
            time.sleep(0.2)
        self._held, self._own = connection, executor_id

    def adopt_dead(self, version: str, recover: Callable[[list[str]], object]) -> list[str]:
        """Recover the PENDING work of every executor whose lock is free; the ids adopted."""
        adopted: list[str] = []
        with self._engine.connect() as connection:
            pending = connection.execute(
                text(
                    f'SELECT DISTINCT executor_id FROM "{self._schema}".workflow_status '
                    "WHERE status = 'PENDING' AND application_version = :version"
                ),
                {"version": version},
            ).scalars()
            for executor_id in [str(e) for e in pending if e != self._own]:
                params = {"cls": _LOCK_CLASS, "id": executor_id}
                if not connection.execute(_TRY, params).scalar():
                    continue  # alive (or being adopted by another worker right now)
                try:
                    recover([executor_id])
                    adopted.append(executor_id)
                except Exception as exc:  # retried at the next look
                    log.warning("could not recover the work of dead executor %s: %s", executor_id, exc)
                finally:
                    connection.execute(_UNLOCK, params)
        return adopted

    def close(self) -> None:
        if self._held is not None:
            held, self._held = self._held, None
            try:
                held.close()
            except Exception as exc:  # the session ends with the process anyway
                log.debug("closing the executor liveness connection: %s", exc)
        self._engine.dispose()
