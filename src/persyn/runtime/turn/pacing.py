"""Pacing safeguards (SPEC §4.5): what keeps two agents — or an agent in a busy room — from
running away, applied to replies as well as to what the agent initiates.

Two checkpoints, both deterministic over the store and the clock:

- `blocked(setup)`, before any model call of a turn (the draft, the engagement decision):
  the channel's rolling reply budget (`[autonomy] channel_reply_tokens`, tighter while the
  other party is an agent: `[pacing] agent_reply_tokens`); the end of an agent-only exchange
  after `max_agent_turns` messages by agents in a row (a human speaking resets it); and, on
  paced services, the listening period: the turn waits until `listen_seconds` after its
  input arrived, and if more messages on the same channel are queued by then, it stays
  silent and the last of them answers the whole burst (its dialog holds every one).
- `hold(setup, text)`, in transmit, just before a reply is recorded: a reply that would push
  the agent budget past its limit is not sent; otherwise, on paced services, it waits for the
  minimum interval since the agent's last message on the channel (`agent_min_interval_seconds`
  with an agent), multiplied by `backoff_factor` for every agent-only turn in a row, plus a
  randomized delay (`jitter_seconds`, seeded by the event id, so a replayed step waits alike).

Every check that acts says so: the silence reason is the turn's recorded decision and
completion marker; a hold is merged into the turn's deliberation trace under `pacing`.

Waits are on the runtime's clock (`wait_until`): the system clock sleeps; a `ManualClock`
waits until a test or a simulation moves it, so intervals are tested by moving time, never
by timing.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from persyn.cognition.pipeline import TurnSetup
from persyn.core.clock import Clock, ManualClock
from persyn.core.config import PacingRules, Settings
from persyn.core.events import Event, EventKind
from persyn.runtime.background.autonomy import AUTONOMOUS_SERVICE
from persyn.store import Store
from persyn.store.base import Message, Role
from persyn.store.ports.runs import SpendKind

__all__ = ["PACED_SERVICES", "Pacing", "PacingHold", "wait_until"]

log = logging.getLogger(__name__)

PACED_SERVICES = frozenset({"irc", "agent", "telegram", "matrix", "discord", "slack", "email"})
"""Services whose channels get the listening period, intervals and delays (chat networks
and agent links); a terminal or a test surface answers at once. Budgets and the end of an
agent-only exchange hold everywhere."""

_WINDOW = timedelta(hours=24)
_MANUAL_POLL_SECONDS = 0.01
_REMEMBERED_TURNS = 4096


async def wait_until(clock: Clock, due: datetime) -> None:
    """Until `clock` reads `due`: a real clock sleeps; a `ManualClock` is polled until it
    is moved there (by a test or a simulation), so a paced turn takes no wall time."""
    while True:
        left = (due - clock.now()).total_seconds()
        if left <= 0:
            return
        await asyncio.sleep(_MANUAL_POLL_SECONDS if isinstance(clock, ManualClock) else left)


@dataclass(frozen=True)
class PacingHold:
    """What `hold` decided: `silent` (the reason) or how long it waited and why."""

    silent: str | None = None
    record: dict[str, Any] | None = None


class Pacing:
    """The safeguards, given the store, settings, clock, the reply budget check that applies
    to every channel (`Outreach.reply_budget_spent`), the ids of an agent's queued events,
    and how to read an event."""

    def __init__(
        self,
        *,
        store: Store,
        settings: Settings,
        clock: Clock,
        reply_budget_spent: Callable[[TurnSetup], Awaitable[str | None]],
        queued_events: Callable[[str], Awaitable[list[str]]],
        event_of: Callable[[str, str], Awaitable[Event]],
    ) -> None:
        self._store = store
        self._settings = settings
        self._clock = clock
        self._reply_budget_spent = reply_budget_spent
        self._queued_events = queued_events
        self._event_of = event_of
        # Whether a turn's other party is an agent, read once per turn in this process: the
        # draft's check and the transmit's share it (bounded; a miss only reads it again).
        self._agentish: dict[str, bool] = {}

    def rules(self, setup: TurnSetup) -> PacingRules:
        return self._settings.pacing.rules_for(setup.service, setup.channel)

    async def blocked(self, setup: TurnSetup) -> str | None:
        """Why the turn gets no generated reply (and makes no model call), or None."""
        over = await self._reply_budget_spent(setup)
        if over is not None or setup.service == AUTONOMOUS_SERVICE or setup.kind != EventKind.MESSAGE.value:
            return over
        rules = self.rules(setup)
        if await self._from_agent(setup):
            used = await self._replied(setup)
            if used >= rules.agent_reply_tokens:
                return self._acted(
                    setup,
                    f"pacing: the reply budget with agents of {rules.agent_reply_tokens} tokens per 24 hours "
                    f"on {setup.service}:{setup.channel} is used ({used}); the exchange ends here",
                )
            streak = await self.agent_turns(setup)
            if streak >= rules.max_agent_turns:
                return self._acted(
                    setup,
                    f"pacing: {streak} messages in a row by agents on {setup.service}:{setup.channel} with no "
                    f"human (the most is {rules.max_agent_turns}); the exchange ends here until a human speaks",
                )
        if setup.service in PACED_SERVICES and rules.listen_seconds > 0:
            await wait_until(self._clock, setup.received_at + timedelta(seconds=rules.listen_seconds))
            later = await self._later_on_channel(setup)
            if later:
                return self._acted(
                    setup,
                    f"listening: {later} more message(s) arrived on {setup.service}:{setup.channel} within "
                    f"{rules.listen_seconds:g}s; I answer them together",
                )
        return None

    async def hold(self, setup: TurnSetup, text: str) -> PacingHold:
        """Before a reply is recorded: refuse one that would overspend the agent budget, else
        wait out the interval and the randomized delay on paced services."""
        if setup.service == AUTONOMOUS_SERVICE or setup.kind != EventKind.MESSAGE.value:
            return PacingHold()
        rules = self.rules(setup)
        agentish = await self._from_agent(setup)
        if agentish:
            used = await self._replied(setup)
            cost = max(1, len(text) // 4)
            if used + cost > rules.agent_reply_tokens:
                return PacingHold(
                    silent=self._acted(
                        setup,
                        f"pacing: this reply ({cost} tokens) would pass the reply budget with agents of "
                        f"{rules.agent_reply_tokens} tokens on {setup.service}:{setup.channel} ({used} used); "
                        "not sent",
                    )
                )
        if setup.service not in PACED_SERVICES:
            return PacingHold()
        streak = await self.agent_turns(setup) if agentish else 0
        base = rules.agent_min_interval_seconds if agentish else rules.min_interval_seconds
        interval = base * rules.backoff_factor ** max(0, streak - 1)
        jitter = random.Random(setup.event_id).uniform(0, rules.jitter_seconds)
        now = self._clock.now()
        last = await self._last_said(setup)
        due = max(now, setup.received_at + timedelta(seconds=rules.listen_seconds))
        if last is not None:  # a reply is stamped just after its input, which may be ahead of now
            due = max(due, min(last, now) + timedelta(seconds=interval))
        due += timedelta(seconds=jitter)
        await wait_until(self._clock, due)
        record = {
            "waited_seconds": round((due - now).total_seconds(), 3),
            "interval_seconds": round(interval, 3),
            "jitter_seconds": round(jitter, 3),
            "agent_turns": streak,
            "with_agent": agentish,
        }
        log.info("agent %s: pacing on %s:%s: %s", setup.agent_id, setup.service, setup.channel, record)
        return PacingHold(record=record)

    async def agent_turns(self, setup: TurnSetup) -> int:
        """Messages in a row by agents (this agent included) at the end of the channel's
        dialog, its input included: the length of the agent-only exchange."""
        limit = self.rules(setup).max_agent_turns + 1
        recent = await self._store.channel_messages(setup.agent_id, setup.service, setup.channel, limit)
        kinds: dict[str, str] = {}
        streak = 0
        for message in reversed(recent):
            if not await self._by_agent(setup.agent_id, message, kinds):
                break
            streak += 1
        return streak

    async def _by_agent(self, agent_id: str, message: Message, kinds: dict[str, str]) -> bool:
        if message.role is Role.AGENT:
            return True
        if message.role is not Role.USER or message.person_id is None:
            return False
        kind = kinds.get(message.person_id)
        if kind is None:
            person = await self._store.get_person(agent_id, message.person_id)
            kind = kinds[message.person_id] = person.kind if person is not None else "human"
        return kind == "agent"

    async def _from_agent(self, setup: TurnSetup) -> bool:
        """Whether the other party (the input's speaker) is an agent, by the directory."""
        if setup.person_id is None:
            return False
        known = self._agentish.get(setup.event_id)
        if known is None:
            person = await self._store.get_person(setup.agent_id, setup.person_id)
            known = person is not None and person.kind == "agent"
            if len(self._agentish) >= _REMEMBERED_TURNS:
                self._agentish.pop(next(iter(self._agentish)))
            self._agentish[setup.event_id] = known
        return known

    async def _replied(self, setup: TurnSetup) -> int:
        since = self._clock.now() - _WINDOW
        return await self._store.channel_spent(
            setup.agent_id, SpendKind.REPLIED, setup.service, setup.channel, since
        )

    async def _last_said(self, setup: TurnSetup) -> datetime | None:
        recent = await self._store.channel_messages(setup.agent_id, setup.service, setup.channel, 20)
        said = [m.created_at for m in recent if m.role is Role.AGENT]
        return max(said) if said else None

    async def _later_on_channel(self, setup: TurnSetup) -> int:
        """Messages queued for the agent on the turn's channel that arrived after its input."""
        count = 0
        for event_id in await self._queued_events(setup.agent_id):
            if event_id == setup.event_id:
                continue
            try:
                event = await self._event_of(setup.agent_id, event_id)
            except Exception:  # an event not stored yet (still being submitted): not this burst's
                continue
            if (
                event.kind is EventKind.MESSAGE
                and event.service == setup.service
                and event.channel == setup.channel
                and event.received_at >= setup.received_at
            ):
                count += 1
        return count

    def _acted(self, setup: TurnSetup, reason: str) -> str:
        log.info("agent %s: %s", setup.agent_id, reason)
        return reason
