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

Where the rest lives: engines, the DB-API driver (pysqlite3, for sqlite-vec) and pragmas in
`_sqlite_engine.py`; long-term memory methods in `_sqlite_memory.py` (mixed in here) over the
per-dimension vector tables of `_sqlite_vectors.py`; contact addresses and the conversation
participant index in `_sqlite_directory.py`; the knowledge graph in `_sqlite_graph.py`; reminders
and goals in `_sqlite_schedule.py` (all mixed in here too).
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import (
    ColumnElement,
    Engine,
    Integer,
    Text,
    and_,
    bindparam,
    case,
    column,
    delete,
    exists,
    func,
    literal_column,
    select,
    table,
    text,
    type_coerce,
    update,
)
from sqlalchemy.dialects.sqlite import insert
from sqlalchemy.engine import Connection, Row
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.sql.expression import Executable

from persyn.core.errors import StoreError
from persyn.core.events import CompletionMarker, Event
from persyn.core.ids import new_id
from persyn.store import migrations
from persyn.store._sqlite_directory import (
    SQLiteDirectory,
    index_participants,
    move_addresses,
    move_participant_index,
)
from persyn.store._sqlite_engine import create_sqlite_engine
from persyn.store._sqlite_graph import SQLiteGraph, replace_graph_participant
from persyn.store._sqlite_memory import SQLiteMemory, replace_record_participant
from persyn.store._sqlite_outbox import SQLiteOutbox
from persyn.store._sqlite_schedule import SQLiteSchedule
from persyn.store.base import (
    GLOBAL,
    AgentRow,
    Conversation,
    Identity,
    Message,
    Observation,
    ObservationChange,
    Person,
    Provenance,
    QuickFact,
    Role,
    Store,
)
from persyn.store.schema import (
    agent_from_row,
    agents,
    checked_id,
    completion_markers,
    conversation_from_row,
    conversations,
    event_from_row,
    event_values,
    events,
    fact_from_row,
    flags,
    identities,
    identities_by_person,
    load_person,
    marker_from_row,
    message_from_row,
    messages,
    observation_changes,
    observations,
    person_from_row,
    person_preferences,
    persons,
    provenance_values,
    quick_facts,
)

__all__ = ["SQLiteStore", "create_sqlite_engine", "fts_query"]

T = TypeVar("T")

_messages_fts = table("messages_fts", column("rowid", Integer))


