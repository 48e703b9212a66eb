"""The console's panels (SPEC App. B, directory management): Directory, Channels, Mind, Usage.

Each is a bounded view: a contact's digest holds their few latest conversations (found
through the participant index, so it costs the same for a contact with 20,000 of them), a
dialog shows its last `DIALOG_LINES` messages, lists stop at `LIST_ROWS`. Every read and
every change goes through `Operator`, i.e. the CLI's own operator functions. Loading runs
in a worker, so the screen never waits on the store.
"""

from __future__ import annotations

import shlex
from typing import ClassVar

from rich.text import Text
from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.widget import Widget
from textual.widgets import DataTable, Input, ListItem, ListView, Static

from persyn.console.operator_views import Operator
from persyn.core.errors import PersynError
from persyn.ops.history import Turn
from persyn.present.render import error_text, message_line, one_line, trace_lines, visible
from persyn.store.base import Conversation, Identity

__all__ = [
    "DIALOG_LINES",
    "LIST_ROWS",
    "TURN_ROWS",
    "ChannelsPanel",
    "DirectoryPanel",
    "MindPanel",
    "Panel",
    "Table",
    "UsagePanel",
]

DIALOG_LINES = 200
LIST_ROWS = 500
TURN_ROWS = 50  # the Mind panel's turn picker
DIRECTORY_HELP = (
    "rename NAME · merge OTHER [--name NAME] (the selected contact survives) · "
    "attach SERVICE CHANNEL SPEAKER · detach SERVICE CHANNEL SPEAKER · prefer SERVICE:CHANNEL · "
    "add-address LABEL VALUE · remove-address LABEL VALUE"
)


class Table(DataTable[str | Text]):
    """A DataTable whose header follows its columns' widths. DataTable measures new rows when
    idle and widens their columns then, but a header painted before keeps its cached, narrower
    line until something else changes the table (a starved run showed the rows laid out under
    a header at its labels' widths): when a width changes, the cached lines go."""

    def __init__(self, *, id: str) -> None:
        super().__init__(id=id, cursor_type="row")
        self._painted_widths: tuple[int, ...] = ()

    async def _on_idle(self, _: events.Idle) -> None:
        # Textual calls each class's idle handler in turn, this one first: measuring here
        # leaves DataTable's own call after it nothing to do, and the widget's repaints.
        await super()._on_idle(_)
        widths = tuple(column.content_width for column in self.ordered_columns)
        if widths != self._painted_widths:
            self._painted_widths = widths
            self._clear_caches()
            self.refresh()


class ConversationItem(ListItem):
    def __init__(self, conversation: Conversation, summary: str | None) -> None:
        when = f"{conversation.started_at:%Y-%m-%d %H:%M}"
        text = one_line(summary) if summary else "(not consolidated yet)"
        super().__init__(Static(Text(f"{when}  {conversation.service}/{conversation.channel}  {text}")))
        self.conversation = conversation


def _dialog_text(title: str, lines: list[str]) -> Text:
    shown = lines[-DIALOG_LINES:]
    skipped = len(lines) - len(shown)
    head = f"{title}" + (f"  ({skipped} earlier messages not shown)" if skipped else "")
    return Text("\n".join([head, *shown]))


class Panel(Widget):
    DEFAULT_CSS = """
    Panel { height: 1fr; }
    Panel .title { text-style: bold; margin-bottom: 1; }
    Panel .result { color: $success; height: auto; }
    Panel .result.-error { color: $error; }
    Panel DataTable { height: 1fr; }
    Panel ListView { height: auto; max-height: 8; }
    """

    def __init__(self, operator: Operator | None, *, id: str) -> None:
        super().__init__(id=id)
        self.operator = operator

    async def reload(self) -> None:
        """Read the panel's data again (switching to it does this)."""

    def first_focus(self) -> Widget:
        """What takes the keyboard when the panel is shown: its first focusable widget."""
        return next((w for w in self.query("*") if w.focusable), self)

    def show_result(self, text: str, *, error: bool = False) -> None:
        result = self.query_one(".result", Static)
        result.update(Text(text))
        result.set_class(error, "-error")


