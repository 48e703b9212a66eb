"""Open goals as a standing context source (SPEC §4.8): every prompt carries what the agent
has set out to do, so its goals shape each response. Goals are created only by the agent's
own goal tool; this source only reads them.

A goal carries where it formed (ARCHITECTURE §4) and is put into a prompt only where
it may surface (`memory.access.may_surface`): a goal set in Ann's direct messages is not in
front of Mallory elsewhere. A heartbeat (the agent on its own) sees every goal it could
think about with nobody present (`reflective_view`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from persyn.cognition.pipeline import TurnSetup
from persyn.cognition.prompt import ContextSection
from persyn.core.records import channel_key
from persyn.memory.access import Provenanced, may_surface
from persyn.store.base import Goal, GoalStatus
from persyn.store.capabilities import ScheduleStore

__all__ = ["GoalsSource", "OpenGoals", "open_goals", "reflective_view", "visible_goals"]

_LEGEND = "Goals I set myself and have not finished (the ids are for my goal tools, never said aloud):"
_SCAN = 200  # open goals read to find `limit` that may surface here

# The agent's open goals (the oldest `_SCAN`) as a turn sees them: the runtime reads them once per
# activation (`runtime.turn.activation.TurnCache.open_goals`) for its prompt and its decision.
OpenGoals = Callable[[TurnSetup], Awaitable[list[Goal]]]


async def open_goals(store: ScheduleStore, agent_id: str) -> list[Goal]:
    """The agent's oldest `_SCAN` open goals, before any access rule: what `visible_goals` sifts."""
    return await store.list_goals(agent_id, statuses=[GoalStatus.OPEN], limit=_SCAN)


def reflective_view(item: Provenanced, home: str, groups: Sequence[Sequence[str]], agent_id: str) -> bool:
    """May `item` come to mind when the agent is on its own (nobody present), in its own
    compartment? What the heartbeat reviews (SPEC §4.7): restricted things formed with
    others never do."""
    return may_surface(item, item.channel or home, (), groups, agent_id=agent_id)


async def visible_goals(
    store: ScheduleStore,
    setup: TurnSetup,
    groups: Sequence[Sequence[str]],
    limit: int,
    *,
    present: Sequence[str] | None = None,
    listed: OpenGoals | None = None,
) -> list[Goal]:
    """The oldest `limit` open goals that may surface in `setup`'s situation: on a heartbeat
    every goal it could think of alone; otherwise the ones that may surface on this channel
    in front of `present` (default: the setup's participants). `listed` gives the open goals
    (the turn's own read) instead of the store."""
    here = channel_key(setup.service, setup.channel)
    goals = await listed(setup) if listed is not None else await open_goals(store, setup.agent_id)
    if setup.kind == "heartbeat":
        kept = [g for g in goals if reflective_view(g.provenance, here, groups, setup.agent_id)]
    else:
        people = await _present(store, setup) if present is None else present
        kept = [g for g in goals if may_surface(g.provenance, here, people, groups, agent_id=setup.agent_id)]
    return kept[:limit]


async def _present(store: ScheduleStore, setup: TurnSetup) -> tuple[str, ...]:
    participants = setup.participant_ids
    if participants is None:
        conversation = await store.get_conversation(setup.agent_id, setup.conversation_id)
        participants = conversation.participant_ids if conversation else ()
    return tuple(p for p in participants if p != setup.agent_id)


async def _nothing_read(setup: TurnSetup, items: Sequence[Provenanced]) -> None:
    return None


class GoalsSource:
    """`on_read` is told which goals went into the prompt (a self-initiated run then writes
    at most where they may surface); `listed` gives the turn's open goals (its own read, shared
    with its decision) instead of the store."""

    def __init__(
        self,
        store: ScheduleStore,
        channel_groups: Sequence[Sequence[str]] = (),
        limit: int = 10,
        on_read: Callable[[TurnSetup, Sequence[Provenanced]], Awaitable[None]] = _nothing_read,
        listed: OpenGoals | None = None,
    ) -> None:
        self.store = store
        self.channel_groups = channel_groups
        self.limit = limit
        self.on_read = on_read
        self.listed = listed

    async def __call__(self, setup: TurnSetup, query: str) -> Sequence[ContextSection]:
        goals = await visible_goals(self.store, setup, self.channel_groups, self.limit, listed=self.listed)
        if not goals:
            return []
        await self.on_read(setup, [g.provenance for g in goals])
        lines = "\n".join(f"- {g.description} (since {g.created_at:%Y-%m-%d}; {g.id})" for g in goals)
        return [ContextSection("My open goals", f"{_LEGEND}\n{lines}")]
