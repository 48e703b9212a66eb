"""What an activation is, as every tool group sees it: who hears what the tools show
(`Audience`) and the provenance of what the run writes (`RunProvenance`; a conversation turn's
is `FixedProvenance`). The tool scope (`tools/providers.py`) carries both; the groups and the
runtime import them from here, below both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from persyn.memory.access import Provenanced, may_surface
from persyn.store.base import GLOBAL, Provenance

__all__ = ["Audience", "FixedProvenance", "RunProvenance"]


@dataclass(frozen=True)
class Audience:
    """Who hears what the tools show: the current channel (`channel_key`), the people
    present (the agent excluded) and the channel groups. `reflecting`: the agent on its own
    reviewing everything it could say with nobody present, in each item's own compartment
    (the heartbeat; `present` is then empty)."""

    channel: str
    present: tuple[str, ...] = ()
    channel_groups: Sequence[Sequence[str]] = ()
    agent_id: str | None = None
    reflecting: bool = False

    def sees(self, item: Provenanced) -> bool:
        channel = (item.channel or self.channel) if self.reflecting else self.channel
        present = () if self.reflecting else self.present
        return may_surface(item, channel, present, self.channel_groups, agent_id=self.agent_id)


class RunProvenance(Protocol):
    """The provenance of what this activation writes, and what narrows it."""

    async def written(self) -> Provenance: ...

    async def read(self, items: Sequence[Provenanced]) -> None:
        """The tools showed `items`: what the run writes from now on may surface at most
        where they may."""
        ...


@dataclass(frozen=True)
class FixedProvenance:
    """A conversation turn's: everything it writes carries the turn's provenance."""

    provenance: Provenance = GLOBAL

    async def written(self) -> Provenance:
        return self.provenance

    async def read(self, items: Sequence[Provenanced]) -> None:
        return None
