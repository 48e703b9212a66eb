"""`persyn chat`: a line-mode chat in the terminal (SPEC §8 stage 1).

The reply streams as it is generated; notices are shown distinctly from speech. The
operator has a stable identity key (service "terminal", their login name) separate from
an editable display name: `/name NEW` changes only the display name, remembered as a
per-person preference for next time (SPEC App. B).
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import inspect
import shutil
import sys
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TextIO

from persyn.core.config import AgentConfig
from persyn.core.errors import InputError
from persyn.core.events import Event, EventKind, Notice, Outbound, Speaker, Upload
from persyn.core.ids import new_id
from persyn.gateway.base import SinkCallable, SinkEvent
from persyn.present.render import error_text, visible
from persyn.runtime.api import RuntimeAPI
from persyn.runtime.channel import Channel

__all__ = ["SERVICE", "TerminalChannel", "login_name", "name_command", "operator_speaker", "run_chat"]

SERVICE = "terminal"
_HELP = (
    "Commands: /name NEW (change how the agent calls you), /attach PATH (an image, audio or a document, "
    "sent with your next message), /help, /quit. Ctrl-D or Ctrl-C leaves."
)
_ATTACH_READ_LIMIT = 200_000_000  # a file larger than this is not read (the [senses] limits are lower)


class TerminalChannel(Channel):
    """Adapter between the runtime and one terminal. Prints are synchronous and cheap.

    Streaming follows SPEC App. B: the *draft* streams as the reply takes shape; text before a
    tool call is a committed segment; if the agent then chooses silence the draft is visibly
    withdrawn and the reason shown. The *revise* phase streams dimmed: inline, under the
    draft it replaces; deferred, under the committed reply as a transient working surface
    that is cleared (or, on a plain pipe, closed with a note) when deliberation ends.
    """

    service = SERVICE
    interactive = True  # a person is waiting: deliberation defaults to deferred here
    streams_tokens = True
    shows_host_paths = True  # the operator's own machine: the line names the image file

    def __init__(self, agent: AgentConfig, out: TextIO, *, color: bool) -> None:
        self.agent = agent
        self.out = out
        self.color = color
        self._streamed: dict[str, str] = {}
        self._committed: dict[str, str] = {}  # segments closed by a tool call
        self._held: dict[str, str] = {}  # a draft's trailing newlines, not yet written
        self._delivered: set[str] = set()
        self._surface: dict[str, str] = {}  # the revise working surface per event
        self._open_line = False

    def _style(self, text: str, code: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.color else text

    def _write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()

    def _end_line(self) -> None:
        if self._open_line:
            self._write("\n")
            self._open_line = False

    def serves(self, agent_id: str) -> bool:
        """One terminal talks with one agent: another agent's messages wait for its own."""
        return agent_id == self.agent.id

    def sink_for(self, event: Event) -> SinkCallable | None:
        def sink(item: SinkEvent) -> None:
            if item.phase == "revise":
                self._revise(event.id, item)
            elif item.kind == "tool_start":
                # What was said before acting is a finished segment of the reply (rule 4).
                self._end_line()
                self._held.pop(event.id, None)
                self._committed[event.id] = self._committed.get(event.id, "") + self._streamed.pop(
                    event.id, ""
                )
                self.notice_text(f"(using {item.text or 'a tool'}…)")
            elif item.kind == "delta" and item.text and item.phase == "draft":
                self._draft(event.id, item.text)

        return sink

    def _draft(self, event_id: str, text: str) -> None:
        """Stream a draft: leading whitespace dropped, trailing newlines held back until
        more text follows (so a reply that ends in a newline leaves no blank line)."""
        if event_id not in self._streamed:
            text = text.lstrip()
            if not text:
                return
            self._end_line()
            self._write(self._style(f"{self.agent.name}: ", "1;36"))
            self._streamed[event_id] = ""
        self._streamed[event_id] += text
        body = text.rstrip("\n")
        held = self._held.pop(event_id, "")
        if body:
            self._write(held + visible(body))
            held = ""
        self._held[event_id] = held + text[len(body) :]
        self._open_line = True

    def _revise(self, event_id: str, item: SinkEvent) -> None:
        if item.kind == "delta" and item.text:
            if event_id not in self._surface:
                self._end_line()
                label = "reconsidering" if event_id in self._delivered else "revising"
                self._write(self._style(f"  ↳ {label}: ", "2"))
                self._surface[event_id] = ""
            self._surface[event_id] += item.text
            self._write(self._style(visible(item.text), "2"))
            self._open_line = True
        elif item.kind == "end" and event_id in self._delivered:
            self._clear_surface(event_id)

    def _clear_surface(self, event_id: str) -> None:
        """The deferred revision's working surface goes once deliberation is done (rule 3)."""
        text = self._surface.pop(event_id, None)
        if text is None:
            return
        self._end_line()
        if self.color:
            width = max(20, shutil.get_terminal_size().columns)
            shown = f"  ↳ reconsidering: {text}"
            lines = sum(max(1, -(-len(line) // width)) for line in shown.split("\n"))
            self._write(f"\x1b[{lines}A\r\x1b[J")
        self.notice_text("(reconsidered; I'll fold that into my next reply)")

    def deliberation_done(self, event: Event, objections: int) -> None:
        self._clear_surface(event.id)

    async def direct_channel(self, agent_id: str, speaker_id: str) -> str:
        """The operator at the terminal has one conversation: its channel."""
        return SERVICE

    async def deliver(self, outbound: Outbound) -> None:
        if outbound.while_away:
            when = f" at {outbound.sent_at.astimezone():%Y-%m-%d %H:%M}" if outbound.sent_at else ""
            self.notice_text(f"(while you were away{when})")
        self._delivered.add(outbound.event_id)
        if len(self._delivered) > 1000:
            self._delivered.clear()
            self._delivered.add(outbound.event_id)
        committed = _words(self._committed.pop(outbound.event_id, ""))
        streamed = _words(self._streamed.pop(outbound.event_id, ""))
        self._held.pop(outbound.event_id, None)
        revised = self._surface.pop(outbound.event_id, None) is not None
        self._end_line()
        # Rule 4: what was said before a tool is on screen already. The reply sent is the
        # answer after it (the tool loop's last reply), or the whole text; only the rest is
        # compared with what streamed since the tool, and shown again if it differs.
        text = _words(outbound.text)
        tail = text[len(committed) :].strip() if committed and text.startswith(committed) else text
        if not revised and (streamed or committed) and streamed == tail:
            return
        if streamed:
            self.notice_text("(revised)", "2")
        shown = outbound.text if tail == text else tail
        self._write(self._style(f"{self.agent.name}: ", "1;36") + visible(shown) + "\n")

    async def notice(self, event: Event, notice: Notice) -> None:
        streamed = self._streamed.pop(event.id, None)
        self._held.pop(event.id, None)
        self._surface.pop(event.id, None)
        if streamed is not None or event.id in self._committed:
            self._committed.pop(event.id, None)
            self._end_line()
            self.notice_text("(the draft above was withdrawn)", "2")
        code = {"error": "31", "warning": "33"}.get(notice.level, "2")
        self.notice_text(notice.text, code)

    def notice_text(self, text: str, code: str = "2") -> None:
        self._end_line()
        self._write(self._style(f"· {visible(text)}", code) + "\n")


def _words(text: str) -> str:
    """`text` with its whitespace runs made single spaces: streamed deltas and the reply
    sent may space the same words differently."""
    return " ".join(text.split())


def operator_speaker(login: str) -> Speaker:
    """The operator at this terminal: the stable identity key (`operator:<login>`) that
    `persyn chat` and `persyn console` share, so both are one person to the agent."""
    return Speaker(service=SERVICE, channel=SERVICE, speaker_id=f"operator:{login}", display_name=login)


def attach_command(line: str) -> Upload | None:
    """The file of an `/attach PATH` line, read, or None when it is not one. Raises
    `InputError` for a path that is not a readable file, or one too large to read."""
    if line != "/attach" and not line.startswith("/attach "):
        return None
    raw = line.removeprefix("/attach").strip().strip("'\"")
    if not raw:
        raise InputError("usage: /attach PATH")
    path = Path(raw).expanduser()
    try:
        if not path.is_file():
            raise InputError(f"{raw!r} is not a file")
        if path.stat().st_size > _ATTACH_READ_LIMIT:
            raise InputError(f"{raw!r} is over {_ATTACH_READ_LIMIT} bytes; it is not read")
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{raw!r} cannot be read: {exc.strerror or exc}") from exc
    return Upload(data=data, filename=path.name)


def name_command(line: str) -> str | None:
    """The new display name of a `/name NEW` line, or None when it is not one. Raises
    `InputError` for an empty or over-long name."""
    if not line.startswith("/name"):
        return None
    new_name = line.removeprefix("/name").strip()
    if not new_name or len(new_name) > 64:
        raise InputError(f"invalid name {new_name!r}: usage /name NEW (1 to 64 characters)")
    return new_name


SpeakerLookup = Callable[[str, Speaker], Awaitable[tuple[str, str | None]]]


async def run_chat(
    runtime: RuntimeAPI | Awaitable[RuntimeAPI],
    agent: AgentConfig,
    *,
    resolve_speaker: SpeakerLookup | None = None,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
    user: str | None = None,
    display_name: str | None = None,
    read_line: Callable[[], str] | None = None,
) -> int:
    """Chat until EOF or interrupt. Returns a process exit code.

    `runtime` may still be starting (an awaitable of it): with `resolve_speaker` (the store
    alone can answer it) a terminal shows its prompt at once and the first line is read while
    DBOS and the models load; what is printed meanwhile (the offline notice, what arrived
    while away) is followed by the prompt again."""
    out = stdout or sys.stdout
    source = stdin or sys.stdin
    interactive = source.isatty() and out.isatty()
    channel = TerminalChannel(agent, out, color=interactive)
    login = user or login_name()
    operator = operator_speaker(login)
    starting = inspect.isawaitable(runtime)
    if interactive:
        channel.notice_text(f"Talking with {agent.name}. {_HELP}")
    if resolve_speaker is None or not starting:
        runtime = await _started(runtime)
        resolve_speaker = runtime.resolve_speaker
    person_id, remembered = await resolve_speaker(agent.id, operator)
    # An explicit per-session name wins over the remembered preference (SPEC App. B).
    name = display_name or remembered or login

    def _prompt() -> str:
        return channel._style(f"{name}> ", "1;32")

    def _read() -> str:
        if read_line is not None:
            return read_line()
        if interactive:
            return input(_prompt())
        line = source.readline()
        if not line:
            raise EOFError
        return line.rstrip("\n")

    first: asyncio.Future[str] | None = None
    if interactive and inspect.isawaitable(runtime):
        first = _read_in_daemon_thread(_read)  # the prompt is up while the runtime starts
    runtime = await _started(runtime)
    offline = runtime.offline_notice()
    if offline:
        channel.notice_text(offline, "33")
    shown = await runtime.attach_channel(channel)  # what arrived while away is shown first
    if first is not None and not first.done() and (offline or shown):
        channel._write(_prompt())  # the prompt scrolled up under what was printed

    failed = False
    staged: list[Upload] = []  # `/attach`ed files, sent with the next message
    while True:
        try:
            if first is not None:
                line, first = await first, None
            else:
                line = await asyncio.to_thread(_read)
        except (EOFError, KeyboardInterrupt):
            break
        stripped = line.strip()
        if not stripped:
            continue
        if stripped in ("/quit", "/exit"):
            break
        if stripped == "/help":
            channel.notice_text(_HELP)
            continue
        try:
            upload = attach_command(stripped)
        except InputError as exc:
            channel.notice_text(str(exc), "33")
            continue
        if upload is not None:
            staged.append(upload)
            channel.notice_text(f"{upload.filename} goes with your next message.")
            continue
        try:
            new_name = name_command(stripped)
        except InputError:
            channel.notice_text("usage: /name NEW (1 to 64 characters)", "33")
            continue
        if new_name is not None:
            name = new_name
            await runtime.remember_display_name(agent.id, person_id, name)
            channel.notice_text(f"{agent.name} will call you {name} from now on.")
            continue
        try:
            text = runtime.validate_text(line)
        except InputError as exc:
            channel.notice_text(str(exc), "31")
            continue
        try:
            attachments = (
                await runtime.keep_attachments(agent.id, SERVICE, SERVICE, operator.speaker_id, staged)
                if staged
                else ()
            )
        except InputError as exc:  # nothing of it kept: the message waits to be sent again
            channel.notice_text(f"not sent: {exc}", "31")
            staged = []
            continue
        staged = []
        now = runtime.clock.now()
        event = Event(
            id=new_id(now),
            agent_id=agent.id,
            kind=EventKind.MESSAGE,
            service=SERVICE,
            channel=SERVICE,
            speaker=operator.named(name),
            text=text,
            received_at=now,
            attachments=attachments,
        )
        try:
            await runtime.submit(event)
            marker = await runtime.wait_marker(agent.id, event.id)
            if marker.transmitted:  # perhaps by another process (`persyn run` took the turn)
                await runtime.deliver_reply(agent.id, event.id)
        except (KeyboardInterrupt, asyncio.CancelledError):
            break
        except Exception as exc:  # keep the chat alive; say what went wrong
            channel.notice_text(f"error: {error_text(exc)}", "31")
            failed = True  # and exit non-zero at the end: a script piping into chat learns of it
    runtime.detach_channel(channel)
    with contextlib.suppress(Exception):
        channel._end_line()
    if interactive:
        out.write("\n")
    return 1 if failed else 0


async def _started(runtime: RuntimeAPI | Awaitable[RuntimeAPI]) -> RuntimeAPI:
    return await runtime if inspect.isawaitable(runtime) else runtime


def _read_in_daemon_thread(read: Callable[[], str]) -> asyncio.Future[str]:
    """`read()` in a daemon thread: should the runtime fail to start meanwhile, the process
    exits with its error instead of waiting for a line nobody will read."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[str] = loop.create_future()

    def settle(line: str | None, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(line or "")

    def run() -> None:
        try:
            line, error = read(), None
        except BaseException as exc:  # EOFError, KeyboardInterrupt: handed to the chat loop
            line, error = None, exc
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(settle, line, error)

    threading.Thread(target=run, name="persyn-chat-input", daemon=True).start()
    return future


def login_name() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "operator"
