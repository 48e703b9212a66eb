"""The console's channel adapter: runtime entry points turned into display updates.

Every entry point (`sink_for`'s sink, `deliver`, `notice`, `deliberation_done`) does one
thing: it wraps what it was given in a frozen `Update` and hands it to `post`, which queues
it on the console's own event loop (Textual's `post_message`: non-blocking, thread-safe,
first in first out). So updates are shown in arrival order, and the pipeline never waits on
the display: a console that is slow, closed or broken costs generation nothing (SPEC App. B,
concurrency note and rule 5).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from persyn.channels.terminal.channel import SERVICE
from persyn.core.config import AgentConfig
from persyn.core.events import Event, Notice, Outbound
from persyn.gateway.base import SinkCallable, SinkEvent
from persyn.runtime.channel import Channel

__all__ = ["ConsoleChannel", "Update", "UpdateKind"]

UpdateKind = Literal[
    "draft", "tool_start", "tool_end", "revise", "revise_end", "deliver", "notice", "deliberation_done"
]


@dataclass(frozen=True)
class Update:
    """One display mutation, in the order the runtime produced it."""

    kind: UpdateKind
    event_id: str | None = None
    text: str = ""
    level: str = "info"
    outbound: Outbound | None = None


class ConsoleChannel(Channel):
    """The `terminal` service, shown full-screen: the operator's identity and outbox are the
    same as `persyn chat`'s (one person at one terminal, whichever surface they open)."""

    service = SERVICE
    interactive = True  # a person is waiting: deliberation defers here
    streams_tokens = True

    def __init__(self, agent: AgentConfig, post: Callable[[Update], object]) -> None:
        self.agent = agent
        self._post = post
        self.closed = False  # the console has gone: updates are dropped, generation goes on

    def _send(self, update: Update) -> None:
        # The display's failures stay the display's: nothing raised here reaches the runtime.
        if self.closed:
            return
        try:
            self._post(update)
        except Exception:
            return

    def serves(self, agent_id: str) -> bool:
        return agent_id == self.agent.id

    def sink_for(self, event: Event) -> SinkCallable | None:
        def sink(item: SinkEvent) -> None:
            if item.phase == "revise":
                if item.kind == "delta" and item.text:
                    self._send(Update("revise", event.id, item.text))
                elif item.kind == "end":
                    self._send(Update("revise_end", event.id))
            elif item.kind == "tool_start":
                self._send(Update("tool_start", event.id, item.text or "a tool"))
            elif item.kind == "tool_end":
                self._send(Update("tool_end", event.id))
            elif item.kind == "delta" and item.text and item.phase == "draft":
                self._send(Update("draft", event.id, item.text))

        return sink

    async def deliver(self, outbound: Outbound) -> None:
        self._send(Update("deliver", outbound.event_id, outbound.text, outbound=outbound))

    async def notice(self, event: Event, notice: Notice) -> None:
        self._send(Update("notice", event.id, notice.text, level=notice.level))

    def deliberation_done(self, event: Event, objections: int) -> None:
        self._send(Update("deliberation_done", event.id))
