"""The response pipeline (SPEC §4) as small named steps.

receive → assemble prompt → respond → critique → refine → decide → transmit → store dialog
(critique, refine and decide live in `deliberation`). Each step is a plain async function over
explicit inputs so it can be tested alone with a model double; the durable runtime wraps each
in a DBOS step.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta
from typing import Protocol

from pydantic import BaseModel, ConfigDict

from persyn.cognition.deliberation import Evidence, Parked
from persyn.cognition.prompt import ContextSection, assemble_prompt
from persyn.core.config import AgentConfig, Settings, Task
from persyn.core.errors import ModelError
from persyn.core.events import CompletionMarker, Event, EventKind, inbound_message_id
from persyn.core.ids import new_id
from persyn.gateway.base import Completion, Prompt, SinkCallable, ToolCall, ToolSpec
from persyn.store.base import Conversation, Identity, Message, Person, ReplyUpkeep, Role, Store
from persyn.store.ports.outbox import OutboxRow

__all__ = [
    "PRESENT_META",
    "ContextSource",
    "Prepared",
    "Reply",
    "Responder",
    "TurnSetup",
    "arrange_turn_dialog",
    "build_prompt",
    "park",
    "parked_for",
    "read_turn_dialog",
    "receive",
    "record_reply",
    "respond",
    "waited_on",
]

log = logging.getLogger(__name__)

PRESENT_META = "present"  # an event's meta: who a self-initiated run speaks in front of


class TurnSetup(BaseModel):
    """What `receive` resolved: serialisable, so a durable step can return it."""

    model_config = ConfigDict(frozen=True)

    agent_id: str
    event_id: str
    service: str
    channel: str
    conversation_id: str
    person_id: str | None
    speaker_name: str
    inbound_message_id: str
    received_at: datetime
    # Whether the message is for the agent (a 1:1 channel, or it names the agent); overheard
    # traffic gets an engagement decision before any draft is written.
    addressed: bool = True
    # "inline" or "deferred" deliberation for this turn (SPEC §4), fixed when received.
    mode: str = "inline"
    # What started the activation: "message", or a self-initiated "reminder" / "heartbeat".
    kind: str = "message"
    # Who had spoken in the conversation when the input was stored (None: not known here;
    # read the conversation).
    participant_ids: tuple[str, ...] | None = None
    # The agent's current emotional state is one in which it may decline optional requests
    # (`[emotion] decline_when`): then even a short reply gets a model decision.
    reluctant: bool = False


class Reply(BaseModel):
    """The candidate the agent produced, or why it could not produce one."""

    model_config = ConfigDict(frozen=True)

    text: str | None
    failure: str | None = None
    usage_id: str | None = None
    # Tools the model asked for before answering (ToolCall dumps); the tool loop runs them.
    tool_calls: tuple[ToolCall, ...] = ()


class Prepared(BaseModel):
    """The respond step's prompt plus what deliberation needs from it (serialisable)."""

    model_config = ConfigDict(frozen=True)

    prompt: Prompt
    evidence: tuple[Evidence, ...] = ()
    woven: tuple[str, ...] = ()  # flag keys of parked conclusions folded into this prompt

    def evidence_items(self) -> list[Evidence]:
        return list(self.evidence)


class ContextSource(Protocol):
    """A source of volatile context (memories, graph, goals...): fetched per turn."""

    async def __call__(self, setup: TurnSetup, query: str) -> Sequence[ContextSection]: ...


class Responder(Protocol):
    async def complete(
        self,
        task: Task,
        prompt: Prompt,
        *,
        tools: Sequence[ToolSpec] = (),
        sink: SinkCallable | None = None,
        phase: str = "draft",
    ) -> Completion: ...


_PARKED = "parked:"


def parked_prefix(service: str, channel: str) -> str:
    return f"{_PARKED}{service}:{channel}:"


async def park(store: Store, setup: TurnSetup, parked: Parked, now: datetime) -> None:
    """Leave a deferred conclusion for the next turn of the same conversation."""
    value = json.dumps(
        {"at": now.isoformat(), "conversation_id": setup.conversation_id, **parked.model_dump(mode="json")}
    )
    await store.set_flag(setup.agent_id, parked_prefix(setup.service, setup.channel) + setup.event_id, value)


async def parked_for(store: Store, setup: TurnSetup, now: datetime, ttl: timedelta) -> dict[str, Parked]:
    """Unexpired conclusions parked in the turn's conversation, oldest first.

    A conclusion quotes the reply it reconsiders, so it is recent dialog of the conversation
    it was parked in: another conversation on the channel — perhaps with someone else —
    never sees it (earlier conversations reach a prompt only as memories). Listed by channel
    so that expired ones, of any conversation there, are dropped; unreadable ones (and those
    that do not say their conversation) are dropped too."""
    found: dict[str, Parked] = {}
    prefix = parked_prefix(setup.service, setup.channel)
    for key, raw in (await store.flags_with_prefix(setup.agent_id, prefix, 20)).items():
        try:
            data = json.loads(raw)
            at = datetime.fromisoformat(data.pop("at"))
            conversation_id = str(data.pop("conversation_id"))
            parked = Parked.model_validate(data)
        except (ValueError, KeyError, TypeError):
            log.warning("dropping unreadable parked conclusion %s", key)
            await store.set_flag(setup.agent_id, key, None)
            continue
        if now - at > ttl:
            await store.set_flag(setup.agent_id, key, None)
            continue
        if conversation_id == setup.conversation_id:
            found[key] = parked
    return found