class DirectoryPanel(Panel):
    """Contacts → a contact's digest → a conversation's dialog; curation by command."""

    def __init__(self, operator: Operator | None) -> None:
        super().__init__(operator, id="directory-panel")
        self.selected: str | None = None

    def compose(self) -> ComposeResult:
        with Horizontal():
            yield Table(id="contacts")
            with VerticalScroll(id="contact-view"):
                yield Static(id="contact-digest")
                yield ListView(id="contact-conversations")
                yield Static(id="contact-dialog")
        yield Static(classes="result")
        yield Input(placeholder=DIRECTORY_HELP, id="directory-command")

    def on_mount(self) -> None:
        table = self.query_one("#contacts", DataTable)
        table.add_columns("name", "kind", "last seen", "on")

    async def reload(self) -> None:
        if self.operator is None:
            return
        found = await self.operator.contacts()
        table = self.query_one("#contacts", DataTable)
        table.clear()
        for entry in found[:LIST_ROWS]:
            person = entry.person
            seen = f"{person.last_interaction_at:%Y-%m-%d %H:%M}" if person.last_interaction_at else "never"
            where = ", ".join(f"{i.service}/{i.channel}" for i in person.identities) or "-"
            table.add_row(
                Text(one_line(person.display_name)), person.kind, seen, Text(one_line(where)), key=person.id
            )
        if self.selected is not None and self.selected in {e.person.id for e in found}:
            table.move_cursor(row=table.get_row_index(self.selected))
            await self.show_contact(self.selected)
        elif found:
            await self.show_contact(found[0].person.id)

    @on(DataTable.RowHighlighted, "#contacts")
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.row_key.value is None or event.cursor_row != event.data_table.cursor_row:
            return  # stale: re-filling the table moved the cursor, and it has been put back
        if event.row_key.value != self.selected:
            self.selected = event.row_key.value  # what curation acts on: the highlighted row
            self._load_contact(event.row_key.value)

    @work(exclusive=True, group="contact")
    async def _load_contact(self, person_id: str) -> None:
        await self.show_contact(person_id)

    async def show_contact(self, person_id: str) -> None:
        if self.operator is None:
            return
        digest = await self.operator.contact(person_id)
        self.selected = digest.person.id
        person = digest.person
        lines = [f"{one_line(person.display_name)}  ({person.kind})"]
        lines += [
            f"identity: {i.service} / {i.channel} / {one_line(i.speaker_id)}" for i in person.identities
        ]
        lines += [f"address: {one_line(a.label)} {one_line(a.value)}" for a in digest.addresses]
        seen = f"{person.last_interaction_at:%Y-%m-%d %H:%M}" if person.last_interaction_at else "never"
        lines.append(f"last interaction: {seen}")
        lines.append(f"preferred channel: {one_line(digest.preferred_channel or '-')}")
        if digest.display_name_preference:
            lines.append(f"likes to be called: {one_line(digest.display_name_preference)}")
        lines.append(f"recent conversations ({len(digest.conversations)}):")
        self.query_one("#contact-digest", Static).update(Text("\n".join(lines)))
        conversations = self.query_one("#contact-conversations", ListView)
        await conversations.clear()
        await conversations.extend(ConversationItem(c, s) for c, s in digest.conversations)
        conversations.index = 0 if digest.conversations else None
        self.query_one("#contact-dialog", Static).update("")

    @on(ListView.Selected, "#contact-conversations")
    async def _open(self, event: ListView.Selected) -> None:
        if self.operator is None or not isinstance(event.item, ConversationItem):
            return
        conversation, messages, _ = await self.operator.dialog(event.item.conversation.id)
        title = f"Conversation {conversation.id} on {conversation.service}/{conversation.channel}"
        lines = [message_line(m) for m in messages]
        self.query_one("#contact-dialog", Static).update(_dialog_text(title, lines))

    @on(Input.Submitted, "#directory-command")
    async def _command(self, event: Input.Submitted) -> None:
        event.input.clear()
        try:
            text = await self.curate(event.value)
        except (PersynError, ValueError) as exc:
            self.show_result(f"error: {error_text(exc)}", error=True)
            return
        self.show_result(text)
        await self.reload()

    async def curate(self, line: str) -> str:
        """One curation command on the selected contact, through the CLI's operator logic."""
        if self.operator is None:
            raise ValueError("no directory here")
        words = shlex.split(line)
        if not words:
            raise ValueError(f"no command: {DIRECTORY_HELP}")
        if self.selected is None:
            raise ValueError("select a contact first")
        command, args = words[0].lower(), words[1:]
        who = self.selected
        if command == "rename" and args:
            person = await self.operator.rename(who, " ".join(args))
            return f"{person.id} is now {one_line(person.display_name)}"
        if command == "merge" and args:
            name = None
            if "--name" in args:
                at = args.index("--name")
                name = " ".join(args[at + 1 :]) or None
                args = args[:at]
            if len(args) != 1:
                raise ValueError(f"usage: merge OTHER [--name NAME], not {line!r}")
            person = await self.operator.merge(who, args[0], name)
            where = ", ".join(f"{i.service}/{i.channel}" for i in person.identities) or "-"
            return f"{person.id} ({one_line(person.display_name)}) now covers {one_line(where)}"
        if command in ("attach", "detach") and len(args) == 3 and all(a.strip() for a in args):
            identity = Identity(service=args[0], channel=args[1], speaker_id=args[2])
            person = await self.operator.identity(who, identity, attach=command == "attach")
            where = ", ".join(f"{i.service}/{i.channel}/{i.speaker_id}" for i in person.identities) or "-"
            return f"{person.id} ({one_line(person.display_name)}) identities: {one_line(where)}"
        if command in ("add-address", "remove-address") and len(args) >= 2:
            add, label, value = command == "add-address", args[0], " ".join(args[1:])
            person, changed = await self.operator.address(who, label, value, add=add)
            # As stored (`store.directory.checked_address` accepted them): lower-case, trimmed.
            name, label, value = one_line(person.display_name), one_line(label.lower()), one_line(value)
            if not add:
                return f"{name} no longer has {label} {value}"
            return (
                f"{name} can be reached at {label} {value}"
                if changed
                else f"{name} already has {label} {value}"
            )
        if command == "prefer" and len(args) == 1:
            person = await self.operator.prefer(who, args[0])
            return f"{one_line(person.display_name)} is reached first on {one_line(args[0])}"
        raise ValueError(f"unknown command {line!r}: {DIRECTORY_HELP}")


