"""The fast path of `persyn send`: hand the message to a running worker over its control
socket (`runtime.durable.control`), standard library only.

Enqueueing through the system database means importing DBOS and SQLAlchemy (1.7 s on a quiet
2-core machine), then waiting for a worker polling its queue: the path when no worker listens.
When a worker of the deployment listens on `data/control.sock`, `persyn send` instead writes
one JSON line to it; the worker's own intake validates, persists and enqueues the event with
its immediate wake, waits for the completion marker in-process and writes the outcome back.

The exchange, one request per connection, each message one JSON line:

    → {"op": "send", "event": {...}, "wait": true, "timeout": 300.0}
    ← {"accepted": "<event id>"}          the event is stored and queued
    ← {"marker": {"transmitted": ..., "text": ..., "reason": ...}}   or {"timeout": true}

or a single `{"error": "input" | "request" | "internal", "message": ...}` instead. `send`
returns what happened; `Unreachable` and `Lost` tell the caller to take the queue path
(`runtime.durable.dispatch.Submitter`) with the same event: storing it is idempotent by its id and
its enqueue deduplicated, so handing over twice never answers twice.

Only the owner of the deployment can connect: the socket file is mode 0600 (connecting to
a unix socket needs write permission on it), and the worker also checks the peer's uid.

Unix socket paths are limited to about 108 bytes; a deeper data directory is reached through
`/proc/self/fd/<directory fd>/control.sock` (Linux), which is short whatever the depth.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from persyn.core.errors import InputError

__all__ = [
    "CONTROL_SOCKET",
    "Accepted",
    "Lost",
    "Replied",
    "SendRequest",
    "TimedOut",
    "Unreachable",
    "control_path",
    "max_request_bytes",
    "send",
    "short_address",
]

CONTROL_SOCKET = "control.sock"
_CONNECT_SECONDS = 2.0  # a local listener accepts at once; a wedged one is treated as absent
_REPLY_MARGIN_SECONDS = 5.0  # the worker answers "timeout" itself; this is for a hung one
_MAX_PATH_BYTES = 100  # sun_path is 108 bytes with its NUL; keep a margin


def control_path(data_dir: Path) -> Path:
    """Where a deployment's control socket is."""
    return data_dir / CONTROL_SOCKET


def max_request_bytes(max_message_chars: int) -> int:
    """The longest request line a worker reads: a message at its limit, every character
    escaped as `\\uXXXX` (6 bytes), and room for the envelope."""
    return 6 * max_message_chars + 64 * 1024


@contextlib.contextmanager
def short_address(path: Path) -> Iterator[str]:
    """An address for `path` that fits a unix socket's limit (module docstring)."""
    if len(os.fsencode(path)) <= _MAX_PATH_BYTES:
        yield str(path)
        return
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)


@dataclass(frozen=True)
class SendRequest:
    """One message for an agent, made by `persyn send` (its id and time on the sender's clock)."""

    event_id: str
    agent_id: str
    channel: str
    speaker_id: str
    display_name: str
    text: str
    received_at: str  # ISO 8601 with its offset

    def line(self, *, wait: bool, timeout: float) -> bytes:
        event = {
            "id": self.event_id,
            "agent_id": self.agent_id,
            "channel": self.channel,
            "speaker_id": self.speaker_id,
            "display_name": self.display_name,
            "text": self.text,
            "received_at": self.received_at,
        }
        body = {"op": "send", "event": event, "wait": wait, "timeout": timeout}
        return json.dumps(body, ensure_ascii=False).encode() + b"\n"


@dataclass(frozen=True)
class Unreachable:
    """No worker answered on the socket (none runs, or a stale file of a killed one), or it
    refused the request before storing anything: take the queue path."""

    why: str


@dataclass(frozen=True)
class Accepted:
    """Stored and queued (`--no-wait`)."""

    event_id: str


@dataclass(frozen=True)
class Replied:
    """The completion marker: the reply, or the reason the agent stayed silent."""

    transmitted: bool
    text: str | None
    reason: str | None


@dataclass(frozen=True)
class TimedOut:
    """No outcome within the timeout; the event stays queued."""


@dataclass(frozen=True)
class Lost:
    """The worker accepted the event, then the connection ended without its outcome (it was
    stopped or killed): wait for the marker on the queue path."""


Outcome = Unreachable | Accepted | Replied | TimedOut | Lost


def send(data_dir: Path, request: SendRequest, *, wait: bool, timeout: float) -> Outcome:
    """Hand `request` to the worker listening in `data_dir`. Raises `InputError` for a message
    the worker rejected as bad input (nothing was stored)."""
    path = control_path(data_dir)
    if not path.exists():
        return Unreachable(f"no socket at {str(path)!r}")
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        client.settimeout(_CONNECT_SECONDS)
        try:
            with short_address(path) as address:
                client.connect(address)
            client.sendall(request.line(wait=wait, timeout=timeout))
        except OSError as exc:  # refused (stale socket), vanished, timed out, reset
            return Unreachable(f"{str(path)!r}: {exc}")
        client.settimeout(timeout + _REPLY_MARGIN_SECONDS)
        lines = _Lines(client)
        try:
            first = lines.next()
        except TimeoutError:  # a hung worker: the event may or may not be stored
            return Lost()
        if first is None:
            return Unreachable("the worker closed the connection")
        if "error" in first:
            if first["error"] == "input":
                raise InputError(str(first.get("message")))
            return Unreachable(f"the worker refused the request: {first.get('message')!r}")
        if "accepted" not in first:
            return Unreachable(f"unexpected answer {first!r}")
        if not wait:
            return Accepted(str(first["accepted"]))
        try:
            second = lines.next()
        except TimeoutError:
            return TimedOut()
        if second is None:
            return Lost()
        if second.get("timeout") is True:
            return TimedOut()
        marker = second.get("marker")
        if not isinstance(marker, dict):
            return Lost()
        text, reason = marker.get("text"), marker.get("reason")
        return Replied(
            transmitted=marker.get("transmitted") is True,
            text=text if isinstance(text, str) else None,
            reason=reason if isinstance(reason, str) else None,
        )
    finally:
        client.close()


class _Lines:
    """JSON lines read from a connection; None at its end (or a line that is not JSON)."""

    def __init__(self, connection: socket.socket) -> None:
        self._file = connection.makefile("rb")

    def next(self) -> dict[str, object] | None:
        try:
            line = self._file.readline()
        except ConnectionError:
            return None
        if not line.endswith(b"\n"):
            return None
        try:
            value = json.loads(line)
        except ValueError:
            return None
        return value if isinstance(value, dict) else None