def _names(text: str, name: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(name)}(?!\w)", text, re.IGNORECASE) is not None


async def receive(
    store: Store, settings: Settings, event: Event, now: datetime, agent_name: str = ""
) -> TurnSetup:
    """Resolve the speaker to a person, resolve or open the conversation, store the input.
    A message that names the agent counts as addressed to it even on a busy channel."""
    speaker = None
    if event.speaker is not None:
        identity = Identity(
            service=event.speaker.service, channel=event.speaker.channel, speaker_id=event.speaker.speaker_id
        )
        speaker = (identity, event.speaker.display_name, event.speaker.kind)
    # Derived, not fresh: if this step is re-run after a crash the input is not stored twice.
    message_id = inbound_message_id(event.id, event.received_at)
    # Dialog is read in time order, so an input stamped by a sender's clock that runs ahead
    # of this one (`persyn --now <later> send`) would sort after everything said after it.
    # Nothing arrives later than the moment it is received.
    arrived = min(event.received_at, now)

    def inbound(person: Person | None, conversation: Conversation) -> Message:
        speaker_name = "system"
        if event.speaker is not None and person is not None:
            speaker_name = event.speaker.display_name or person.display_name
        return Message(
            id=message_id,
            agent_id=event.agent_id,
            conversation_id=conversation.id,
            role=Role.USER if event.speaker is not None else Role.SYSTEM,
            person_id=person.id if person is not None else None,
            speaker_name=speaker_name,
            text=event.text,
            created_at=arrived,
            event_id=event.id,
        )

    # Person, conversation and input together (one transaction where the store can).
    person, conversation, message = await store.record_inbound(
        event.agent_id,
        speaker,
        event.service,
        event.channel,
        now,
        settings.conversation.idle_timeout_minutes * 60,
        "dialog" if event.kind is EventKind.MESSAGE else "reflection",
        inbound,
    )
    person_id = person.id if person is not None else None
    speaker_name = message.speaker_name
    addressed = event.addressed or (bool(agent_name) and _names(event.text, agent_name))
    return TurnSetup(
        kind=event.kind.value,
        addressed=addressed,
        agent_id=event.agent_id,
        event_id=event.id,
        service=event.service,
        channel=event.channel,
        conversation_id=conversation.id,
        person_id=person_id,
        speaker_name=speaker_name,
        inbound_message_id=message_id,
        received_at=arrived,
        participant_ids=tuple(dict.fromkeys((*conversation.participant_ids, *_present(event)))),
    )


def _present(event: Event) -> tuple[str, ...]:
    """People a self-initiated run speaks in front of (`PRESENT_META`: comma-separated ids,
    set where the run is fired); a message's are its conversation's."""
    if event.kind is EventKind.MESSAGE:
        return ()
    return tuple(p for p in event.meta.get(PRESENT_META, "").split(",") if p)


def arrange_turn_dialog(messages: Sequence[Message], event_id: str) -> list[Message]:
    """A turn's dialog in the order the agent lived it: everything said in the conversation
    apart from this turn, in true (created_at, id) order, then this turn's own messages —
    its input first, then whatever the turn added (a heartbeat's self-assessment).

    An inbound row carries when it arrived, a reply when it was written, so a message that
    waited in the queue behind another on the same channel is older than the reply to the
    one before it. Read in plain time order, the prompt would end with that reply and the
    model would be asked to continue it; here the input is always what the turn answers,
    with what was said while it waited shown before it (and marked so by `waited_on`).

    Once the turn's own reply is stored (a deferred critique, a replayed transmit), it and
    whatever was said after it are left out: what is judged is the dialog the reply answered,
    not the reply twice, nor later turns it could not have known."""
    replies = [m.created_at for m in messages if m.event_id == event_id and m.role is Role.AGENT]
    if replies:
        messages = [m for m in messages if m.created_at < min(replies)]
    others = [m for m in messages if m.event_id != event_id]
    own = [m for m in messages if m.event_id == event_id]
    return sorted(others, key=_true_order) + sorted(own, key=_true_order)


def _true_order(message: Message) -> tuple[datetime, str]:
    return (message.created_at, message.id)


def waited_on(dialog: Sequence[Message], setup: TurnSetup) -> int:
    """How many messages of the dialog were stored after the turn's input arrived (while it
    waited in the queue): the prompt says so, rather than pretend they came first."""
    return sum(1 for m in dialog if m.event_id != setup.event_id and m.created_at > setup.received_at)