class ChannelsPanel(Panel):
    """Channels → their recent conversation summaries → a dialog."""

    def __init__(self, operator: Operator | None) -> None:
        super().__init__(operator, id="channels-panel")
        self.shown: str | None = None  # the channel whose conversations are listed

    def compose(self) -> ComposeResult:
        with Horizontal():
            yield Table(id="channel-list")
            with VerticalScroll():
                yield ListView(id="channel-conversations")
                yield Static(id="channel-dialog")
        yield Static(classes="result")

    def on_mount(self) -> None:
        self.query_one("#channel-list", DataTable).add_columns("service", "channel")

    async def reload(self) -> None:
        if self.operator is None:
            return
        table = self.query_one("#channel-list", DataTable)
        table.clear()
        found = await self.operator.channels()
        for digest in found[:LIST_ROWS]:
            table.add_row(
                Text(one_line(digest.service)),
                Text(one_line(digest.channel)),
                key=f"{digest.service}:{digest.channel}",
            )
        if found:
            self.shown = f"{found[0].service}:{found[0].channel}"
            await self.show_channel(self.shown)
        else:
            self.show_result("No conversations yet.")

    @on(DataTable.RowHighlighted, "#channel-list")
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        name = event.row_key.value
        if name is None or event.cursor_row != event.data_table.cursor_row or name == self.shown:
            return  # stale, or already on screen
        self.shown = name
        self._load(name)

    @work(exclusive=True, group="channel")
    async def _load(self, name: str) -> None:
        await self.show_channel(name)

    async def show_channel(self, name: str) -> None:
        if self.operator is None:
            return
        digest = await self.operator.channel(name)
        listing = self.query_one("#channel-conversations", ListView)
        await listing.clear()
        await listing.extend(ConversationItem(c, s) for c, s in digest.conversations)
        listing.index = 0 if digest.conversations else None
        self.query_one("#channel-dialog", Static).update("")

    @on(ListView.Selected, "#channel-conversations")
    async def _open(self, event: ListView.Selected) -> None:
        if self.operator is None or not isinstance(event.item, ConversationItem):
            return
        conversation, messages, _ = await self.operator.dialog(event.item.conversation.id)
        title = f"Conversation {conversation.id} on {conversation.service}/{conversation.channel}"
        self.query_one("#channel-dialog", Static).update(
            _dialog_text(title, [message_line(m) for m in messages])
        )