class SQLiteStore(SQLiteMemory, SQLiteDirectory, SQLiteGraph, SQLiteSchedule, SQLiteOutbox, Store):
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

    @property
    def path(self) -> Path:
        return self._path

    # plumbing --------------------------------------------------------------------------
    async def _write(self, what: str, work: Callable[[Connection], T]) -> T:
        return await self._run(self._write_thread, self._writer, what, work)

    async def _read(self, what: str, work: Callable[[Connection], T]) -> T:
        return await self._run(self._read_threads, self._reader, what, work)

    async def _run(
        self, threads: ThreadPoolExecutor, engine: Engine, what: str, work: Callable[[Connection], T]
    ) -> T:
        if self._closed:
            raise StoreError(f"{what}: the store for {str(self._path)!r} is closed")
        job = functools.partial(self._in_transaction, engine, what, work)
        return await asyncio.get_running_loop().run_in_executor(threads, job)

    async def _fetch_one(
        self,
        what: str,
        statement: Executable,
        to_row: Callable[[Row[Any]], T],
        params: dict[str, Any] | None = None,
    ) -> T | None:
        def work(connection: Connection) -> T | None:
            row = connection.execute(statement, params).first()
            return None if row is None else to_row(row)

        return await self._read(what, work)

    async def _fetch_all(
        self,
        what: str,
        statement: Executable,
        to_row: Callable[[Row[Any]], T],
        params: dict[str, Any] | None = None,
        *,
        write: bool = False,
    ) -> list[T]:
        run = self._write if write else self._read
        return await run(what, lambda c: [to_row(row) for row in c.execute(statement, params)])

    def _in_transaction(self, engine: Engine, what: str, work: Callable[[Connection], T]) -> T:
        try:
            with engine.begin() as connection:
                return work(connection)
        except SQLAlchemyError as exc:
            raise StoreError(f"{what} failed on {str(self._path)!r}: {exc}") from exc

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

    # agents ----------------------------------------------------------------------------
    async def ensure_agent(self, agent_id: str, name: str, now: datetime) -> AgentRow:
        """The agent row, created if missing; a changed name (the config is the authority)
        is updated, the creation time never is."""
        agent_id = checked_id(agent_id, "agent id")

        statement = (
            insert(agents)
            .values(id=agent_id, name=name, created_at=now)
            .on_conflict_do_update(index_elements=[agents.c.id], set_={"name": name})
            .returning(*agents.c)
        )
        return await self._write("ensure_agent", lambda c: agent_from_row(c.execute(statement).one()))

    async def list_agents(self) -> list[AgentRow]:
        statement = select(agents).order_by(agents.c.created_at, agents.c.id)
        return await self._fetch_all("list_agents", statement, agent_from_row)

    # events and completion markers -----------------------------------------------------
    async def save_event(self, event: Event) -> bool:
        checked_id(event.agent_id, "agent id")
        checked_id(event.id, "event id")
        values = event_values(event)
        return await self._write("save_event", lambda c: c.execute(_SQL_SAVE_EVENT, values).rowcount == 1)

    async def get_event(self, agent_id: str, event_id: str) -> Event | None:
        params = {"p_agent_id": agent_id, "p_id": event_id}
        return await self._fetch_one("get_event", _SQL_EVENT, event_from_row, params)

    async def put_marker(self, agent_id: str, marker: CompletionMarker) -> None:
        agent_id = checked_id(agent_id, "agent id")
        checked_id(marker.event_id, "event id")
        await self._write("put_marker", lambda connection: _put_marker(connection, agent_id, marker))

    async def get_marker(self, agent_id: str, event_id: str, now: datetime) -> CompletionMarker | None:
        params = {"p_agent_id": agent_id, "p_event_id": event_id, "p_now": now}
        return await self._fetch_one("get_marker", _SQL_MARKER, marker_from_row, params)

    async def purge_markers(self, now: datetime) -> int:
        statement = delete(completion_markers).where(completion_markers.c.expires_at <= now)
        return await self._write("purge_markers", lambda c: c.execute(statement).rowcount)

    # persons ---------------------------------------------------------------------------
    async def resolve_person(
        self, agent_id: str, identity: Identity, display_name: str, kind: str, now: datetime
    ) -> Person:
        """Look-up and first-contact creation happen in one write transaction, and writes
        are serialised (one thread here, BEGIN IMMEDIATE across processes), so concurrent
        first contacts still yield one person; the unique identity key is the backstop."""
        agent_id = checked_id(agent_id, "agent id")
        return await self._write(
            "resolve_person", lambda c: _resolve_person(c, agent_id, identity, display_name, kind, now)
        )

    async def get_person(self, agent_id: str, person_id: str) -> Person | None:
        def work(connection: Connection) -> Person | None:
            statement = select(persons.c.id).where(persons.c.agent_id == agent_id, persons.c.id == person_id)
            if connection.execute(statement).first() is None:
                return None
            return load_person(connection, agent_id, person_id)

        return await self._read("get_person", work)

    async def list_persons(self, agent_id: str) -> list[Person]:
        def work(connection: Connection) -> list[Person]:
            rows = connection.execute(
                select(persons)
                .where(persons.c.agent_id == agent_id)
                .order_by(persons.c.created_at, persons.c.id)
            ).all()
            by_person = identities_by_person(connection, agent_id)
            return [person_from_row(row, by_person.get(row.id, ())) for row in rows]

        return await self._read("list_persons", work)

    async def rename_person(self, agent_id: str, person_id: str, display_name: str) -> Person:
        def work(connection: Connection) -> Person:
            result = connection.execute(
                update(persons)
                .where(persons.c.agent_id == agent_id, persons.c.id == person_id)
                .values(display_name=display_name)
            )
            if result.rowcount != 1:
                raise StoreError(f"no person {person_id!r} for agent {agent_id!r}")
            return load_person(connection, agent_id, person_id)

        return await self._write("rename_person", work)

    async def add_observation(self, observation: Observation, action: str, reason: str) -> None:
        agent_id = checked_id(observation.agent_id, "agent id")
        checked_id(observation.id, "observation id")
        checked_id(observation.subject_id, "subject id")

        def work(connection: Connection) -> None:
            connection.execute(
                insert(observations).values(
                    id=observation.id,
                    agent_id=agent_id,
                    subject_id=observation.subject_id,
                    kind=observation.kind,
                    value=observation.value,
                    observed_at=observation.observed_at,
                    conversation_id=observation.conversation_id,
                )
            )
            _audit(
                connection,
                agent_id,
                observation.subject_id,
                observation.id,
                action,
                None,
                observation.value,
                reason,
                observation.observed_at,
            )

        await self._write("add_observation", work)

    async def revise_observation(
        self, agent_id: str, observation_id: str, value: str | None, action: str, reason: str, now: datetime
    ) -> None:
        def work(connection: Connection) -> None:
            row = connection.execute(
                select(observations).where(
                    observations.c.agent_id == agent_id, observations.c.id == observation_id
                )
            ).first()
            if row is None:
                raise StoreError(f"no observation {observation_id!r} for agent {agent_id!r}")
            where = (observations.c.agent_id == agent_id, observations.c.id == observation_id)
            if value is None:
                connection.execute(delete(observations).where(*where))
            else:
                connection.execute(update(observations).where(*where).values(value=value, observed_at=now))
            _audit(
                connection, agent_id, row.subject_id, observation_id, action, row.value, value, reason, now
            )

        await self._write("revise_observation", work)

    async def observations(self, agent_id: str, subject_id: str) -> list[Observation]:
        params = {"p_agent_id": agent_id, "p_subject_id": subject_id}
        rows = await self._read("observations", lambda c: c.execute(_SQL_OBSERVATIONS, params).all())
        return [
            Observation(
                id=r.id,
                agent_id=r.agent_id,
                subject_id=r.subject_id,
                kind=r.kind,
                value=r.value,
                observed_at=r.observed_at,
                conversation_id=r.conversation_id,
            )
            for r in rows
        ]

    async def observation_history(self, agent_id: str, subject_id: str) -> list[ObservationChange]:
        changes = observation_changes.c
        statement = (
            select(observation_changes)
            .where(changes.agent_id == agent_id, changes.subject_id == subject_id)
            .order_by(changes.at, changes.id)
        )
        rows = await self._read("observation_history", lambda c: c.execute(statement).all())
        return [
            ObservationChange(
                id=r.id,
                subject_id=r.subject_id,
                observation_id=r.observation_id,
                action=r.action,
                before=r.before,
                after=r.after,
                reason=r.reason,
                at=r.at,
            )
            for r in rows
        ]

    async def set_fact(
        self,
        agent_id: str,
        subject_id: str,
        key: str,
        value: str | None,
        now: datetime,
        *,
        provenance: Provenance = GLOBAL,
    ) -> None:
        agent_id = checked_id(agent_id, "agent id")
        subject_id = checked_id(subject_id, "subject id")
        key = key.strip()
        if not key or len(key) > 200:
            raise StoreError(f"invalid fact key {key!r}: use 1 to 200 characters")
        facts = quick_facts.c
        scope = provenance.scope
        if value is None:
            statement: Any = delete(quick_facts).where(
                facts.agent_id == agent_id,
                facts.subject_id == subject_id,
                facts.key == key,
                facts.scope == scope,
            )
        else:
            statement = (
                insert(quick_facts)
                .values(
                    id=new_id(now),
                    agent_id=agent_id,
                    subject_id=subject_id,
                    key=key,
                    value=value,
                    updated_at=now,
                    scope=scope,
                    **provenance_values(provenance),
                )
                .on_conflict_do_update(
                    index_elements=[facts.agent_id, facts.subject_id, facts.key, facts.scope],
                    set_={"value": value, "updated_at": now},
                )
            )
        await self._write("set_fact", lambda connection: connection.execute(statement))

    async def facts(self, agent_id: str, subject_id: str) -> dict[str, str]:
        newest: dict[str, str] = {}
        for fact in await self.fact_rows(agent_id, subject_id):
            newest.setdefault(fact.key, fact.value)
        return newest

    async def fact_rows(self, agent_id: str, subject_id: str) -> list[QuickFact]:
        facts = quick_facts.c
        statement = (
            select(quick_facts)
            .where(facts.agent_id == agent_id, facts.subject_id == subject_id)
            .order_by(facts.key, facts.updated_at.desc(), facts.id.desc())
        )
        rows = await self._read("fact_rows", lambda c: c.execute(statement).all())
        return [fact_from_row(row) for row in rows]

    async def attach_identity(self, agent_id: str, person_id: str, identity: Identity) -> Person:
        agent_id = checked_id(agent_id, "agent id")

        def work(connection: Connection) -> Person:
            _require_person(connection, agent_id, person_id)
            owner = _person_for_identity(connection, agent_id, identity)
            if owner == person_id:
                return load_person(connection, agent_id, person_id)
            if owner is not None:
                raise StoreError(
                    f"identity {identity.service}/{identity.channel}/{identity.speaker_id} already "
                    f"belongs to contact {owner}: merge the two contacts instead"
                )
            connection.execute(
                insert(identities).values(
                    id=new_id(),
                    agent_id=agent_id,
                    person_id=person_id,
                    service=identity.service,
                    channel=identity.channel,
                    speaker_id=identity.speaker_id,
                    created_at=datetime.now(UTC),
                )
            )
            return load_person(connection, agent_id, person_id)

        return await self._write("attach_identity", work)

    async def detach_identity(self, agent_id: str, person_id: str, identity: Identity) -> Person:
        def work(connection: Connection) -> Person:
            _require_person(connection, agent_id, person_id)
            result = connection.execute(
                delete(identities).where(
                    identities.c.agent_id == agent_id,
                    identities.c.person_id == person_id,
                    identities.c.service == identity.service,
                    identities.c.channel == identity.channel,
                    identities.c.speaker_id == identity.speaker_id,
                )
            )
            if result.rowcount != 1:
                raise StoreError(
                    f"contact {person_id} has no identity {identity.service}/{identity.channel}/{identity.speaker_id}"
                )
            return load_person(connection, agent_id, person_id)

        return await self._write("detach_identity", work)

    async def merge_persons(
        self, agent_id: str, survivor_id: str, other_id: str, display_name: str | None = None
    ) -> Person:
        if survivor_id == other_id:
            raise StoreError("a contact cannot be merged into itself")

        def work(connection: Connection) -> Person:
            survivor = _require_person(connection, agent_id, survivor_id)
            other = _require_person(connection, agent_id, other_id)
            connection.execute(
                update(identities)
                .where(identities.c.agent_id == agent_id, identities.c.person_id == other_id)
                .values(person_id=survivor_id)
            )
            kept = set(
                connection.execute(
                    select(person_preferences.c.key).where(
                        person_preferences.c.agent_id == agent_id,
                        person_preferences.c.person_id == survivor_id,
                    )
                ).scalars()
            )
            theirs = person_preferences.c
            moved = update(person_preferences).where(
                theirs.agent_id == agent_id, theirs.person_id == other_id
            )
            if kept:
                moved = moved.where(theirs.key.not_in(kept))
            connection.execute(moved.values(person_id=survivor_id))
            connection.execute(
                delete(person_preferences).where(theirs.agent_id == agent_id, theirs.person_id == other_id)
            )
            for about in (observations, observation_changes):
                connection.execute(
                    update(about)
                    .where(about.c.agent_id == agent_id, about.c.subject_id == other_id)
                    .values(subject_id=survivor_id)
                )
            # A fact the survivor already holds in the same scope wins; the rest move over.
            facts, held = quick_facts.c, quick_facts.alias("held")
            connection.execute(
                delete(quick_facts).where(
                    facts.agent_id == agent_id,
                    facts.subject_id == other_id,
                    exists().where(
                        held.c.agent_id == agent_id,
                        held.c.subject_id == survivor_id,
                        held.c.key == facts.key,
                        held.c.scope == facts.scope,
                    ),
                )
            )
            connection.execute(
                update(quick_facts)
                .where(facts.agent_id == agent_id, facts.subject_id == other_id)
                .values(subject_id=survivor_id)
            )
            connection.execute(
                update(messages)
                .where(messages.c.agent_id == agent_id, messages.c.person_id == other_id)
                .values(person_id=survivor_id)
            )
            pattern = f'%"{other_id}"%'
            for row in connection.execute(
                select(conversations.c.id, conversations.c.participants).where(
                    conversations.c.agent_id == agent_id,
                    type_coerce(conversations.c.participants, Text).like(pattern),
                )
            ).all():
                after = list(dict.fromkeys(survivor_id if p == other_id else p for p in row.participants))
                connection.execute(
                    update(conversations)
                    .where(conversations.c.agent_id == agent_id, conversations.c.id == row.id)
                    .values(participants=after)
                )
            move_participant_index(connection, agent_id, other_id, survivor_id)
            move_addresses(connection, agent_id, other_id, survivor_id)
            replace_record_participant(connection, agent_id, other_id, survivor_id)
            replace_graph_participant(connection, agent_id, other_id, survivor_id)
            seen = [t for t in (survivor.last_interaction_at, other.last_interaction_at) if t is not None]
            connection.execute(
                update(persons)
                .where(persons.c.agent_id == agent_id, persons.c.id == survivor_id)
                .values(
                    display_name=display_name or survivor.display_name,
                    last_interaction_at=max(seen) if seen else None,
                )
            )
            connection.execute(
                delete(persons).where(persons.c.agent_id == agent_id, persons.c.id == other_id)
            )
            return load_person(connection, agent_id, survivor_id)

        return await self._write("merge_persons", work)

    async def get_preference(self, agent_id: str, person_id: str, key: str) -> str | None:
        statement = select(person_preferences.c.value).where(
            person_preferences.c.agent_id == agent_id,
            person_preferences.c.person_id == person_id,
            person_preferences.c.key == key,
        )
        return await self._read("get_preference", lambda c: c.execute(statement).scalar_one_or_none())

    async def set_preference(self, agent_id: str, person_id: str, key: str, value: str) -> None:
        agent_id = checked_id(agent_id, "agent id")
        person_id = checked_id(person_id, "person id")
        statement = insert(person_preferences).values(
            id=new_id(), agent_id=agent_id, person_id=person_id, key=key, value=value
        )
        statement = statement.on_conflict_do_update(
            index_elements=[
                person_preferences.c.agent_id,
                person_preferences.c.person_id,
                person_preferences.c.key,
            ],
            set_={"value": value},
        )
        await self._write("set_preference", lambda connection: connection.execute(statement))

    # conversations -----------------------------------------------------------------------
    async def open_conversation(
        self,
        agent_id: str,
        service: str,
        channel: str,
        participant_ids: Sequence[str],
        now: datetime,
        idle_timeout_seconds: float,
        kind: str = "dialog",
    ) -> Conversation:
        """One open conversation per (service, channel, kind): a reflection on a channel
        does not join the dialog there. Closing an idle one and opening its successor
        happen in the same transaction."""
        agent_id = checked_id(agent_id, "agent id")
        participants = [checked_id(p, "participant id") for p in participant_ids]
        return await self._write(
            "open_conversation",
            lambda c: _open_conversation(
                c, agent_id, service, channel, participants, now, idle_timeout_seconds, kind
            ),
        )

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
                person = _resolve_person(connection, agent_id, identity, display_name, person_kind, now)
            participants = [person.id] if person is not None else []
            conversation = _open_conversation(
                connection, agent_id, service, channel, participants, now, idle_timeout_seconds, kind
            )
            message = make_message(person, conversation)
            _checked_message(message)
            _add_message(connection, message)
            return person, conversation, message

        return await self._write("record_inbound", work)

    async def get_conversation(self, agent_id: str, conversation_id: str) -> Conversation | None:
        params = {"p_agent_id": agent_id, "p_id": conversation_id}
        return await self._fetch_one("get_conversation", _SQL_CONVERSATION, conversation_from_row, params)

    async def list_conversations(
        self, agent_id: str, *, channel: str | None = None, limit: int = 50
    ) -> list[Conversation]:
        """Newest first by start time; ties broken by id (ULID order)."""
        if limit <= 0:
            return []
        statement = select(conversations).where(conversations.c.agent_id == agent_id)
        if channel is not None:
            statement = statement.where(conversations.c.channel == channel)
        statement = statement.order_by(conversations.c.started_at.desc(), conversations.c.id.desc())
        return await self._fetch_all("list_conversations", statement.limit(limit), conversation_from_row)

    async def close_idle_conversations(
        self, agent_id: str | None, now: datetime, idle_timeout_seconds: float
    ) -> list[Conversation]:
        """`agent_id` None sweeps every agent (the scheduler's housekeeping)."""
        threshold = now - timedelta(seconds=idle_timeout_seconds)
        conditions = [conversations.c.closed_at.is_(None), conversations.c.last_activity_at < threshold]
        if agent_id is not None:
            conditions.append(conversations.c.agent_id == agent_id)

        statement = update(conversations).where(*conditions).values(closed_at=now).returning(*conversations.c)
        closed = await self._fetch_all(
            "close_idle_conversations", statement, conversation_from_row, write=True
        )
        return sorted(closed, key=lambda c: (c.last_activity_at, c.id))  # RETURNING has no order

    # dialog ------------------------------------------------------------------------------
    async def add_message(self, message: Message) -> bool:
        """Also touches the open conversation's last activity: a slow reply is activity."""
        _checked_message(message)
        return await self._write("add_message", lambda c: _add_message(c, message))

    async def record_reply(self, message: Message, marker: Callable[[Message], CompletionMarker]) -> Message:
        """The agent's reply (or the one already stored for its event) and the completion
        marker made from it, in one write transaction."""
        _checked_message(message)
        agent_id = checked_id(message.agent_id, "agent id")

        def work(connection: Connection) -> Message:
            stored = message
            if not _add_message(connection, message) and message.event_id is not None:
                params = {"p_agent_id": agent_id, "p_event_id": message.event_id}
                row = connection.execute(_SQL_AGENT_REPLY, params).first()
                stored = message if row is None else message_from_row(row)
            _put_marker(connection, agent_id, marker(stored))
            return stored

        return await self._write("record_reply", work)

    async def recent_messages(self, agent_id: str, conversation_id: str, limit: int) -> list[Message]:
        condition = and_(messages.c.agent_id == agent_id, messages.c.conversation_id == conversation_id)
        return await self._last_messages("recent_messages", condition, limit)

    async def turn_messages(
        self, agent_id: str, conversation_id: str, input_message_id: str, limit: int
    ) -> list[Message]:
        if limit <= 0:
            return []
        params = {
            "p_agent_id": agent_id,
            "p_conversation_id": conversation_id,
            "p_input": input_message_id,
            "p_limit": limit,
        }
        found = await self._fetch_all("turn_messages", _SQL_TURN_MESSAGES, message_from_row, params)
        return sorted(found, key=lambda m: (m.created_at, m.id))

    async def channel_messages(self, agent_id: str, service: str, channel: str, limit: int) -> list[Message]:
        if limit <= 0:
            return []
        params = {"p_agent_id": agent_id, "p_service": service, "p_channel": channel, "p_limit": limit}
        found = await self._fetch_all("channel_messages", _SQL_CHANNEL_MESSAGES, message_from_row, params)
        return list(reversed(found))

    async def _last_messages(self, what: str, condition: ColumnElement[bool], limit: int) -> list[Message]:
        """The last `limit` matching messages, oldest first: (created_at, id) order, so
        messages stamped in the same instant still come back in ULID order."""
        if limit <= 0:
            return []
        statement = (
            select(messages)
            .where(condition)
            .order_by(messages.c.created_at.desc(), messages.c.id.desc())
            .limit(limit)
        )
        return list(reversed(await self._fetch_all(what, statement, message_from_row)))

    async def agent_reply_for_event(self, agent_id: str, event_id: str) -> Message | None:
        params = {"p_agent_id": agent_id, "p_event_id": event_id}
        return await self._fetch_one("agent_reply_for_event", _SQL_AGENT_REPLY, message_from_row, params)

    async def search_messages(
        self,
        agent_id: str,
        query: str,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 20,
    ) -> list[Message]:
        """Every word of `query` must occur (FTS5 AND); best bm25 first, newer first on
        ties. `since` and `until` are inclusive."""
        match = fts_query(query)
        if match is None or limit <= 0:
            return []
        statement = (
            select(messages)
            .join_from(messages, _messages_fts, _messages_fts.c.rowid == literal_column("messages.rowid"))
            .where(text("messages_fts MATCH :match").bindparams(match=match))
            .where(messages.c.agent_id == agent_id)
        )
        if since is not None:
            statement = statement.where(messages.c.created_at >= since)
        if until is not None:
            statement = statement.where(messages.c.created_at <= until)
        statement = statement.order_by(text("bm25(messages_fts)"), messages.c.created_at.desc()).limit(limit)
        return await self._fetch_all("search_messages", statement, message_from_row)

    async def count_messages(self, agent_id: str) -> int:
        statement = select(func.count()).select_from(messages).where(messages.c.agent_id == agent_id)
        return await self._read("count_messages", lambda c: int(c.execute(statement).scalar_one()))

    async def purge_dialog(self, agent_id: str, before: datetime) -> int:
        agent_id = checked_id(agent_id, "agent id")
        closed = select(conversations.c.id).where(
            conversations.c.agent_id == agent_id,
            conversations.c.closed_at.is_not(None),
            conversations.c.closed_at < before,
        )
        statement = delete(messages).where(
            messages.c.agent_id == agent_id,
            messages.c.created_at < before,
            messages.c.conversation_id.in_(closed),
        )
        return await self._write("purge_dialog", lambda c: int(c.execute(statement).rowcount or 0))

    # flags ---------------------------------------------------------------------------------
    async def get_flag(self, agent_id: str, key: str) -> str | None:
        params = {"p_agent_id": agent_id, "p_key": key}
        return await self._read("get_flag", lambda c: c.execute(_SQL_FLAG, params).scalar_one_or_none())

    async def set_flag(self, agent_id: str, key: str, value: str | None) -> None:
        agent_id = checked_id(agent_id, "agent id")
        if value is None:
            statement: Any = _SQL_DELETE_FLAG
            params: dict[str, Any] = {"p_agent_id": agent_id, "p_key": key}
        else:
            statement = _SQL_SET_FLAG
            params = {"id": new_id(), "agent_id": agent_id, "key": key, "value": value}
        await self._write("set_flag", lambda connection: connection.execute(statement, params))

    async def flags_with_prefix(self, agent_id: str, prefix: str, limit: int = 100) -> dict[str, str]:
        # A range scan on the unique (agent_id, key) index; LIKE would need escaping.
        if limit <= 0:
            return {}
        params = {"p_agent_id": agent_id, "p_low": prefix, "p_high": prefix + "\U0010ffff", "p_limit": limit}
        rows = await self._read(
            "flags_with_prefix", lambda c: c.execute(_SQL_FLAGS_WITH_PREFIX, params).all()
        )
        return {row.key: row.value for row in rows}

    async def set_flag_if_absent(self, agent_id: str, key: str, value: str) -> bool:
        """A real compare-and-set: the unique (agent_id, key) decides, not a prior read."""
        agent_id = checked_id(agent_id, "agent id")
        statement = (
            insert(flags)
            .values(id=new_id(), agent_id=agent_id, key=key, value=value)
            .on_conflict_do_nothing()
        )
        return await self._write("set_flag_if_absent", lambda c: c.execute(statement).rowcount == 1)

    async def update_flag(
        self, agent_id: str, key: str, change: Callable[[str | None], str | None]
    ) -> str | None:
        """Read and write in one write transaction (writes are serialised: atomic)."""
        agent_id = checked_id(agent_id, "agent id")

        def work(connection: Connection) -> str | None:
            value = change(connection.execute(_SQL_FLAG, {"p_agent_id": agent_id, "p_key": key}).scalar())
            if value is None:
                connection.execute(_SQL_DELETE_FLAG, {"p_agent_id": agent_id, "p_key": key})
            else:
                connection.execute(
                    _SQL_SET_FLAG, {"id": new_id(), "agent_id": agent_id, "key": key, "value": value}
                )
            return value

        return await self._write("update_flag", work)

    async def close_conversation(
        self, agent_id: str, conversation_id: str, now: datetime
    ) -> Conversation | None:
        statement = (
            update(conversations)
            .where(
                conversations.c.agent_id == agent_id,
                conversations.c.id == conversation_id,
                conversations.c.closed_at.is_(None),
            )
            .values(closed_at=now)
            .returning(*conversations.c)
        )
        closed = await self._fetch_all("close_conversation", statement, conversation_from_row, write=True)
        return closed[0] if closed else None


