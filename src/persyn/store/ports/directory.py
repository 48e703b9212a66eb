"""The directory sub-ports (SPEC §4.4, §4.5): agents, persons and the identities they write
from (`DirectoryPort`, part of `Store`: who speaks), and the contact directory beyond it —
listing, renaming, identities, merging, contact addresses and per-person preferences
(`ContactsPort`, a capability)."""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from datetime import datetime
from typing import Annotated

from pydantic import AfterValidator

from persyn.core.errors import InputError
from persyn.store.rows import Row, ulid

__all__ = [
    "AgentRow",
    "ContactAddress",
    "ContactsPort",
    "DirectoryPort",
    "Identity",
    "Person",
    "address_label",
    "address_value",
    "checked_address",
]


class AgentRow(Row):
    id: str
    name: str
    created_at: datetime


class Identity(Row):
    """Lookup key of a person on one surface (SPEC §4.4)."""

    service: str
    channel: str
    speaker_id: str


class Person(Row):
    id: Annotated[str, ulid("person id")]
    agent_id: Annotated[str, ulid("agent id")]
    display_name: str
    kind: str  # "human" | "agent"
    created_at: datetime
    last_interaction_at: datetime | None
    identities: tuple[Identity, ...] = ()


_ADDRESS_LABEL = re.compile(r"[a-z0-9][a-z0-9._-]{0,31}")
_ADDRESS_VALUE_MAX = 500


def address_label(label: str) -> str:
    """A contact address's type label as stored: a short lower-case token."""
    canonical = label.strip().lower()
    if not _ADDRESS_LABEL.fullmatch(canonical):
        raise InputError(
            f"invalid address label {label!r}: use 1 to 32 letters, digits, '.', '-' or '_' "
            "(e.g. email, phone, matrix, work)"
        )
    return canonical


def address_value(value: str) -> str:
    """A contact address as stored: trimmed, one line, 1 to 500 characters."""
    canonical = value.strip()
    if not 0 < len(canonical) <= _ADDRESS_VALUE_MAX:
        raise InputError(f"invalid address {value!r}: use 1 to {_ADDRESS_VALUE_MAX} characters")
    if not canonical.isprintable():
        raise InputError(f"invalid address {value!r}: use one line of printable characters")
    return canonical


def checked_address(label: str, value: str) -> tuple[str, str]:
    """A contact address as it is stored: the label a short lower-case token ("email",
    "phone", "matrix", "work"), the value trimmed, one line, 1 to 500 characters."""
    return address_label(label), address_value(value)


class ContactAddress(Row):
    """A way to reach a person (SPEC §4.5) beside the identities they wrote from: an email
    address, a phone number, a Matrix id, under a short type label."""

    person_id: Annotated[str, ulid("person id")]
    label: Annotated[str, AfterValidator(address_label)]  # a lower-case token: "email", "phone", ...
    value: Annotated[str, AfterValidator(address_value)]
    created_at: datetime


class DirectoryPort(ABC):
    """Who the agents are and who speaks, as a turn needs it; part of `Store`."""

    @abstractmethod
    async def ensure_agent(self, agent_id: str, name: str, now: datetime) -> AgentRow: ...

    @abstractmethod
    async def resolve_person(
        self, agent_id: str, identity: Identity, display_name: str, kind: str, now: datetime
    ) -> Person:
        """The person holding `identity`, created on first contact. Updates last interaction."""

    @abstractmethod
    async def get_person(self, agent_id: str, person_id: str) -> Person | None: ...


class ContactsPort(ABC):
    """The contact directory beyond resolving who speaks: listing, renaming, identities,
    merging, addresses and preferences. The "contact directory" capability
    (`store/capabilities.py`)."""

    @abstractmethod
    async def list_agents(self) -> list[AgentRow]: ...

    @abstractmethod
    async def touch_person(self, agent_id: str, person_id: str, at: datetime) -> None:
        """The person was seen at `at` (history brought in by `persyn memory import`): their
        last interaction moves forward to it, never back. An unknown person is left alone."""

    @abstractmethod
    async def list_persons(self, agent_id: str) -> list[Person]: ...

    @abstractmethod
    async def rename_person(self, agent_id: str, person_id: str, display_name: str) -> Person: ...

    @abstractmethod
    async def attach_identity(self, agent_id: str, person_id: str, identity: Identity) -> Person:
        """Add an identity to a person, under the lookup key channels resolve senders by.
        An identity that already names another person is an error (merge them instead)."""

    @abstractmethod
    async def detach_identity(self, agent_id: str, person_id: str, identity: Identity) -> Person:
        """Remove an identity from a person, looking forward: history stays with the person,
        and the next message on that identity makes a new person (first contact)."""

    @abstractmethod
    async def merge_persons(
        self, agent_id: str, survivor_id: str, other_id: str, display_name: str | None = None
    ) -> Person:
        """Fold `other` into `survivor`, retroactively and in one transaction: identities,
        contact addresses, preferences and quick facts the survivor lacks, observations,
        messages, conversation participants and memory participant lists move to the
        survivor; `other` is deleted. Returns the survivor
        (renamed when `display_name` is given)."""

    @abstractmethod
    async def add_address(self, agent_id: str, person_id: str, label: str, value: str, now: datetime) -> bool:
        """Give a person a contact address (label and value as `checked_address`
        accepts them: bad ones are an InputError). False, and nothing changes, when they
        already have it."""

    @abstractmethod
    async def remove_address(self, agent_id: str, person_id: str, label: str, value: str) -> bool:
        """Take a contact address away; False when the person had no such address."""

    @abstractmethod
    async def addresses(self, agent_id: str, person_id: str | None = None) -> list[ContactAddress]:
        """A person's contact addresses (None: everyone's), oldest first."""

    @abstractmethod
    async def get_preference(self, agent_id: str, person_id: str, key: str) -> str | None: ...

    @abstractmethod
    async def set_preference(self, agent_id: str, person_id: str, key: str, value: str) -> None: ...
