"""Agents, persons and their identities, merges and preferences on SQLite (the directory
sub-port; contact addresses and the participant index are in `directory.py`)."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import (
    Text,
    cast,
    delete,
    exists,
    select,
    update,
)
from sqlalchemy.engine import Connection

from persyn.core.errors import StoreError
from persyn.core.ids import new_id
from persyn.store.base import (
    AgentRow,
    Identity,
    Person,
)
from persyn.store.schema.tables import (
    agents,
    checked_id,
    conversations,
    identities,
    messages,
    observation_changes,
    observations,
    person_preferences,
    persons,
    quick_facts,
)
from persyn.store.sql.directory import move_addresses, move_participant_index, require_person
from persyn.store.sql.dml import insert
from persyn.store.sql.graph_write import replace_graph_participant
from persyn.store.sql.mapping import agent_from_row, identities_by_person, load_person, person_from_row
from persyn.store.sql.memory import replace_record_participant
from persyn.store.sql.work import SqlWork, latest, p

__all__ = ["SqlPersons", "resolve_person_row"]


class SqlPersons(SqlWork):
    """The persons half of `SQLiteStore`."""

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

    # persons ---------------------------------------------------------------------------
    async def resolve_person(
        self, agent_id: str, identity: Identity, display_name: str, kind: str, now: datetime
    ) -> Person:
        """Look-up and first-contact creation happen in one write transaction, and writes
        are serialised (one thread here, BEGIN IMMEDIATE across processes), so concurrent
        first contacts still yield one person; the unique identity key is the backstop."""
        agent_id = checked_id(agent_id, "agent id")
        return await self._write(
            "resolve_person", lambda c: resolve_person_row(c, agent_id, identity, display_name, kind, now)
        )

    async def touch_person(self, agent_id: str, person_id: str, at: datetime) -> None:
        params = {"p_agent_id": checked_id(agent_id, "agent id"), "p_person_id": person_id, "p_now": at}

        def work(connection: Connection) -> None:
            connection.execute(_SQL_TOUCH_PERSON, params)

        await self._write("touch_person", work)

    async def get_person(self, agent_id: str, person_id: str) -> Person | None:
        params = {"p_agent_id": agent_id, "p_person_id": person_id}

        def work(connection: Connection) -> Person | None:
            # `load_person` over the prepared statements (every turn reads its speaker).
            row = connection.execute(_SQL_PERSON, params).first()
            if row is None:
                return None
            return person_from_row(row, _identities(connection, params))

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

    async def attach_identity(self, agent_id: str, person_id: str, identity: Identity) -> Person:
        agent_id = checked_id(agent_id, "agent id")

        def work(connection: Connection) -> Person:
            require_person(connection, agent_id, person_id)
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
            require_person(connection, agent_id, person_id)
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
            survivor = require_person(connection, agent_id, survivor_id)
            other = require_person(connection, agent_id, other_id)
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
                    cast(conversations.c.participants, Text).like(pattern),
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


def resolve_person_row(
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
        if kind == "agent":
            # The network's metadata or the configuration (`[channels.irc] bots`) now says
            # this speaker is a bot: a contact first met as a person becomes one. Never the
            # reverse: "agent" may have been the operator's word, and a bot can speak unflagged.
            connection.execute(_SQL_MARK_AGENT, {"p_agent_id": agent_id, "p_person_id": person_id})
    # load_person, over the prepared statements
    params = {"p_agent_id": agent_id, "p_person_id": person_id}
    row = connection.execute(_SQL_PERSON, params).one()
    return person_from_row(row, _identities(connection, params))


def _identities(connection: Connection, params: dict[str, str]) -> tuple[Identity, ...]:
    """A person's identities, oldest first (`params`: `p_agent_id`, `p_person_id`)."""
    return tuple(
        Identity(service=r.service, channel=r.channel, speaker_id=r.speaker_id)
        for r in connection.execute(_SQL_PERSON_IDENTITIES, params)
    )


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


_SQL_IDENTITY_PERSON = select(identities.c.person_id).where(
    identities.c.agent_id == p("agent_id"),
    identities.c.service == p("service"),
    identities.c.channel == p("channel"),
    identities.c.speaker_id == p("speaker_id"),
)


_SQL_TOUCH_PERSON = (
    update(persons)
    .where(persons.c.agent_id == p("agent_id"), persons.c.id == p("person_id"))
    .values(
        last_interaction_at=latest(persons.c.last_interaction_at, p("now", persons.c.last_interaction_at))
    )
)


_SQL_MARK_AGENT = (
    update(persons)
    .where(persons.c.agent_id == p("agent_id"), persons.c.id == p("person_id"), persons.c.kind != "agent")
    .values(kind="agent")
)


_SQL_PERSON = select(persons).where(persons.c.agent_id == p("agent_id"), persons.c.id == p("person_id"))


_SQL_PERSON_IDENTITIES = (
    select(identities)
    .where(identities.c.agent_id == p("agent_id"), identities.c.person_id == p("person_id"))
    .order_by(identities.c.created_at, identities.c.id)
)
