"""Quick facts (SPEC §4.6): a small key → value scratchpad of stable facts the agent keeps
about a person or about itself ("timezone: Europe/Lisbon", "allergy: peanuts").

`get_facts` reads them and `set_fact` writes or forgets one. Whom a fact is about is a
contact's name or id, or "me" / "myself" for the agent itself (stored under the agent's
own id). The scratchpad stays small: at most `MAX_FACTS` per subject, each key at most
`MAX_KEY_CHARS` and each value at most `MAX_VALUE_CHARS` characters. The tools reuse
`OwnToolsContext` (store, agent, clock).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from persyn.core.errors import ToolError
from persyn.tools._contacts import SELF_WORDS, resolve_contact
from persyn.tools.own import OwnToolsContext
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


def fact_tools(context: OwnToolsContext) -> list[Tool[Any, Any]]:
    """get_facts and set_fact, bound to `context`."""
    store, agent_id, clock = context.store, context.agent_id, context.clock

    async def subject(about: str) -> tuple[str, str]:
        wanted = " ".join(about.split())
        if wanted.casefold() in SELF_WORDS or wanted.upper() == agent_id:
            return agent_id, "me"
        person = await resolve_contact(store, agent_id, wanted)
        return person.id, person.display_name

    async def view(subject_id: str, name: str) -> FactsView:
        facts = await store.facts(agent_id, subject_id)
        return FactsView(subject_id=subject_id, subject=name, facts=dict(sorted(facts.items())))

    async def get(arguments: GetFactsInput) -> FactsView:
        return await view(*await subject(arguments.about))

    async def set_(arguments: SetFactInput) -> FactsView:
        subject_id, name = await subject(arguments.about)
        key = " ".join(arguments.key.split())
        if not key:
            raise ToolError("the key is blank: give a short label such as 'timezone'")
        value = None if arguments.value is None else arguments.value.strip() or None
        current = await store.facts(agent_id, subject_id)
        if value is not None and key not in current and len(current) >= MAX_FACTS:
            raise ToolError(
                f"{name} already has {len(current)} quick facts, the most kept; forget one "
                "(set_fact with no value) or fold this into an existing key"
            )
        if value is None and key not in current:
            raise ToolError(f"there is no fact {key!r} about {name}; get_facts shows the keys")
        await store.set_fact(agent_id, subject_id, key, value, clock.now())
        return await view(subject_id, name)

    tools: list[Tool[Any, Any]] = [
        Tool(
            name="get_facts",
            description=(
                "Read the quick facts you keep about someone (by name or id) or about yourself "
                "('me'): stable details like a timezone, birthday or preference. Use it before "
                "asking someone something you may already have noted."
            ),
            input_model=GetFactsInput,
            output_model=FactsView,
            handler=get,
        ),
        Tool(
            name="set_fact",
            description=(
                "Note a stable quick fact about someone (by name or id) or about yourself ('me'), "
                "under a short key; the same key replaces the old value, and no value forgets "
                "it. For lasting details worth having at hand, not for passing remarks."
            ),
            input_model=SetFactInput,
            output_model=FactsView,
            handler=set_,
        ),
    ]
    return tools
