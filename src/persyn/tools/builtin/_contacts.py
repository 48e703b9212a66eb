"""Finding the person a tool call names: by id, by name, or by an identity's speaker id.

Shared by the quick-fact and messaging tools. Names are matched case-insensitively: an
exact display name first, then a name that starts with the words given ("Sam" finds "Sam
Okafor"), then an identity's speaker id; several matches are an error that lists them, so
the model can call again with the id it means.
"""

from __future__ import annotations

from datetime import UTC, datetime

from persyn.core.errors import InputError, ToolError
from persyn.core.ids import is_id, parse_id
from persyn.store.base import Person
from persyn.store.capabilities import ContactsStore

__all__ = [
    "MAX_LISTED",
    "SELF_WORDS",
    "UnknownContact",
    "describe",
    "folded",
    "named_contact",
    "resolve_contact",
    "resolve_exactly",
]

# Words that mean the agent itself where a tool takes "about whom".
SELF_WORDS = frozenset({"me", "myself", "self"})
MAX_LISTED = 10  # names listed in an error, most recently met first


class UnknownContact(ToolError):
    """No contact goes by that name or id (as opposed to several: a plain ToolError), so a
    caller that may create one (`persyn memory import`) can tell the two apart."""


def folded(name: str) -> str:
    """A name as it is compared: case and spacing aside."""
    return " ".join(name.split()).casefold()


def describe(person: Person) -> str:
    return f"{person.display_name} ({person.id})"


def _recent_first(people: list[Person]) -> list[Person]:
    epoch = datetime.min.replace(tzinfo=UTC)
    return sorted(people, key=lambda p: (p.last_interaction_at or p.created_at or epoch, p.id), reverse=True)


def _listing(people: list[Person]) -> str:
    shown = [describe(p) for p in _recent_first(people)[:MAX_LISTED]]
    more = len(people) - len(shown)
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


async def resolve_contact(store: ContactsStore, agent_id: str, who: str) -> Person:
    """The one person `who` names, or a ToolError the model can act on."""
    wanted = " ".join(who.split())
    if not wanted:
        raise ToolError("say whom: a contact's name or id")
    if is_id(wanted):
        person = await store.get_person(agent_id, parse_id(wanted))
        if person is None:
            raise UnknownContact(f"there is no contact with id {wanted!r}")
        return person
    people = await store.list_persons(agent_id)
    key = wanted.casefold()
    for matches in (
        [p for p in people if folded(p.display_name) == key],
        [p for p in people if folded(p.display_name).startswith(key + " ")],
        [p for p in people if any(i.speaker_id.casefold() == key for i in p.identities)],
    ):
        if len(matches) == 1:
            return matches[0]
        if matches:
            raise ToolError(
                f"{len(matches)} contacts match {wanted!r}: {_listing(matches)}; call again with the id"
            )
    if not people:
        raise UnknownContact(f"there is no contact named {wanted!r}: you know nobody yet")
    raise UnknownContact(f"there is no contact named {wanted!r}; your contacts include {_listing(people)}")


async def resolve_exactly(store: ContactsStore, agent_id: str, who: str) -> Person:
    """The one person `who` names with no guessing, for the operator's commands that attach
    history to someone (`persyn memory import`, `memory recall --participant`): an id, else
    an exact display name (case and spacing aside) or an identity's exact speaker id. No
    prefixes: "Ann" is not "Ann Evil", who would otherwise inherit Ann's imported history.
    Several matches are a ToolError listing them; none, UnknownContact."""
    wanted = " ".join(who.split())
    if not wanted:
        raise ToolError("say whom: a contact's name or id")
    if is_id(wanted):
        person = await store.get_person(agent_id, parse_id(wanted))
        if person is None:
            raise UnknownContact(f"no contact with id {wanted!r}")
        return person
    key = wanted.casefold()
    people = await store.list_persons(agent_id)
    matches = [
        p
        for p in people
        if folded(p.display_name) == key or any(i.speaker_id.casefold() == key for i in p.identities)
    ]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise ToolError(f"{len(matches)} contacts match {wanted!r}: {_listing(matches)}; give the id")
    longer = [p for p in people if folded(p.display_name).startswith(key + " ")]
    hint = f"; perhaps {_listing(longer)}: give the whole name or the id" if longer else ""
    raise UnknownContact(f"no contact named exactly {wanted!r}{hint}")


async def named_contact(store: ContactsStore, agent_id: str, agent_name: str, who: str) -> Person:
    """The contact an operator's command names (`persyn contacts show Sam`, `people dossier`,
    `memory recall --participant`, `memory import --as`): exactly `resolve_exactly`, an id or
    a unique exact name, so a command never acts on someone its operator did not mean. None
    or several are an InputError (several listed with their ids), naming the agent and where
    to look."""
    try:
        return await resolve_exactly(store, agent_id, who)
    except UnknownContact as exc:
        raise InputError(f"agent {agent_name} has {exc} (see `persyn contacts list`)") from exc
    except ToolError as exc:
        raise InputError(f"agent {agent_name}: {exc}") from exc
