"""Quick facts (SPEC §4.6): a small key → value scratchpad of stable facts the agent keeps
about a person or about itself ("timezone: Europe/Lisbon", "allergy: peanuts").

`get_facts` reads them and `set_fact` writes or forgets one. Whom a fact is about is a
contact's name or id, or "me" / "myself" for the agent itself (stored under the agent's
own id). The scratchpad stays small: at most `MAX_FACTS` per subject, each key at most
`MAX_KEY_CHARS` and each value at most `MAX_VALUE_CHARS` characters. The tools reuse
`OwnToolsContext` (store, agent, clock, audience).

A fact is kept with where it was noted (its provenance): `get_facts` shows only the facts
that may surface here (the newest of a key noted in several places), `set_fact` writes in
this turn's scope, and forgetting removes only what could be seen here — what Ann told the
agent in her direct messages is neither read nor overwritten from another channel.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from persyn.core.errors import ToolError
from persyn.store.base import QuickFact
from persyn.store.capabilities import ContactsStore, MemoryStore
from persyn.tools.builtin._contacts import SELF_WORDS, resolve_contact
from persyn.tools.builtin.own import OwnToolsContext
from persyn.tools.registry import Tool

__all__ = ["MAX_FACTS", "FactsView", "fact_tools"]

MAX_FACTS = 50
MAX_KEY_CHARS = 64
MAX_VALUE_CHARS = 500

_ABOUT = "Whom: a contact's name or id, or 'me' for yourself."


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GetFactsInput(_Input):
    about: str = Field(min_length=1, max_length=200, description=_ABOUT)


class SetFactInput(_Input):
    about: str = Field(min_length=1, max_length=200, description=_ABOUT)
    key: str = Field(
        min_length=1,
        max_length=MAX_KEY_CHARS,
        description="A short label, e.g. 'timezone', 'birthday', 'favourite tea'.",
    )
    value: str | None = Field(
        default=None,
        max_length=MAX_VALUE_CHARS,
        description="The fact, e.g. 'Europe/Lisbon'. Leave it out (or null) to forget the fact.",
    )


class FactsView(BaseModel):
    model_config = ConfigDict(frozen=True)

    subject_id: str
    subject: str = Field(description="Whom the facts are about ('me' for yourself).")
    facts: dict[str, str]


def fact_tools(context: OwnToolsContext[MemoryStore], contacts: ContactsStore | None) -> list[Tool[Any, Any]]:
    """get_facts and set_fact, bound to `context`; facts about others need `contacts` (None:
    the store keeps no contact directory, so only the agent's facts about itself)."""
    store, agent_id, clock = context.store, context.agent_id, context.clock

    async def subject(about: str) -> tuple[str, str]:
        wanted = " ".join(about.split())
        if wanted.casefold() in SELF_WORDS or wanted.upper() == agent_id:
            return agent_id, "me"
        if contacts is None:
            raise ToolError("only facts about yourself are kept here (no contact directory): use 'me'")
        person = await resolve_contact(contacts, agent_id, wanted)
        return person.id, person.display_name

    async def visible(subject_id: str) -> list[QuickFact]:
        return await context.shown(await store.fact_rows(agent_id, subject_id))

    async def view(subject_id: str, name: str) -> FactsView:
        newest: dict[str, QuickFact] = {}
        for fact in await visible(subject_id):
            if fact.key not in newest or fact.updated_at > newest[fact.key].updated_at:
                newest[fact.key] = fact
        facts = {key: fact.value for key, fact in sorted(newest.items())}
        return FactsView(subject_id=subject_id, subject=name, facts=facts)

    async def get(arguments: GetFactsInput) -> FactsView:
        return await view(*await subject(arguments.about))

    async def set_(arguments: SetFactInput) -> FactsView:
        subject_id, name = await subject(arguments.about)
        key = " ".join(arguments.key.split())
        if not key:
            raise ToolError("the key is blank: give a short label such as 'timezone'")
        value = None if arguments.value is None else arguments.value.strip() or None
        seen = await visible(subject_id)
        if value is None:
            forgotten = [fact for fact in seen if fact.key == key]
            if not forgotten:
                raise ToolError(f"there is no fact {key!r} about {name}; get_facts shows the keys")
            for fact in forgotten:
                await store.set_fact(agent_id, subject_id, key, None, clock.now(), provenance=fact.provenance)
            return await view(subject_id, name)
        provenance = await context.run.written()
        here = {fact.key for fact in seen if fact.provenance.scope == provenance.scope}
        if key not in here and len(here) >= MAX_FACTS:
            raise ToolError(
                f"{name} already has {len(here)} quick facts, the most kept; forget one "
                "(set_fact with no value) or fold this into an existing key"
            )
        await store.set_fact(agent_id, subject_id, key, value, clock.now(), provenance=provenance)
        return await view(subject_id, name)

    tools: list[Tool[Any, Any]] = [
        Tool(
            name="get_facts",
            description=(
                "Read the quick facts you keep about someone (name or id) or yourself ('me'): "
                "a timezone, birthday, preference. Check before asking what you may have noted."
            ),
            input_model=GetFactsInput,
            output_model=FactsView,
            handler=get,
        ),
        Tool(
            name="set_fact",
            description=(
                "Note a lasting quick fact about someone (name or id) or yourself ('me') under a "
                "short key; the same key replaces it, no value forgets it. Not for passing remarks."
            ),
            input_model=SetFactInput,
            output_model=FactsView,
            handler=set_,
        ),
    ]
    return tools
