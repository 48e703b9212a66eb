"""The transcript: the durable record of the exchange, and the live cognition beside it.

The five rules of SPEC App. B, as this widget keeps them:
1. streamed text is presentation only: a draft is a `Draft` widget until the transmitted
   reply arrives (`deliver`), which is what stays, rendered as Markdown;
2. a draft the decide step suppresses is removed, and a "chose silence: <reason>" notice
   takes its place (styled as an outcome, not an error);
3. a revision after the reply was delivered streams into a `WorkingSurface` below it, removed
   when deliberation ends;
4. a tool call commits the segment before it and shows a transient "using <tool>…"
   indicator until the tool returns; what follows is a new segment;
5. the widget only reads `Update`s the console channel queued: nothing here is awaited by
   the pipeline.

Draft text is throttled: deltas append to a buffer and the widgets are refreshed at most
every `REFRESH_SECONDS`, so a fast stream does not starve the composer of the loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.text import Text
from textual.containers import VerticalScroll
from textual.widget import Widget
from textual.widgets import Markdown, Static

from persyn.channels.console.channel import Update
from persyn.present.render import visible

__all__ = ["REFRESH_SECONDS", "Transcript"]

REFRESH_SECONDS = 0.05
_KEEP_ENTRIES = 2000  # the oldest entries go beyond this: a long session stays light


class Entry(Static):
    """A plain transcript line: the operator's message or a notice."""


class Draft(Static):
    """A segment of a reply as it streams (or committed before a tool call)."""

    def __init__(self, prefix: str) -> None:
        super().__init__("", classes="draft")
        self.prefix = prefix
        self.text = ""

    def show(self) -> None:
        self.update(Text.assemble((self.prefix, "bold cyan"), visible(self.text.strip())))


class Reply(Markdown):
    """A transmitted reply: the durable record, rendered as Markdown."""


class WorkingSurface(Static):
    """The deferred revision streaming under a committed reply (transient)."""


class Indicator(Static):
    """ "using <tool>…" while a tool runs (transient)."""


@dataclass
class _Turn:
    """What is on screen for one event's generation."""

    segments: list[Draft] = field(default_factory=list[Draft])  # committed by tool calls
    draft: Draft | None = None
    indicator: Indicator | None = None
    surface: WorkingSurface | None = None
    surface_text: str = ""
    delivered: bool = False