def fts_query(query: str) -> str | None:
    """User text as an FTS5 query of plain words, or None if it has no words.

    Each whitespace-separated chunk becomes a double-quoted FTS5 string (inner quotes
    doubled), so `*`, `:`, `^`, parentheses, `NEAR`, `AND`/`OR`/`NOT` and column filters
    are just text; the tokenizer then splits the chunk as it split the indexed text
    ("a:b" becomes the phrase "a b"). Chunks with no letter or digit are dropped: they
    would become empty phrases. NULs are spaces.
    """
    # FTS5 reads the query as a C string: a NUL would end it inside an open quote.
    chunks = [chunk for chunk in query.replace("\x00", " ").split() if any(ch.isalnum() for ch in chunk)]
    if not chunks:
        return None
    return " ".join('"' + chunk.replace('"', '""') + '"' for chunk in chunks)


def _message_ids(message: Message) -> list[tuple[str, str]]:
    """The ids a message carries, named for error messages."""
    named = [(message.id, "message id"), (message.agent_id, "agent id")]
    named.append((message.conversation_id, "conversation id"))
    named += [(v, w) for v, w in ((message.person_id, "person id"), (message.event_id, "event id")) if v]
    return named


def _utc(when: datetime) -> datetime:
    """Aware UTC, taking a naive time as UTC (as `ManualClock` and `UTCDateTime` do)."""
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def _unique(ids: Iterable[str]) -> list[str]:
    """Distinct ids in first-seen order."""
    return list(dict.fromkeys(ids))


