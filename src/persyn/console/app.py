"""`ConsoleApp`: the operator console (SPEC App. B), a Textual app over `RuntimeAPI`.

The chat tab holds the transcript, the composer pinned below it (it keeps focus while the
agent works: a turn runs in a worker, never in the key handler) and a status line (agent,
model, today's tokens). F2-F5 switch to the directory, channels, mind and usage panels
(`panels.py`), which read and curate through the same operator functions as the CLI.

The app is given its runtime ready or still starting (an awaitable): the screen is up at
once and the composer takes the first line while the runtime loads.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Footer, Input, Static, TabbedContent, TabPane

from persyn.channels.console.channel import ConsoleChannel, Update
from persyn.channels.terminal.channel import SERVICE, attach_command, name_command, operator_speaker
from persyn.console.operator_views import Operator
from persyn.console.panels import ChannelsPanel, DirectoryPanel, MindPanel, Panel, UsagePanel
from persyn.console.transcript import Transcript
from persyn.core.config import AgentConfig
from persyn.core.errors import InputError
from persyn.core.events import Attachment, CompletionMarker, Event, EventKind, Upload
from persyn.core.ids import new_id
from persyn.present.render import error_text
from persyn.runtime.api import RuntimeAPI

__all__ = ["ConsoleApp", "ConsoleUpdate", "Spend"]

HELP = (
    "Commands: /name NEW (change how the agent calls you), /attach PATH (an image, audio or a "
    "document, sent with your next message), /help, /quit. "
    "F1 chat · F2 directory · F3 channels · F4 mind · F5 usage · Ctrl-Q quits."
)


@dataclass(frozen=True)
class Spend:
    """Today's metered spend, for the status line."""

    tokens: int
    cost_usd: float | None


class ConsoleUpdate(Message):
    """An `Update` from the channel, queued on the app's loop."""

    def __init__(self, update: Update) -> None:
        super().__init__()
        self.update = update