async def read_turn_dialog(store: Store, settings: Settings, setup: TurnSetup) -> list[Message]:
    """The current conversation's recent dialog for a turn, arranged (`arrange_turn_dialog`).
    Only this conversation: an earlier one on the channel — closed, perhaps with someone
    else — reaches a prompt only as memories, through the access rules (`memory.access`)."""
    found = await store.turn_messages(
        setup.agent_id,
        setup.conversation_id,
        setup.inbound_message_id,
        settings.conversation.recent_dialog_messages,
    )
    return arrange_turn_dialog(found, setup.event_id)


async def build_prompt(
    store: Store,
    settings: Settings,
    agent: AgentConfig,
    setup: TurnSetup,
    now: datetime,
    query: str,
    sources: Sequence[ContextSource] = (),
    read_dialog: Callable[[], Awaitable[Sequence[Message]]] | None = None,
) -> Prepared:
    """The current conversation's recent dialog (`read_turn_dialog`), every context
    source's sections, and any conclusion deliberation parked in this conversation since the
    agent last spoke in it. `read_dialog` reads the dialog instead of the store (the runtime
    keeps what it read for the turn's later steps)."""

    async def fetch(source: ContextSource) -> Sequence[ContextSection]:
        try:
            return await source(setup, query)
        except Exception as exc:  # fail soft (SPEC §2): a broken source costs context, not the turn
            log.warning("context source %r failed: %s", source, exc)
            return []

    # Independent reads, so they overlap (the store reads on a pool of threads); the
    # sections keep the sources' order.
    ttl = timedelta(hours=settings.deliberation.parked_ttl_hours)
    dialog, parked, fetched = await asyncio.gather(
        read_dialog() if read_dialog is not None else read_turn_dialog(store, settings, setup),
        parked_for(store, setup, now, ttl),
        asyncio.gather(*(fetch(source) for source in sources)),
    )
    sections: list[ContextSection] = [section for found in fetched for section in found]
    for item in parked.values():
        sections.append(ContextSection("Second thoughts about my last reply", item.section()))
    situation = None
    if setup.person_id is not None:
        situation = f"You are talking with {setup.speaker_name} on {setup.service} ({setup.channel})."
    waited = waited_on(dialog, setup)
    if waited:
        note = (
            f"The last message reached you before the {waited} message(s) just above it were said "
            "(it waited while you answered earlier ones): answer it now."
        )
        situation = f"{situation} {note}" if situation else note
    prompt = assemble_prompt(agent, now=now, dialog=dialog, sections=sections, situation=situation)
    evidence = tuple(e for section in sections for e in section.evidence)
    return Prepared(prompt=prompt, evidence=evidence, woven=tuple(parked))


async def respond(
    responder: Responder, prompt: Prompt, sink: SinkCallable | None = None, tools: Sequence[ToolSpec] = ()
) -> Reply:
    """Generate the candidate (or the first tool calls). A failed generation degrades to a
    stated failure, never a crash; an empty one (small local models sometimes end their turn
    at once) is asked for again, once."""
    try:
        completion = await responder.complete(Task.RESPOND, prompt, tools=tools, sink=sink, phase="draft")
        if not completion.text.strip() and not completion.tool_calls:
            log.info("the model returned an empty reply; asking once more")
            completion = await responder.complete(Task.RESPOND, prompt, tools=tools, sink=sink, phase="draft")
    except ModelError as exc:
        return Reply(text=None, failure=str(exc))
    text = completion.text.strip()
    if completion.tool_calls:
        return Reply(text=text, usage_id=completion.usage_id, tool_calls=completion.tool_calls)
    if not text:
        return Reply(text=None, failure="the model returned an empty reply", usage_id=completion.usage_id)
    return Reply(text=text, usage_id=completion.usage_id)


async def record_reply(
    store: Store,
    agent_name: str,
    setup: TurnSetup,
    text: str,
    now: datetime,
    marker: Callable[[Message], CompletionMarker] | None = None,
    outbox: Callable[[Message], OutboxRow | None] | None = None,
    upkeep: ReplyUpkeep | None = None,
) -> Message:
    """Store what the agent said, and with `marker` the completion marker (and with `outbox`
    the outbox row, and the `upkeep`) made from it, in one transaction where the store can.
    Idempotent per event: a replayed transmit stores nothing new (the store keeps one AGENT
    reply per event) and gets the reply stored the first time."""
    # A reply never sorts before what it answers, even on a coarse or frozen clock.
    now = max(now, setup.received_at + timedelta(milliseconds=1))
    message = Message(
        id=new_id(now),
        agent_id=setup.agent_id,
        conversation_id=setup.conversation_id,
        role=Role.AGENT,
        person_id=None,
        speaker_name=agent_name,
        text=text,
        created_at=now,
        event_id=setup.event_id,
    )
    if marker is not None:
        return await store.record_reply(message, marker, outbox, upkeep)
    if await store.add_message(message):
        return message
    return await store.agent_reply_for_event(setup.agent_id, setup.event_id) or message