def _latest(column_: Any, when: datetime) -> Any:
    """SQL for max(column, when) that tolerates NULL: an out-of-order (replayed) event
    never moves a last-activity time backwards."""
    return case((column_.is_(None), when), (column_ < when, when), else_=column_)


def _put_marker(connection: Connection, agent_id: str, marker: CompletionMarker) -> None:
    checked_id(marker.event_id, "event id")
    values = {
        "id": new_id(marker.created_at),
        "agent_id": agent_id,
        "event_id": marker.event_id,
        "transmitted": marker.transmitted,
        "text": marker.text,
        "reason": marker.reason,
        "created_at": marker.created_at,
        "expires_at": marker.expires_at,
    }
    connection.execute(_SQL_PUT_MARKER, values)


def _resolve_person(
    connection: Connection, agent_id: str, identity: Identity, display_name: str, kind: str, now: datetime
) -> Person:
    params = {
        "p_agent_id": agent_id,
        "p_service": identity.service,
        "p_channel": identity.channel,
        "p_speaker_id": identity.speaker_id,
    }
    person_id = connection.execute(_SQL_IDENTITY_PERSON, params).scalar_one_or_none()
    if person_id is None:
        person_id = _create_person(connection, agent_id, identity, display_name, kind, now)
    else:
        touch = {"p_agent_id": agent_id, "p_person_id": person_id, "p_now": now}
        connection.execute(_SQL_TOUCH_PERSON, touch)
    # load_person, over the prepared statements
    params = {"p_agent_id": agent_id, "p_person_id": person_id}
    row = connection.execute(_SQL_PERSON, params).one()
    known = tuple(
        Identity(service=r.service, channel=r.channel, speaker_id=r.speaker_id)
        for r in connection.execute(_SQL_PERSON_IDENTITIES, params)
    )
    return person_from_row(row, known)


