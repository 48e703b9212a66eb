"""The store both SQL backends share (ARCHITECTURE §4): one part per sub-port of `Store`
(`sql/<concern>.py`), the lifecycle's common half, and the operations that span parts in one
write transaction. A backend derives from `SqlStore`, adds its own search and vector parts in
front, owns its engines and threads, and migrates its schema (`sqlite/store.py`,
`postgres/store.py`); neither backend derives from the other.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime

from sqlalchemy.engine import Connection

from persyn.core.events import CompletionMarker
from persyn.store.base import Conversation, Identity, Message, Person, ReplyUpkeep
from persyn.store.capabilities import FullStore
from persyn.store.ports.outbox import OutboxRow
from persyn.store.schema import migrations
from persyn.store.schema.tables import checked_id
from persyn.store.sql.activity import SqlActivity
from persyn.store.sql.artifacts import SqlArtifacts
from persyn.store.sql.dialog import AGENT_REPLY, SqlDialog, add_message_row, open_conversation_row
from persyn.store.sql.directory import SqlDirectory
from persyn.store.sql.events import SqlEvents, merge_trace_row, put_marker_row
from persyn.store.sql.facts import SqlFacts
from persyn.store.sql.flags import SqlFlags, clear_flags_row, update_flag_row
from persyn.store.sql.graph import SqlGraph
from persyn.store.sql.guardrails import SqlGuardrails
from persyn.store.sql.jobs import SqlJobs
from persyn.store.sql.leases import SqlLeases
from persyn.store.sql.mapping import message_from_row
from persyn.store.sql.memory import SqlMemory
from persyn.store.sql.model_calls import SqlModelCalls
from persyn.store.sql.outbox import SqlOutbox, put_outbox_row
from persyn.store.sql.persons import SqlPersons, resolve_person_row
from persyn.store.sql.runs import SqlRuns, spend_channel_row
from persyn.store.sql.schedule import SqlSchedule
from persyn.store.sql.web_keys import SqlWebKeys

__all__ = ["SqlStore"]


class SqlStore(
    SqlEvents,
    SqlPersons,
    SqlDirectory,
    SqlDialog,
    SqlFlags,
    SqlMemory,
    SqlFacts,
    SqlGraph,
    SqlSchedule,
    SqlActivity,
    SqlJobs,
    SqlOutbox,
    SqlRuns,
    SqlWebKeys,
    SqlGuardrails,
    SqlArtifacts,
    SqlModelCalls,
    SqlLeases,
    FullStore,
):
    """`Store` with the knowledge graph over SQLAlchemy Core, less what each backend does its
    own way: message and keyword search, vectors, the engines and the migrations."""

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
