"""Open goals as a standing context source (SPEC §4.8): every prompt carries what the agent
has set out to do, so its goals shape each response. Goals are created only by the agent's
own goal tool; this source only reads them."""

from __future__ import annotations

from collections.abc import Sequence

from persyn.cognition.pipeline import TurnSetup
from persyn.cognition.prompt import ContextSection
from persyn.store.base import GoalStatus, Store

__all__ = ["GoalsSource"]

_LEGEND = "Goals I set myself and have not finished (the ids are for my goal tools, never said aloud):"


class GoalsSource:
    def __init__(self, store: Store, limit: int = 10) -> None:
        self.store = store
        self.limit = limit

    async def __call__(self, setup: TurnSetup, query: str) -> Sequence[ContextSection]:
        goals = await self.store.list_goals(setup.agent_id, statuses=[GoalStatus.OPEN], limit=self.limit)
        if not goals:
            return []
        lines = "\n".join(f"- {g.description} (since {g.created_at:%Y-%m-%d}; {g.id})" for g in goals)
        return [ContextSection("My open goals", f"{_LEGEND}\n{lines}")]