def _open_conversation(
    connection: Connection,
    agent_id: str,
    service: str,
    channel: str,
    participant_ids: Sequence[str],
    now: datetime,
    idle_timeout_seconds: float,
    kind: str,
) -> Conversation:
    now = _utc(now)
    participants = _unique(participant_ids)
    idle = timedelta(seconds=idle_timeout_seconds)
    params = {"p_agent_id": agent_id, "p_service": service, "p_channel": channel, "p_kind": kind}
    row = connection.execute(_SQL_OPEN_CONVERSATION, params).first()
    if row is not None and now - row.last_activity_at > idle:
        connection.execute(update(conversations).where(conversations.c.id == row.id).values(closed_at=now))
        row = None
    if row is not None:
        joined = {"p_id": row.id, "p_participants": _unique([*row.participants, *participants]), "p_now": now}
        conversation = conversation_from_row(connection.execute(_SQL_JOIN_CONVERSATION, joined).one())
        joining = [p for p in participants if p not in row.participants]
        index_participants(connection, agent_id, conversation, joining)  # usually none: no write
        return conversation
    statement = insert(conversations).values(
        id=new_id(now), agent_id=agent_id, service=service, channel=channel, kind=kind,
        participants=participants, started_at=now, last_activity_at=now, closed_at=None,
    )  # fmt: skip
    conversation = conversation_from_row(connection.execute(statement.returning(*conversations.c)).one())
    index_participants(connection, agent_id, conversation, participants)
    return conversation