class MindPanel(Panel):
    """Goals, reminders, the heartbeat (d: delete it, r: restore it), the latest autonomous
    runs with their tokens; then a picker of the latest `TURN_ROWS` turns on the console's
    channel (↑/↓) and the deliberation trace of the turn picked: its critics, their
    objections, the decision. The turns and their traces are read once per load (one bounded
    read), so moving through them never waits on the store."""

    DEFAULT_CSS = """
    MindPanel #mind-scroll { height: 1fr; }
    MindPanel #turns { height: auto; max-height: 8; }
    MindPanel #trace-scroll { height: 1fr; border-top: solid $panel; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("d", "sleep", "Delete heartbeat"),
        Binding("r", "wake", "Restore heartbeat"),
    ]
    can_focus = True

    def __init__(self, operator: Operator | None, where: tuple[str, str]) -> None:
        super().__init__(operator, id="mind-panel")
        self.where = where  # (service, channel) whose turns are listed
        self.turns: dict[str, Turn] = {}
        self.picked: str | None = None  # the event id of the turn whose trace is shown

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="mind-scroll"):
            yield Static(id="mind-view")
        yield Static(Text(f"Turns on {self.where[0]}/{self.where[1]}, newest first (↑/↓ picks one):"))
        yield Table(id="turns")
        with VerticalScroll(id="trace-scroll"):
            yield Static(id="turn-trace")
        yield Static(classes="result")

    def on_mount(self) -> None:
        self.query_one("#turns", DataTable).add_columns("when", "who", "message", "outcome")

    def first_focus(self) -> Widget:
        return self.query_one("#turns", DataTable)

    async def reload(self) -> None:
        if self.operator is None:
            return
        goals = await self.operator.goals()
        reminders = await self.operator.reminders()
        beat = await self.operator.heartbeat()
        lines = ["Open goals:"]
        open_goals = [g for g in goals if g.status == "open"][:LIST_ROWS]
        lines += [f"  {one_line(g.description)}" for g in open_goals] or ["  (none)"]
        lines.append("Reminders:")
        lines += [
            f"  {r.next_fire_at:%Y-%m-%d %H:%M}  {one_line(r.objective)}" for r in reminders[:LIST_ROWS]
        ] or ["  (none)"]
        if beat.beat is None:
            lines.append("Heartbeat: deleted (asleep) — r restores it")
        else:
            lines.append(f"Heartbeat: next at {beat.beat.next_fire_at:%Y-%m-%d %H:%M} — d deletes it")
        lines.append(f"Autonomy budget: {beat.tokens_today:,} of {beat.budget:,} tokens in the last 24 h")
        lines.append("Latest autonomous runs:")
        lines += [
            f"  {a.at:%Y-%m-%d %H:%M}  {a.kind:<9} {a.tokens:>6} tokens  {one_line(a.outcome)[:80]}"
            for a in beat.activity
        ] or ["  (none)"]
        self.query_one("#mind-view", Static).update(Text("\n".join(lines)))
        await self._load_turns()

    async def _load_turns(self) -> None:
        assert self.operator is not None
        found = await self.operator.turns(*self.where, TURN_ROWS)
        self.turns = {t.event_id: t for t in found}
        table = self.query_one("#turns", DataTable)
        table.clear()
        for turn in found:
            outcome = "replied" if turn.said is not None else "silent"
            table.add_row(
                f"{turn.at:%Y-%m-%d %H:%M}",
                Text(one_line(turn.speaker)[:20]),
                Text(one_line(turn.asked or "(only the reply is in view)")[:60]),
                outcome,
                key=turn.event_id,
            )
        if self.picked not in self.turns:
            self.picked = found[0].event_id if found else None
        if self.picked is not None:
            table.move_cursor(row=table.get_row_index(self.picked))
        self.show_trace()

    @on(DataTable.RowHighlighted, "#turns")
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.row_key.value is None or event.cursor_row != event.data_table.cursor_row:
            return  # stale: re-filling the table moved the cursor, and it has been put back
        if event.row_key.value in self.turns and event.row_key.value != self.picked:
            self.picked = event.row_key.value
            self.show_trace()

    def show_trace(self) -> None:
        """The picked turn's deliberation, from what the last load read."""
        view = self.query_one("#turn-trace", Static)
        turn = self.turns.get(self.picked) if self.picked is not None else None
        if turn is None:
            view.update(Text("No turns here yet: what you say in the chat is listed above."))
            return
        lines = [f"Turn of {turn.at:%Y-%m-%d %H:%M}, {one_line(turn.speaker)}: {one_line(turn.asked or '-')}"]
        lines.append(f"replied: {one_line(turn.said)}" if turn.said is not None else "stayed silent")
        if turn.trace:
            lines += [visible(line) for line in trace_lines(turn.trace)]
        else:
            lines.append("no deliberation was recorded for this turn")
        view.update(Text("\n".join(lines)))

    async def action_sleep(self) -> None:
        if self.operator is None:
            return
        deleted = await self.operator.sleep()
        self.show_result("heartbeat deleted" if deleted else "the heartbeat was already deleted")
        await self.reload()

    async def action_wake(self) -> None:
        if self.operator is None:
            return
        beat = await self.operator.wake()
        self.show_result(f"heartbeat restored: next at {beat.next_fire_at:%Y-%m-%d %H:%M}")
        await self.reload()