class Transcript(VerticalScroll):
    """Newest at the bottom; follows new content only while the operator is at the bottom."""

    def __init__(self, agent_name: str) -> None:
        super().__init__(id="transcript")
        self.agent_name = agent_name
        self._turns: dict[str, _Turn] = {}
        self._dirty: set[Draft] = set()

    def on_mount(self) -> None:
        self.set_interval(REFRESH_SECONDS, self._refresh_drafts)

    # what the operator and the console itself add ---------------------------------------
    def operator(self, name: str, text: str) -> None:
        self._add(Entry(Text.assemble((f"{name}: ", "bold green"), visible(text)), classes="operator"))

    def note(self, text: str, level: str = "info") -> None:
        self._add(Entry(Text(f"· {visible(text)}"), classes=f"notice notice-{level}"))

    # the runtime's updates, in arrival order ---------------------------------------------
    def apply(self, update: Update) -> None:
        handler = getattr(self, f"_on_{update.kind}")
        handler(update)

    def _turn(self, event_id: str | None) -> _Turn:
        key = event_id or ""
        if key not in self._turns:
            if len(self._turns) > 200:  # old turns are done with: keep the map bounded
                for old in list(self._turns)[:100]:
                    del self._turns[old]
            self._turns[key] = _Turn()
        return self._turns[key]

    def _on_draft(self, update: Update) -> None:
        turn = self._turn(update.event_id)
        if turn.draft is None:
            if not update.text.strip():
                return  # leading whitespace of a small model's stream
            turn.draft = Draft(f"{self.agent_name}: ")
            self._add(turn.draft)
        turn.draft.text += update.text
        self._dirty.add(turn.draft)

    def _on_tool_start(self, update: Update) -> None:
        turn = self._turn(update.event_id)
        if turn.draft is not None:  # rule 4: what was said before acting is kept
            turn.draft.show()
            turn.draft.add_class("segment")
            turn.segments.append(turn.draft)
            turn.draft = None
        if turn.indicator is not None:
            turn.indicator.remove()
        turn.indicator = Indicator(Text(f"using {visible(update.text)}…"), classes="indicator")
        self._add(turn.indicator)

    def _on_tool_end(self, update: Update) -> None:
        turn = self._turn(update.event_id)
        if turn.indicator is not None:
            turn.indicator.remove()
            turn.indicator = None

    def _on_revise(self, update: Update) -> None:
        turn = self._turn(update.event_id)
        label = "reconsidering" if turn.delivered else "revising"
        if turn.surface is None:
            turn.surface = WorkingSurface("", classes="working")
            self._add(turn.surface)
        turn.surface_text += update.text
        turn.surface.update(Text(f"↳ {label}: {visible(turn.surface_text)}", style="dim italic"))

    def _on_revise_end(self, update: Update) -> None:
        turn = self._turn(update.event_id)
        if turn.delivered:
            self._clear_surface(turn)

    def _on_deliberation_done(self, update: Update) -> None:
        self._clear_surface(self._turn(update.event_id))

    def _clear_surface(self, turn: _Turn) -> None:
        """Rule 3: the working surface goes once deliberation has finished."""
        if turn.surface is None:
            return
        turn.surface.remove()
        turn.surface, turn.surface_text = None, ""
        self.note("reconsidered; I'll fold that into my next reply")

    def _on_deliver(self, update: Update) -> None:
        outbound = update.outbound
        turn = self._turn(update.event_id)
        turn.delivered = True
        if outbound is not None and outbound.while_away:
            when = f" at {outbound.sent_at.astimezone():%Y-%m-%d %H:%M}" if outbound.sent_at else ""
            self.note(f"while you were away{when}", "away")
        if turn.indicator is not None:
            turn.indicator.remove()
            turn.indicator = None
        if turn.surface is not None:  # an inline revision: the reply below replaces it
            turn.surface.remove()
            turn.surface, turn.surface_text = None, ""
        said = "".join(segment.text for segment in turn.segments)
        for segment in turn.segments:  # rule 4: committed, now rendered as what was sent
            self._add(Reply(_markdown(f"**{self.agent_name}:** {segment.text.strip()}")), before=segment)
            segment.remove()
        # The reply sent is either the whole text or (after a tool) the answer alone.
        tail = update.text[len(said) :] if said and update.text.startswith(said) else update.text
        anchor = turn.draft
        if anchor is not None:
            self._dirty.discard(anchor)
        if tail.strip():
            if anchor is not None and not _same(anchor.text, tail):
                self._add(Entry(Text("· (revised)"), classes="notice notice-info"), before=anchor)
            self._add(Reply(_markdown(f"**{self.agent_name}:** {tail.strip()}")), before=anchor)
        if anchor is not None:
            anchor.remove()
            turn.draft = None
        turn.segments = []

    def _on_notice(self, update: Update) -> None:
        turn = self._turn(update.event_id)
        drafts: list[Widget] = [*turn.segments, *([turn.draft] if turn.draft else [])]
        if turn.indicator is not None:
            turn.indicator.remove()
            turn.indicator = None
        if turn.surface is not None and not turn.delivered:
            turn.surface.remove()
            turn.surface, turn.surface_text = None, ""
        silence = "chose silence" in update.text
        text = update.text
        if silence:  # rule 2: an outcome, shown in place of the withdrawn draft
            text = "chose silence: " + update.text.split("chose silence:", 1)[-1].strip()
            level = "silence"
        else:
            level = update.level
        notice = Entry(Text(f"· {visible(text)}"), classes=f"notice notice-{level}")
        if drafts:
            self._add(notice, before=drafts[0])
            if not silence:
                self._add(
                    Entry(Text("· (the draft was withdrawn)"), classes="notice notice-info"), before=notice
                )
            for widget in drafts:
                self._dirty.discard(widget)  # pyright: ignore[reportArgumentType]
                widget.remove()
            turn.segments, turn.draft = [], None
        else:
            self._add(notice)

    # mounting and following ---------------------------------------------------------------
    def _add(self, widget: Widget, *, before: Widget | None = None) -> None:
        following = self.scroll_offset.y >= self.max_scroll_y - 1
        if before is not None and before.parent is self:
            self.mount(widget, before=before)
        else:
            self.mount(widget)
        excess = len(self.children) - _KEEP_ENTRIES
        if excess > 0:
            for old in list(self.children)[:excess]:
                old.remove()
        if following:
            self.call_after_refresh(self.scroll_end, animate=False)

    def _refresh_drafts(self) -> None:
        for draft in self._dirty:
            draft.show()
        self._dirty.clear()

    def drafts(self) -> list[str]:
        """The streamed text on screen (tests and the status read it)."""
        return [w.text for w in self.query(Draft)]


def _same(a: str, b: str) -> bool:
    return " ".join(a.split()) == " ".join(b.split())


def _markdown(text: str) -> str:
    """Stored text as Markdown source: control characters made visible, nothing else changed."""
    return visible(text)
