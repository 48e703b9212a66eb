"""The fast half of a live call (SPEC Appendix A): a fast model with no tools answers every
settled turn at once, streaming, while the unchanged pipeline runs behind it.

- `open_call`: the call's person (their phone identity, created on first contact) and its
  conversation (a new one: the call's channel is its own), before the first turn.
- `context`: the part of the prompt a call caches (the caller's channel adapter keeps it and
  asks again every `[voice] prompt_refresh_seconds`): the persona, how to speak on a call, and
  the context sources' sections (memories, the person record, the graph, goals) as the first
  turn's words retrieve them.
- `reply`: one turn. The caller's words are stored as their line (`pipeline.receive`: the
  same message the background activation's receive stores, once); the direction cue and the
  background's findings are context, never anyone's line. The hard gates run first (a
  guardrail's block, the channel's reply budget); the discretionary engagement decision does
  not (a live call is always answered). The model call is task `voice`, through the gateway
  (metered, traced), its text streamed to the adapter's `sink` as it comes. What is said is
  stored as the agent's line of the turn (as `sentences.SentenceSplitter` lets it be said: no
  stage direction) and charged to the channel's reply budget, so consolidation reads a call as
  it reads typed dialog.

The background activation of a turn (`[voice] background`) is an ordinary event of the call
with `LIVE_META` = `BACKGROUND`: its transmit holds its words for the call instead of sending
them (`runtime.turn.transmit`), so it never speaks and never stores a second agent line.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime, timedelta

from persyn.cognition import pipeline
from persyn.cognition.pipeline import ContextSource, TurnSetup
from persyn.cognition.prompt import ContextSection, dialog_items, stable_instruction
from persyn.core.clock import Clock, friendly_datetime
from persyn.core.config import AgentConfig, Settings, Task
from persyn.core.errors import ModelError
from persyn.core.events import LIVE_BACKGROUND, LIVE_META, Event, inbound_message_id
from persyn.core.ids import new_id
from persyn.gateway.base import Prompt, SinkEvent, UserTurn
from persyn.gateway.gateway import ModelGateway
from persyn.store.base import Identity, Message, Role, Store
from persyn.store.ports.runs import ChannelEntry
from persyn.usage import context as usage_context
from persyn.voice.sentences import SentenceSplitter

__all__ = ["VOICE_INSTRUCTION", "LiveVoice", "is_background"]

log = logging.getLogger(__name__)

VOICE_INSTRUCTION = """\
You are speaking on a live phone call. Whatever you write is read aloud to the caller, word for
word. So write only the words you mean to say: short spoken sentences, no narration, no stage
directions, no lists, markup, links or notes about yourself. When you need to look something
up, say so briefly; what you find reaches you on a later turn."""

ReplyGate = Callable[[TurnSetup], Awaitable[str | None]]
Spend = Callable[[str, str, str, str, datetime], ChannelEntry]


class LiveVoice:
    """The fast path's work for every call of this process (one instance per runtime)."""

    def __init__(
        self,
        *,
        store: Store,
        settings: Settings,
        clock: Clock,
        agents: Mapping[str, AgentConfig],
        gateways: Mapping[str, ModelGateway],
        context_sources: Sequence[ContextSource],
        blocked: ReplyGate,
        spend: Spend,
    ) -> None:
        self._store = store
        self._settings = settings
        self._clock = clock
        self._agents = agents
        self._gateways = gateways
        self._sources = context_sources
        self._blocked = blocked
        self._spend = spend

    async def open_call(self, event: Event) -> tuple[str, str]:
        """The call's conversation and the caller's name as the directory knows them."""
        setup = await self._setup(event, store_input=False)
        return setup.conversation_id, setup.speaker_name

    async def context(self, event: Event) -> str:
        """The cached part of a call's prompt, with what `event`'s words retrieve."""
        agent = self._agents[event.agent_id]
        setup = await self._setup(event, store_input=False)

        async def fetch(source: ContextSource) -> Sequence[ContextSection]:
            try:
                return await source(setup, event.text)
            except Exception as exc:  # fail soft (SPEC §2): a broken source costs context only
                log.warning("voice: context source %r failed: %s", source, exc)
                return []

        found = await asyncio.gather(*(fetch(source) for source in self._sources))
        parts = [stable_instruction(agent), VOICE_INSTRUCTION]
        parts.extend(
            f"\n## {section.title}\n{section.body.strip()}"
            for sections in found
            for section in sections
            if section.body.strip()
        )
        return "\n".join(parts)

    async def reply(
        self,
        event: Event,
        *,
        system: str,
        sink: Callable[[str], Awaitable[None]],
        cue: bool = False,
        notes: Sequence[str] = (),
    ) -> tuple[str | None, str]:
        """One turn of a call: what was said (None: nothing) and why not when nothing was.
        With `cue`, `event.text` is the direction cue (context, not the caller's line)."""
        agent = self._agents[event.agent_id]
        setup = await self._setup(event, store_input=not cue)
        with usage_context.rebind(
            agent_id=event.agent_id,
            surface=event.service,
            channel=event.channel,
            conversation_id=setup.conversation_id,
            trigger="voice",
        ):
            blocked = await self._blocked(setup)
            if blocked is not None:
                log.info("voice: turn %s of call %s not answered: %s", event.id, event.channel, blocked)
                return None, blocked
            prompt = await self._prompt(setup, system, event.text if cue else None, notes)

            async def forward(update: SinkEvent) -> None:
                if update.kind == "delta" and update.text:
                    await sink(update.text)

            try:
                completion = await self._gateways[event.agent_id].complete(
                    Task.VOICE, prompt, sink=forward, phase="draft"
                )
            except ModelError as exc:
                log.warning("voice: the fast model failed on call %s: %s", event.channel, exc)
                return None, f"the fast model failed: {exc}"
        said = _speakable(completion.text)
        if not said:
            return None, "the fast model had nothing to say"
        await self._record(setup, agent.name, said)
        return said, ""

    async def _setup(self, event: Event, *, store_input: bool) -> TurnSetup:
        now = self._clock.now()
        agent = self._agents[event.agent_id]
        if store_input:
            setup = await pipeline.receive(self._store, self._settings, event, now, agent.name)
            return setup.model_copy(update={"addressed": True, "mode": "deferred"})
        if event.speaker is None:
            raise ValueError("a live call's turn has a caller")
        speaker = event.speaker
        identity = Identity(service=speaker.service, channel=speaker.channel, speaker_id=speaker.speaker_id)
        person = await self._store.resolve_person(
            event.agent_id, identity, speaker.display_name, speaker.kind, now
        )
        conversation = await self._store.open_conversation(
            event.agent_id,
            event.service,
            event.channel,
            [person.id],
            now,
            self._settings.conversation.idle_timeout_minutes * 60,
        )
        return TurnSetup(
            agent_id=event.agent_id,
            event_id=event.id,
            service=event.service,
            channel=event.channel,
            conversation_id=conversation.id,
            person_id=person.id,
            speaker_name=person.display_name,
            inbound_message_id=inbound_message_id(event.id, event.received_at),
            received_at=min(event.received_at, now),
            addressed=True,
            mode="deferred",
            participant_ids=tuple(conversation.participant_ids),
        )

    async def _prompt(self, setup: TurnSetup, system: str, cue: str | None, notes: Sequence[str]) -> Prompt:
        limit = self._settings.conversation.recent_dialog_messages
        dialog = await self._store.recent_messages(setup.agent_id, setup.conversation_id, limit)
        volatile = [f"\nIt is now {friendly_datetime(self._clock.now())}."]
        if cue:
            volatile.append(cue)
        if notes:
            volatile.append(
                "\n## What I found since I last spoke (my slower thinking, in the background)\n"
                + "\n".join(f"- {note}" for note in notes)
                + "\nIf it matters to the caller, I tell them now, briefly, in my own words."
            )
        items = dialog_items(pipeline.arrange_turn_dialog(dialog, setup.event_id))
        if not items or not isinstance(items[-1], UserTurn):
            items.append(UserTurn(text="(The call has just connected: greet the caller.)" if cue else "(…)"))
        return Prompt(
            system=system + "\n".join(volatile), items=tuple(items), stable_prefix_chars=len(system)
        )

    async def _record(self, setup: TurnSetup, agent_name: str, text: str) -> None:
        """The agent's line of the turn, and its tokens on the channel's reply budget."""
        now = max(self._clock.now(), setup.received_at + timedelta(milliseconds=1))
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
        if not await self._store.add_message(message):
            return  # this turn's line is stored already
        entry = self._spend(setup.event_id, setup.service, setup.channel, text, now)
        await self._store.spend_channel(
            setup.agent_id,
            entry.kind,
            entry.service,
            entry.channel,
            entry.key,
            entry.tokens,
            now,
            since=entry.since,
        )


def _speakable(text: str) -> str:
    """The words of `text` as the call's mouth says them (stage directions dropped)."""
    splitter = SentenceSplitter()
    return " ".join([*splitter.push(text + " "), *splitter.flush()]).strip()


def is_background(event: Event) -> bool:
    """Whether `event` is a live call's background turn (its words are held, never sent)."""
    return event.meta.get(LIVE_META) == LIVE_BACKGROUND
