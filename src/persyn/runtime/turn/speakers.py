"""Who is talking: a speaker's person (made on first contact) and the display name they chose
(SPEC App. B), from the store alone.

A channel asks this before anything else, and it needs nothing of the runtime but the store:
`persyn chat` resolves its operator and shows the prompt while DBOS and the models are still
loading behind it. `Runtime.resolve_speaker` is this function over the runtime's store.

A chosen name is a preference in the contact directory: a store without it
(`store/capabilities.py`) remembers none, and knows no speaker ahead of their first message.
"""

from __future__ import annotations

from datetime import datetime

from persyn.core.events import Speaker, speaker_name
from persyn.store.base import Identity, Store
from persyn.store.capabilities import capability
from persyn.store.ports.directory import ContactsPort

__all__ = ["DISPLAY_NAME_PREF", "knows_speaker", "remember_display_name", "resolve_speaker"]

DISPLAY_NAME_PREF = "display_name"


async def resolve_speaker(
    store: Store, agent_id: str, speaker: Speaker, now: datetime
) -> tuple[str, str | None]:
    """The person id behind `speaker` (created on first contact) and the display name they
    chose earlier, if any."""
    identity = Identity(service=speaker.service, channel=speaker.channel, speaker_id=speaker.speaker_id)
    person = await store.resolve_person(agent_id, identity, speaker.display_name, speaker.kind, now)
    contacts = capability(store, ContactsPort)
    chosen = (
        None if contacts is None else await contacts.get_preference(agent_id, person.id, DISPLAY_NAME_PREF)
    )
    return person.id, chosen


async def knows_speaker(store: Store, agent_id: str, speaker: Speaker) -> bool:
    """Whether `speaker` is already a contact of the agent (their lookup key is in its
    directory); nothing is created. One read of the agent's directory: it answers rare
    questions (an invitation), not every message."""
    identity = Identity(service=speaker.service, channel=speaker.channel, speaker_id=speaker.speaker_id)
    contacts = capability(store, ContactsPort)
    people = [] if contacts is None else await contacts.list_persons(agent_id)
    return any(identity in person.identities for person in people)


async def remember_display_name(store: Store, agent_id: str, person_id: str, name: str) -> None:
    """The name a person chose (`/name`): cleaned like every speaker's name (`speaker_name`),
    since it is what the prompt calls them from now on."""
    name = speaker_name(name)
    contacts = capability(store, ContactsPort)
    if contacts is None:
        return
    await contacts.set_preference(agent_id, person_id, DISPLAY_NAME_PREF, name)
    await contacts.rename_person(agent_id, person_id, name)