def _checked_message(message: Message) -> None:
    for value, what in _message_ids(message):
        checked_id(value, what)


def _add_message(connection: Connection, message: Message) -> bool:
    values = message.model_dump()
    values["role"] = message.role.value
    # No conflict target: the primary key and the partial unique index on AGENT replies
    # per event_id both make the insert a no-op.
    if connection.execute(_SQL_ADD_MESSAGE, values).rowcount != 1:
        return False
    touch = {"p_agent_id": message.agent_id, "p_id": message.conversation_id, "p_now": message.created_at}
    connection.execute(_SQL_TOUCH_CONVERSATION, touch)
    return True


def _person_for_identity(connection: Connection, agent_id: str, identity: Identity) -> str | None:
    statement = select(identities.c.person_id).where(
        identities.c.agent_id == agent_id,
        identities.c.service == identity.service,
        identities.c.channel == identity.channel,
        identities.c.speaker_id == identity.speaker_id,
    )
    return connection.execute(statement).scalar_one_or_none()


def _create_person(
    connection: Connection, agent_id: str, identity: Identity, display_name: str, kind: str, now: datetime
) -> str:
    person_id = new_id(now)
    connection.execute(
        insert(persons).values(
            id=person_id, agent_id=agent_id, display_name=display_name, kind=kind,
            created_at=now, last_interaction_at=now,
        )
    )  # fmt: skip
    connection.execute(
        insert(identities).values(
            id=new_id(now), agent_id=agent_id, person_id=person_id, created_at=now, **identity.model_dump()
        )
    )
    return person_id