class UsagePanel(Panel):
    """Today's spend by stage and by model, and the burn rate over the last hour."""

    def __init__(self, operator: Operator | None) -> None:
        super().__init__(operator, id="usage-panel")

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(id="usage-view")
        yield Static(classes="result")

    async def reload(self) -> None:
        if self.operator is None:
            return
        today = self.operator.today()
        lines: list[str] = []
        for by in ("stage", "model"):
            report = await self.operator.usage(by, today)
            lines.append(f"Today by {by}:")
            lines.append(f"  {by:<28} {'calls':>6} {'in':>9} {'out':>9} {'cost $':>10}")
            for row in [*report.rows, report.total]:
                cost = f"{row.cost_usd:.4f}" if row.cost_usd is not None else "-"
                lines.append(
                    f"  {one_line(row.key)[:28]:<28} {row.calls:>6} {row.input_tokens:>9} "
                    f"{row.output_tokens:>9} {cost:>10}"
                )
        hour = await self.operator.usage("stage", self.operator.hour_ago())
        tokens = hour.total.input_tokens + hour.total.output_tokens
        cost = f", ${hour.total.cost_usd:.4f}/h" if hour.total.cost_usd is not None else ""
        lines.append(f"Burn rate (last hour): {tokens:,} tokens/h, {hour.total.calls} calls/h{cost}")
        self.query_one("#usage-view", Static).update(Text("\n".join(lines)))
