"""Phone calls the agent places (issue 36 item 4): `place_call` and `end_call` bound to one
activation (`tools/builtin/calls.PhoneLine`), under the rules of what the agent initiates
(`outreach.py`), checked in this order before anything is dialled:

1. quiet hours (`[voice] quiet_hours`, the server's local time): no call then, whoever asks;
2. the audience (`memory/access.py`): the call is gated as said on the callee's line,
   `phone:<number>`, before them alone. A conversation turn's provenance is its channel: as for
   `message_contact`, the people present relay what they see (so their sensitivity is not
   weighed), but the compartment is — only a channel grouped with that line
   (`[memory] channel_groups`) may have the agent phone them, so a stranger on another channel
   cannot. A self-initiated run's provenance is everything it read (`autonomy.narrow_run`),
   weighed in full: a beat that read Ann's confidences does not phone Bob;
3. the autonomy budget, for a call a heartbeat or a reminder places (the call's turns are the
   callee's conversation, paced and budgeted like any channel's);
4. the line: the telephone channel must be connected in this process;
5. the per-run cap, shared with `message_contact` (`[autonomy] max_messages_per_run`, counted by
   tool call in the run's durable state);
6. the daily cap (`[voice] max_calls_per_day`, rolling 24 hours): an entry per call in the
   channel-spend ledger of the runs sub-port, under the pseudo-channel `phone:placed calls`,
   counted and recorded in one transaction, keyed by the tool call (a re-run step counts once).

A refusal is a `ToolError` the model reads and the trace records.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Protocol, runtime_checkable

from persyn.cognition.pipeline import TurnSetup
from persyn.core.clock import Clock
from persyn.core.config import Settings
from persyn.core.errors import ToolError
from persyn.core.ids import new_id
from persyn.core.records import Sensitivity, channel_key
from persyn.memory.access import may_surface
from persyn.runtime.background.autonomy import Autonomy, BudgetExhausted, run_provenance
from persyn.runtime.background.outreach import Outreach
from persyn.runtime.channel import Channel
from persyn.store import Store
from persyn.store.base import Provenance
from persyn.store.ports.runs import SpendKind
from persyn.tools.builtin.calls import PHONE_SERVICE, PhoneLine

__all__ = ["PLACED_CALLS", "Calls", "Dialer", "places_calls"]

PLACED_CALLS = "placed calls"  # the ledger's pseudo-channel of the daily call cap
_WINDOW = timedelta(hours=24)


@runtime_checkable
class Dialer(Protocol):
    """The telephone channel's outbound side (`channels/voice/channel.PhoneChannel`)."""

    async def place_call(self, number: str, name: str, purpose: str) -> str: ...

    async def end_call(self, sid: str, goodbye: str) -> str: ...


def places_calls(settings: Settings) -> bool:
    """Whether `[voice]` is set up to place calls: the tools are offered only then."""
    voice = settings.voice
    return voice.enabled and bool(voice.twilio.from_number and voice.twilio.public_url)


class Calls:
    """The rules and the line, over the store, the outreach counters, the autonomy budget and
    the channels connected here."""

    def __init__(
        self,
        *,
        store: Store,
        settings: Settings,
        clock: Clock,
        outreach: Outreach,
        autonomy: Autonomy,
        channels: Mapping[str, Channel],
    ) -> None:
        self._store = store
        self._settings = settings
        self._clock = clock
        self._outreach = outreach
        self._autonomy = autonomy
        self._channels = channels

    def line(self, setup: TurnSetup, event_id: str, call_key: str | None) -> PhoneLine | None:
        """The phone for this activation's tools; None when calls are not set up."""
        if not places_calls(self._settings):
            return None

        async def place(person_id: str, number: str, name: str, purpose: str) -> str:
            return await self.place(setup, event_id, call_key, person_id, number, name, purpose)

        async def end(goodbye: str) -> str:
            return await self._dialer().end_call(setup.channel, goodbye)

        return PhoneLine(place=place, end=end if setup.service == PHONE_SERVICE else None)

    def _dialer(self) -> Dialer:
        channel = self._channels.get(PHONE_SERVICE)
        if not isinstance(channel, Dialer):
            raise ToolError(
                "the phone line is not connected in this process (the web server with [voice] "
                "enabled places calls); nothing was dialled"
            )
        return channel

    async def place(
        self,
        setup: TurnSetup,
        event_id: str,
        call_key: str | None,
        person_id: str,
        number: str,
        name: str,
        purpose: str,
    ) -> str:
        agent_id, voice, now = setup.agent_id, self._settings.voice, self._clock.now()
        local = now.astimezone()
        if voice.quiet_at(local.time()):
            raise ToolError(
                f"not called: it is {local:%H:%M}, within the quiet hours ({voice.quiet_hours}) when "
                "no calls are placed; call later, or write to them instead"
            )
        await self._audience(setup, event_id, person_id, number)
        if setup.kind != "message":
            try:
                await self._autonomy.admit_call(agent_id, event_id)
            except BudgetExhausted as exc:
                raise ToolError(f"not called: {exc}") from exc
        dialer = self._dialer()
        await self._outreach.count_outreach(agent_id, event_id, call_key)
        spend = await self._store.spend_channel(
            agent_id,
            SpendKind.SENT,
            PHONE_SERVICE,
            PLACED_CALLS,
            call_key or new_id(now),
            1,
            now,
            since=now - _WINDOW,
            limit=voice.max_calls_per_day,
        )
        if not spend.recorded:
            raise ToolError(
                f"not called: {spend.used} of the {voice.max_calls_per_day} calls a day ([voice] "
                "max_calls_per_day) were placed in the last 24 hours; call tomorrow, or write instead"
            )
        return await dialer.place_call(number, name, purpose)

    async def _audience(self, setup: TurnSetup, event_id: str, person_id: str, number: str) -> None:
        where = channel_key(setup.service, setup.channel)
        settings = self._settings
        if setup.kind == "message":
            # The people present relay what they see: only the compartment is weighed.
            provenance = Provenance(channel=where, participant_ids=(), sensitivity=Sensitivity.PUBLIC)
        else:
            provenance = await run_provenance(self._store, setup.agent_id, event_id, where)
        target = channel_key(PHONE_SERVICE, number)
        groups = settings.memory.channel_groups
        if not may_surface(provenance, target, (person_id,), groups, agent_id=setup.agent_id):
            raise ToolError(
                f"not called: what this run knows (from {provenance.channel or 'no channel'}, "
                f"{provenance.sensitivity.value}) may not reach this person on their phone ({target}); "
                "only a channel grouped with their line can ask for a call"
            )