def _require_person(connection: Connection, agent_id: str, person_id: str) -> Any:
    row = connection.execute(
        select(persons).where(persons.c.agent_id == agent_id, persons.c.id == person_id)
    ).first()
    if row is None:
        raise StoreError(f"no contact {person_id!r} for agent {agent_id!r}")
    return row


def _audit(
    connection: Connection,
    agent_id: str,
    subject_id: str,
    observation_id: str,
    action: str,
    before: str | None,
    after: str | None,
    reason: str,
    at: datetime,
) -> None:
    connection.execute(
        insert(observation_changes).values(
            id=new_id(at),
            agent_id=agent_id,
            subject_id=subject_id,
            observation_id=observation_id,
            action=action,
            before=before,
            after=after,
            reason=reason,
            at=at,
        )
    )


# The statements every turn runs, built once. A statement object reused with parameters
# skips both building the expression and SQLAlchemy's cache-key walk (memoised per object);
# together those were most of a turn's store CPU. Parameters are named `p_*` so they never
# collide with the column names SQLAlchemy reserves for VALUES and SET.
def _p(name: str, like: Any = None) -> Any:
    return bindparam(f"p_{name}", type_=None if like is None else like.type)


def _upsert(table_: Any, keys: Sequence[str], fields: Sequence[str]) -> Any:
    """INSERT ... ON CONFLICT (keys) DO UPDATE SET each field to the inserted value."""
    statement = insert(table_)
    return statement.on_conflict_do_update(
        index_elements=[table_.c[k] for k in keys], set_={f: statement.excluded[f] for f in fields}
    )