class ConsoleApp(App[int]):
    CSS = """
    #transcript { height: 1fr; padding: 0 1; }
    #composer { dock: bottom; }
    TabbedContent { height: 1fr; }
    #status {
        height: 1; background: $panel; color: $text-muted; padding: 0 1;
        text-wrap: nowrap; text-overflow: ellipsis;
    }
    .operator { color: $success; margin-top: 1; }
    Reply { margin: 0; padding: 0; }
    .draft { color: $text; }
    .segment { color: $text; }
    .notice { color: $text-muted; }
    .notice-error { color: $error; }
    .notice-warning { color: $warning; }
    .notice-silence { color: $accent; text-style: italic; }
    .notice-away { color: $warning; text-style: italic; }
    .indicator { color: $warning; text-style: italic; }
    .working { color: $text-muted; border-left: thick $panel; padding-left: 1; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("f1", "show('chat')", "Chat"),
        Binding("f2", "show('directory')", "Directory"),
        Binding("f3", "show('channels')", "Channels"),
        Binding("f4", "show('mind')", "Mind"),
        Binding("f5", "show('usage')", "Usage"),
        Binding("ctrl+q", "quit", "Quit", priority=True),
    ]

    def __init__(
        self,
        runtime: RuntimeAPI | Awaitable[RuntimeAPI],
        agent: AgentConfig,
        *,
        login: str,
        model_label: str,
        operator: Operator | None = None,
        spend: Callable[[], Awaitable[Spend]] | None = None,
        display_name: str | None = None,
        cursor_blink: bool = True,
        on_close: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        super().__init__()
        self._cursor_blink = cursor_blink
        self._on_close = on_close
        self._starting = runtime
        self.runtime: RuntimeAPI | None = None
        self.agent = agent
        self.login = login
        self.model_label = model_label
        self.operator = operator
        self._spend = spend
        self._explicit_name = display_name
        self.display_name = display_name or login
        self.person_id: str | None = None
        self.channel = ConsoleChannel(agent, self._post_update)
        self.ready = asyncio.Event()
        self.failed = False
        self._tokens: Spend | None = None
        self._staged: list[Upload] = []  # `/attach`ed files, sent with the next message

    # layout --------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        with TabbedContent(initial="chat"):
            with TabPane("Chat", id="chat"), Vertical():
                yield Transcript(self.agent.name)
                yield Input(placeholder=f"Message {self.agent.name}… (/help)", id="composer")
            with TabPane("Directory", id="directory"):
                yield DirectoryPanel(self.operator)
            with TabPane("Channels", id="channels"):
                yield ChannelsPanel(self.operator)
            with TabPane("Mind", id="mind"):
                yield MindPanel(self.operator, (SERVICE, SERVICE))  # the console's own turns
            with TabPane("Usage", id="usage"):
                yield UsagePanel(self.operator)
        yield Static(id="status")
        yield Footer()

    @property
    def transcript(self) -> Transcript:
        return self.query_one(Transcript)

    async def on_unmount(self) -> None:
        self.channel.closed = True
        if self.runtime is not None:
            self.runtime.detach_channel(self.channel)
        if self._on_close is not None:
            await self._on_close()

    def on_mount(self) -> None:
        self.query_one("#composer", Input).cursor_blink = self._cursor_blink
        self.title = f"persyn console · {self.agent.name}"
        self.query_one("#composer", Input).focus()
        self.transcript.note(f"Talking with {self.agent.name}. {HELP}")
        self._show_status()
        self.run_worker(self._connect(), exclusive=False, group="connect")
        if self._spend is not None:
            self.set_interval(5.0, self._refresh_spend)

    def action_show(self, tab: str) -> None:
        self.query_one(TabbedContent).active = tab
        if tab == "chat":
            self.query_one("#composer", Input).focus()
            return
        panel = self.query_one(f"#{tab}", TabPane).children[0]
        if isinstance(panel, Panel):
            # Focus moves into the panel (a focused composer would pull its own tab back up).
            panel.first_focus().focus()
            self.run_worker(panel.reload(), group=f"panel-{tab}", exclusive=True)

    # the runtime ---------------------------------------------------------------------------
    async def _connect(self) -> None:
        try:
            runtime = await self._starting if inspect.isawaitable(self._starting) else self._starting
            person_id, remembered = await runtime.resolve_speaker(self.agent.id, operator_speaker(self.login))
        except Exception as exc:  # the runtime did not start: say so, keep the screen
            self.transcript.note(f"error: {error_text(exc)}", "error")
            self.failed = True
            self.ready.set()  # what waits for it learns there is no runtime
            return
        self.runtime, self.person_id = runtime, person_id
        # An explicit per-session name wins over the remembered preference (SPEC App. B).
        self.display_name = self._explicit_name or remembered or self.login
        offline = runtime.offline_notice()
        if offline:
            self.transcript.note(offline, "warning")
        await runtime.attach_channel(self.channel)  # what arrived while away is shown first
        self.ready.set()
        self._show_status()
        await self._refresh_spend()

    def _post_update(self, update: Update) -> None:
        self.post_message(ConsoleUpdate(update))

    def on_console_update(self, message: ConsoleUpdate) -> None:
        self.transcript.apply(message.update)

    @on(Input.Submitted, "#composer")
    def _submitted(self, submitted: Input.Submitted) -> None:
        line = submitted.value
        submitted.input.clear()
        stripped = line.strip()
        if not stripped:
            return
        if stripped in ("/quit", "/exit"):
            self.exit(1 if self.failed else 0)
            return
        if stripped == "/help":
            self.transcript.note(HELP)
            return
        try:
            upload = attach_command(stripped)
        except InputError as exc:
            self.transcript.note(str(exc), "warning")
            return
        if upload is not None:
            self._staged.append(upload)
            self.transcript.note(f"{upload.filename} goes with your next message.")
            return
        try:
            new_name = name_command(stripped)
        except InputError:
            self.transcript.note("usage: /name NEW (1 to 64 characters)", "warning")
            return
        if new_name is not None:
            self.run_worker(self._rename(new_name), group="turns")
            return
        self.transcript.operator(self.display_name, line)
        staged, self._staged = self._staged, []
        self.run_worker(self._turn(line, staged), group="turns")

    async def action_quit(self) -> None:
        self.exit(1 if self.failed else 0)

    async def _rename(self, name: str) -> None:
        await self.ready.wait()
        if self.runtime is None or self.person_id is None:
            self.transcript.note("error: the runtime did not start; nothing was changed", "error")
            return
        self.display_name = name
        await self.runtime.remember_display_name(self.agent.id, self.person_id, name)
        self.transcript.note(f"{self.agent.name} will call you {name} from now on.")
        self._show_status()

    async def _turn(self, line: str, staged: list[Upload] | None = None) -> CompletionMarker | None:
        await self.ready.wait()
        runtime = self.runtime
        if runtime is None:
            self.transcript.note("error: the runtime did not start; nothing was sent", "error")
            return None
        try:
            text = runtime.validate_text(line)
        except InputError as exc:
            self.transcript.note(str(exc), "error")
            return None
        attachments: tuple[Attachment, ...] = ()
        if staged:
            try:
                attachments = await runtime.keep_attachments(
                    self.agent.id, SERVICE, SERVICE, operator_speaker(self.login).speaker_id, staged
                )
            except InputError as exc:  # nothing of it kept: the message is not sent either
                self.transcript.note(f"not sent: {exc}", "error")
                return None
        now = runtime.clock.now()
        speaker = operator_speaker(self.login).named(self.display_name)
        event = Event(
            id=new_id(now),
            agent_id=self.agent.id,
            kind=EventKind.MESSAGE,
            service=SERVICE,
            channel=SERVICE,
            speaker=speaker,
            text=text,
            received_at=now,
            attachments=attachments,
        )
        try:
            await runtime.submit(event)
            marker = await runtime.wait_marker(self.agent.id, event.id)
            if marker.transmitted:  # perhaps by another process (`persyn run` took the turn)
                await runtime.deliver_reply(self.agent.id, event.id)
        except Exception as exc:  # keep the console alive; say what went wrong
            self.transcript.note(f"error: {error_text(exc)}", "error")
            self.failed = True
            return None
        await self._refresh_spend()
        return marker

    # the status line -------------------------------------------------------------------------
    async def _refresh_spend(self) -> None:
        if self._spend is None:
            return
        try:
            self._tokens = await self._spend()
        except Exception:  # a ledger that cannot be read shows no figure, nothing more
            self._tokens = None
        self._show_status()

    def _show_status(self) -> None:
        spend = "today: -"
        if self._tokens is not None:
            cost = f", ${self._tokens.cost_usd:.4f}" if self._tokens.cost_usd is not None else ""
            spend = f"today: {self._tokens.tokens:,} tokens{cost}"
        state = "" if self.ready.is_set() else " · starting…"
        self.query_one("#status", Static).update(
            Text(f"{self.agent.name} · you are {self.display_name} · {spend}{state} · {self.model_label}")
        )
