"""The channel port: how the runtime hands speech, notices and live tokens to a surface."""

from __future__ import annotations

from typing import Protocol

from persyn.core.events import Event, Notice, Outbound
from persyn.gateway.base import SinkCallable

__all__ = ["ChannelAdapter"]


class ChannelAdapter(Protocol):
    """A surface (terminal, web, chat service). Entry points must return quickly: a slow
    or broken adapter never blocks the pipeline (SPEC App. B rule 5)."""

    service: str

    async def deliver(self, outbound: Outbound) -> None:
        """The agent's transmitted speech."""
        ...

    async def notice(self, event: Event, notice: Notice) -> None:
        """Something to show that is not the agent speaking (silence, errors)."""
        ...

    def sink_for(self, event: Event) -> SinkCallable | None:
        """A token sink for live presentation of this event's generation, if any."""
        ...