_SQL_IDENTITY_PERSON = select(identities.c.person_id).where(
    identities.c.agent_id == _p("agent_id"),
    identities.c.service == _p("service"),
    identities.c.channel == _p("channel"),
    identities.c.speaker_id == _p("speaker_id"),
)
_SQL_TOUCH_PERSON = (
    update(persons)
    .where(persons.c.agent_id == _p("agent_id"), persons.c.id == _p("person_id"))
    .values(
        last_interaction_at=_latest(persons.c.last_interaction_at, _p("now", persons.c.last_interaction_at))
    )
)
_SQL_PERSON = select(persons).where(persons.c.agent_id == _p("agent_id"), persons.c.id == _p("person_id"))
_SQL_PERSON_IDENTITIES = (
    select(identities)
    .where(identities.c.agent_id == _p("agent_id"), identities.c.person_id == _p("person_id"))
    .order_by(identities.c.created_at, identities.c.id)
)
_SQL_OPEN_CONVERSATION = select(conversations).where(
    conversations.c.agent_id == _p("agent_id"),
    conversations.c.service == _p("service"),
    conversations.c.channel == _p("channel"),
    conversations.c.kind == _p("kind"),
    conversations.c.closed_at.is_(None),
)
_SQL_CONVERSATION = select(conversations).where(
    conversations.c.agent_id == _p("agent_id"), conversations.c.id == _p("id")
)
_SQL_ADD_MESSAGE = insert(messages).on_conflict_do_nothing()
_SQL_TOUCH_CONVERSATION = (
    update(conversations)
    .where(
        conversations.c.agent_id == _p("agent_id"),
        conversations.c.id == _p("id"),
        conversations.c.closed_at.is_(None),
    )
    .values(
        last_activity_at=_latest(
            conversations.c.last_activity_at, _p("now", conversations.c.last_activity_at)
        )
    )
)
_SQL_JOIN_CONVERSATION = (
    update(conversations)
    .where(conversations.c.id == _p("id"))
    .values(
        participants=_p("participants", conversations.c.participants),
        last_activity_at=_latest(
            conversations.c.last_activity_at, _p("now", conversations.c.last_activity_at)
        ),
    )
    .returning(*conversations.c)
)
# The role as a literal, not a parameter: only then can SQLite use the partial unique index
# on agent replies (otherwise it scans the agent's messages).
_SQL_AGENT_REPLY = select(messages).where(
    messages.c.agent_id == _p("agent_id"),
    messages.c.event_id == _p("event_id"),
    messages.c.role == literal_column(f"'{Role.AGENT.value}'"),
)
# The input first, then the newest others: one read whatever was stored after the input.
_SQL_TURN_MESSAGES = (
    select(messages)
    .where(messages.c.agent_id == _p("agent_id"), messages.c.conversation_id == _p("conversation_id"))
    .order_by(
        case((messages.c.id == _p("input"), 0), else_=1),
        messages.c.created_at.desc(),
        messages.c.id.desc(),
    )
    .limit(_p("limit"))
)
_SQL_CHANNEL_MESSAGES = (
    select(messages)
    .where(
        messages.c.agent_id == _p("agent_id"),
        messages.c.conversation_id.in_(
            select(conversations.c.id)
            .where(
                conversations.c.agent_id == _p("agent_id"),
                conversations.c.service == _p("service"),
                conversations.c.channel == _p("channel"),
            )
            .scalar_subquery()
        ),
    )
    .order_by(messages.c.created_at.desc(), messages.c.id.desc())
    .limit(_p("limit"))
)
_SQL_SAVE_EVENT = insert(events).on_conflict_do_nothing()
_SQL_EVENT = select(events).where(events.c.agent_id == _p("agent_id"), events.c.id == _p("id"))
_MARKER_FIELDS = ("transmitted", "text", "reason", "created_at", "expires_at")
_SQL_PUT_MARKER = _upsert(completion_markers, ("agent_id", "event_id"), _MARKER_FIELDS)
_SQL_MARKER = select(completion_markers).where(
    completion_markers.c.agent_id == _p("agent_id"),
    completion_markers.c.event_id == _p("event_id"),
    completion_markers.c.expires_at > _p("now", completion_markers.c.expires_at),
)
_SQL_FLAG = select(flags.c.value).where(flags.c.agent_id == _p("agent_id"), flags.c.key == _p("key"))
_SQL_SET_FLAG = _upsert(flags, ("agent_id", "key"), ("value",))
_SQL_DELETE_FLAG = delete(flags).where(flags.c.agent_id == _p("agent_id"), flags.c.key == _p("key"))
_SQL_FLAGS_WITH_PREFIX = (
    select(flags.c.key, flags.c.value)
    .where(flags.c.agent_id == _p("agent_id"), flags.c.key >= _p("low"), flags.c.key < _p("high"))
    .order_by(flags.c.key)
    .limit(_p("limit"))
)
_SQL_OBSERVATIONS = (
    select(observations)
    .where(observations.c.agent_id == _p("agent_id"), observations.c.subject_id == _p("subject_id"))
    .order_by(observations.c.observed_at, observations.c.id)
)
