"""Placing and ending phone calls (SPEC §4.6, issue 36 item 4): `place_call` and `end_call`.

The contact is named as for `message_contact` (`_contacts.resolve_contact`); the call goes to
their phone identity in the directory (`persyn contacts attach WHO phone "" +1555…`), and a
contact without one is a tool error saying so. The rules a call must pass — the provenance of
the run against the callee, the per-run cap it shares with messages, the autonomy budget of a
self-initiated run, quiet hours, the daily call cap — are the runtime's (`PhoneLine.place` is
bound to the activation by `runtime/background/calls.py`): a refusal there is a `ToolError` the
model reads. The tools are offered only when the runtime gives a `PhoneLine` (`[voice]` enabled
with a number to call from); `end_call` only on a call.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from persyn.core.errors import ToolError
from persyn.store.capabilities import ContactsStore
from persyn.tools.builtin._contacts import describe, resolve_contact
from persyn.tools.registry import Tool

__all__ = ["PHONE_SERVICE", "CallEnded", "CallPlaced", "PhoneLine", "call_tools"]

PHONE_SERVICE = "phone"  # the directory's service of phone numbers (`channels/voice/channel.py`)


@dataclass(frozen=True)
class PhoneLine:
    """The phone as one activation reaches it: `place(person_id, number, name, purpose)` and,
    on a call, `end(goodbye)`; each returns what happened, or raises `ToolError`."""

    place: Callable[[str, str, str, str], Awaitable[str]]
    end: Callable[[str], Awaitable[str]] | None = None


class PlaceCallInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    contact: str = Field(min_length=1, max_length=200, description="The contact's name or id.")
    purpose: str = Field(
        min_length=1,
        max_length=500,
        description="Why you are calling them, in a sentence: you are reminded of it when they answer.",
    )


class CallPlaced(BaseModel):
    model_config = ConfigDict(frozen=True)

    person_id: str
    name: str
    number: str
    status: str = Field(description="What the phone line reported.")


class EndCallInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    goodbye: str = Field(
        default="Goodbye!", min_length=1, max_length=300, description="What you say before hanging up."
    )


class CallEnded(BaseModel):
    model_config = ConfigDict(frozen=True)

    status: str


def call_tools(store: ContactsStore, agent_id: str, line: PhoneLine) -> list[Tool[Any, Any]]:
    """place_call, and end_call when the activation is on a call."""

    async def place(arguments: PlaceCallInput) -> CallPlaced:
        purpose = " ".join(arguments.purpose.split())
        if not purpose:
            raise ToolError("say why you are calling: the purpose is empty")
        person = await resolve_contact(store, agent_id, arguments.contact)
        numbers = sorted(i.speaker_id for i in person.identities if i.service == PHONE_SERVICE)
        if not numbers:
            raise ToolError(
                f"{describe(person)} has no phone number in your contacts, so you cannot call them; "
                "write to them instead, or the operator can add one"
            )
        status = await line.place(person.id, numbers[0], person.display_name, purpose)
        return CallPlaced(person_id=person.id, name=person.display_name, number=numbers[0], status=status)

    tools: list[Tool[Any, Any]] = [
        Tool(
            name="place_call",
            description=(
                "Phone someone you know (by name or id), on your own initiative, saying why: "
                "when they answer you talk with them. Not at night, only a few a day."
            ),
            input_model=PlaceCallInput,
            output_model=CallPlaced,
            handler=place,
        )
    ]
    end = line.end
    if end is not None:

        async def hang_up(arguments: EndCallInput) -> CallEnded:
            return CallEnded(status=await end(" ".join(arguments.goodbye.split()) or "Goodbye!"))

        tools.append(
            Tool(
                name="end_call",
                description="End this phone call politely: your goodbye is said, then you hang up.",
                input_model=EndCallInput,
                output_model=CallEnded,
                handler=hang_up,
            )
        )
    return tools
