"""The SQLite backend (ARCHITECTURE §4): the default store, one file per installation.

Concurrency model. SQLite allows one writer at a time per database file, so:
- inside this process every write runs on ONE thread (a single-worker executor) over ONE
  connection, so SQLite never sees two writers from here;
- between processes, every write transaction starts with BEGIN IMMEDIATE, which takes the
  write lock up front; a second process waits for it (busy_timeout) instead of failing later
  with "database is locked" when a read transaction tries to upgrade itself;
- reads run on a small thread pool of `query_only` connections; WAL lets them proceed while
  a write is in progress, each inside one (deferred) transaction so it sees one snapshot.
Async methods hand the blocking work to those threads; the event loop never touches SQLite.
A cancelled caller does not cancel the work: a write that has started still commits.

Where the rest lives: how work reaches those threads in `_sqlite_work.py`; engines, the
DB-API driver (pysqlite3, for sqlite-vec) and pragmas in `_sqlite_engine.py`; then one part
per sub-port of `Store`, mixed in here: events, markers and deliberation traces
(`_sqlite_events.py`), agents and persons (`_sqlite_persons.py`), contact addresses and the
conversation participant index (`_sqlite_directory.py`), dialog (`_sqlite_dialog.py`), flags
(`_sqlite_flags.py`), long-term memory (`_sqlite_memory.py`, with its keyword search in
`_sqlite_keyword.py`, over the vector tables of `_sqlite_vectors.py`), quick facts and observations (`_sqlite_facts.py`), the knowledge graph
(`_sqlite_graph.py`), reminders and goals (`_sqlite_schedule.py`), the activity log
(`_sqlite_activity.py`), conversation jobs (`_sqlite_jobs.py`), the outbox (`_sqlite_outbox.py`),
run state and channel ledgers (`_sqlite_runs.py`), the model calls checkpointed inside durable
steps (`_sqlite_model_calls.py`), leases (`_sqlite_leases.py`). This module keeps the engines,
the lifecycle and the operations that span parts in one transaction.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

from sqlalchemy.engine import Connection
from sqlalchemy.exc import SQLAlchemyError

from persyn.core.errors import StoreError
from persyn.core.events import CompletionMarker
from persyn.store.base import Conversation, Identity, Message, Person, ReplyUpkeep, Store
from persyn.store.ports.outbox import OutboxRow
from persyn.store.schema import migrations
from persyn.store.schema.tables import checked_id
from persyn.store.sql.activity import SQLiteActivity
from persyn.store.sql.artifacts import SQLiteArtifacts
from persyn.store.sql.dialog import (
    AGENT_REPLY,
    SQLiteDialog,
    add_message_row,
    fts_query,
    open_conversation_row,
)
from persyn.store.sql.directory import SQLiteDirectory
from persyn.store.sql.events import SQLiteEvents, merge_trace_row, put_marker_row
from persyn.store.sql.facts import SQLiteFacts
from persyn.store.sql.flags import SQLiteFlags, clear_flags_row, update_flag_row
from persyn.store.sql.graph import SQLiteGraph
from persyn.store.sql.guardrails import SQLiteGuardrails
from persyn.store.sql.jobs import SQLiteJobs
from persyn.store.sql.leases import SQLiteLeases
from persyn.store.sql.mapping import message_from_row
from persyn.store.sql.memory import SQLiteMemory
from persyn.store.sql.model_calls import SQLiteModelCalls
from persyn.store.sql.outbox import SQLiteOutbox, put_outbox_row
from persyn.store.sql.persons import SQLitePersons, resolve_person_row
from persyn.store.sql.runs import SQLiteRuns, spend_channel_row
from persyn.store.sql.schedule import SQLiteSchedule
from persyn.store.sql.web_keys import SQLiteWebKeys
from persyn.store.sqlite.engine import create_sqlite_engine

__all__ = ["SQLiteStore", "create_sqlite_engine", "fts_query"]


class SQLiteStore(
    SQLiteEvents,
    SQLitePersons,
    SQLiteDirectory,
    SQLiteDialog,
    SQLiteFlags,
    SQLiteMemory,
    SQLiteFacts,
    SQLiteGraph,
    SQLiteSchedule,
    SQLiteActivity,
    SQLiteJobs,
    SQLiteOutbox,
    SQLiteRuns,
    SQLiteWebKeys,
    SQLiteGuardrails,
    SQLiteArtifacts,
    SQLiteModelCalls,
    SQLiteLeases,
    Store,
):
    """`Store` over one SQLite file. Construct cheaply; `await setup()` before use."""

    def __init__(
        self, path: str | os.PathLike[str], *, busy_timeout_ms: int = 30_000, readers: int = 4
    ) -> None:
        self._path = Path(path)
        self._writer = create_sqlite_engine(self._path, writer=True, busy_timeout_ms=busy_timeout_ms)
        self._reader = create_sqlite_engine(
            self._path, writer=False, pool_size=readers, busy_timeout_ms=busy_timeout_ms
        )
        self._write_thread = ThreadPoolExecutor(1, thread_name_prefix="persyn-sqlite-write")
        self._read_threads = ThreadPoolExecutor(readers, thread_name_prefix="persyn-sqlite-read")
        self._closed = False
        self._pending_reads = {}

    @property
    def path(self) -> Path:
        return self._path

    # lifecycle -------------------------------------------------------------------------
    async def setup(self) -> None:
        """Create or migrate the schema on the write thread; see `migrations.migrate`."""
        if self._closed:
            raise StoreError(f"setup: the store for {str(self._path)!r} is closed")
        await asyncio.get_running_loop().run_in_executor(self._write_thread, self._migrate_sync)

    def _migrate_sync(self) -> None:
        try:
            with self._writer.connect() as connection:
                migrations.migrate(connection, "sqlite")
        except SQLAlchemyError as exc:
            raise StoreError(f"migrating {str(self._path)!r} failed: {exc}") from exc

    async def close(self) -> None:
        """Finish queued work, then close every connection. Idempotent."""
        if self._closed:
            return
        self._closed = True
        await asyncio.to_thread(self._shutdown)

    def _shutdown(self) -> None:
        self._write_thread.shutdown(wait=True)
        self._read_threads.shutdown(wait=True)
        self._writer.dispose()
        self._reader.dispose()

    async def schema_version(self) -> int:
        return await self._read("schema_version", migrations.current_version)

    # across parts, in one write transaction ------------------------------------------------
    async def record_inbound(
        self,
        agent_id: str,
        speaker: tuple[Identity, str, str] | None,
        service: str,
        channel: str,
        now: datetime,
        idle_timeout_seconds: float,
        kind: str,
        make_message: Callable[[Person | None, Conversation], Message],
    ) -> tuple[Person | None, Conversation, Message]:
        """resolve_person + open_conversation + add_message in one write transaction."""
        agent_id = checked_id(agent_id, "agent id")

        def work(connection: Connection) -> tuple[Person | None, Conversation, Message]:
            person = None
            if speaker is not None:
                identity, display_name, person_kind = speaker
                person = resolve_person_row(connection, agent_id, identity, display_name, person_kind, now)
            participants = [person.id] if person is not None else []
            conversation = open_conversation_row(
                connection, agent_id, service, channel, participants, now, idle_timeout_seconds, kind
            )
            message = make_message(person, conversation)
            add_message_row(connection, message)
            return person, conversation, message

        return await self._write("record_inbound", work)

    async def record_reply(
        self,
        message: Message,
        marker: Callable[[Message], CompletionMarker],
        outbox: Callable[[Message], OutboxRow | None] | None = None,
        upkeep: ReplyUpkeep | None = None,
    ) -> Message:
        """The agent's reply (or the one already stored for its event), the completion
        marker and the outbox row made from it, and the upkeep, in one write transaction."""
        agent_id = checked_id(message.agent_id, "agent id")
        if upkeep is not None and upkeep.trace is not None and message.event_id is not None:
            checked_id(message.event_id, "event id")

        def work(connection: Connection) -> Message:
            if upkeep is not None and upkeep.trace is not None and message.event_id is not None:
                merge_trace_row(connection, agent_id, message.event_id, upkeep.trace, message.created_at)
            stored = message
            if not add_message_row(connection, message) and message.event_id is not None:
                params = {"p_agent_id": agent_id, "p_event_id": message.event_id}
                row = connection.execute(AGENT_REPLY, params).first()
                stored = message if row is None else message_from_row(row)
            put_marker_row(connection, agent_id, marker(stored))
            row = None if outbox is None else outbox(stored)
            if row is not None:
                put_outbox_row(connection, row, read_back=False)
            if upkeep is not None:
                if upkeep.spend is not None:
                    spend_channel_row(connection, agent_id, upkeep.spend, message.created_at)
                clear_flags_row(connection, agent_id, upkeep.cleared_flags)
                for key, change in upkeep.updated_flags:
                    update_flag_row(connection, agent_id, key, change)
            return stored

        return await self._write("record_reply", work)
