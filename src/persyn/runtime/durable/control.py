"""A worker's control socket: where `persyn send` hands a message to a running worker
(`runtime.durable.control_client` is the other end and describes the exchange).

`persyn run` and `persyn worker` listen on `data/control.sock`. One worker of a deployment
serves it at a time: the one holding the `flock` on `data/control.lock` (released by the
kernel however the process ends). A later worker finds the lock held and does not listen;
`persyn send` reaches the deployment through the queue either way. A socket file left by a
worker killed with -9 refuses connections (the sender then takes the queue path) and is
replaced by the next worker that takes the lock.

Safe to expose because only the deployment's owner can connect: the socket is created under
a temporary name, made mode 0600 — connecting to a unix socket needs write permission on
its file — and only then renamed into place; each connection's peer uid (`SO_PEERCRED`) must
also be ours. What it accepts is exactly what `persyn send` may do with the same files.

A request is bounded (`control_client.max_request_bytes`, a line read within
`_READ_SECONDS`); whatever arrives — too long, not JSON, the wrong shape, a bad message —
is answered with one error line and the connection closed; the worker serves on.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import socket
import struct
from datetime import datetime
from typing import Any, Protocol

from pydantic import ValidationError

from persyn.core.config import Settings
from persyn.core.errors import InputError, PersynError
from persyn.core.events import CompletionMarker, Event, Speaker
from persyn.runtime.durable.control_client import control_path, max_request_bytes, short_address

__all__ = ["ControlServer", "SendTarget"]

log = logging.getLogger(__name__)

_READ_SECONDS = 10.0  # to send one request line; a connection that sends nothing is closed
_LOCK_FILE = "control.lock"
_PEERCRED = struct.Struct("3i")  # pid, uid, gid


class SendTarget(Protocol):
    """What the socket hands a message to (`runtime.app.Runtime`)."""

    async def submit(self, event: Event, *, from_step: bool = False) -> str: ...

    async def wait_marker(self, agent_id: str, event_id: str, timeout: float = 300.0) -> CompletionMarker: ...


class _BadRequest(Exception):
    pass


class ControlServer:
    """The listening socket of one worker process; `await ControlServer.start(...)`."""

    def __init__(self, target: SendTarget, settings: Settings) -> None:
        self._target = target
        self._settings = settings
        self._path = control_path(settings.data_dir)
        self._server: asyncio.Server | None = None
        self._lock_fd: int | None = None
        self._handlers: set[asyncio.Task[None]] = set()

    @classmethod
    async def start(cls, target: SendTarget, settings: Settings) -> ControlServer:
        """Listen if no other worker of the deployment does. Fails soft: a socket that
        cannot be made is logged, and `persyn send` takes the queue path."""
        server = cls(target, settings)
        try:
            await server._listen()
        except OSError as exc:
            log.warning(
                "no control socket at %r (persyn send takes the queue path): %s", str(server._path), exc
            )
            server._release_lock()
        return server

    @property
    def listening(self) -> bool:
        return self._server is not None

    async def _listen(self) -> None:
        if not self._take_lock():
            log.debug("another worker serves %r", str(self._path))
            return
        with contextlib.suppress(FileNotFoundError):
            self._path.unlink()  # a killed worker's: we hold the lock, so nobody serves it
        temporary = self._path.with_name(f".{self._path.name}.{os.getpid()}")
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with short_address(temporary) as address:
                listener.bind(address)
            os.chmod(temporary, 0o600)  # before it has the name a sender connects to
            listener.listen(64)
            listener.setblocking(False)
            self._server = await asyncio.start_unix_server(
                self._connection, sock=listener, limit=max_request_bytes(self._max_chars)
            )
            os.replace(temporary, self._path)
        except BaseException:
            listener.close()
            with contextlib.suppress(FileNotFoundError):
                temporary.unlink()
            raise

    @property
    def _max_chars(self) -> int:
        return self._settings.conversation.max_message_chars

    def _take_lock(self) -> bool:
        fd = os.open(self._path.with_name(_LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._lock_fd = fd
        return True

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            fd, self._lock_fd = self._lock_fd, None
            os.close(fd)

    async def close(self) -> None:
        """Stop listening and drop open exchanges (their senders take the queue path)."""
        if self._server is not None:
            server, self._server = self._server, None
            server.close()
            with contextlib.suppress(FileNotFoundError):
                self._path.unlink()
            for task in list(self._handlers):
                task.cancel()
            await asyncio.gather(*self._handlers, return_exceptions=True)
            await server.wait_closed()
        self._release_lock()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            await self._serve(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the sender went away; its event, if accepted, stays queued
        except Exception:
            log.exception("control socket: a request failed")
        finally:
            self._handlers.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not _same_user(writer):
            await _answer(writer, {"error": "request", "message": "not the deployment's owner"})
            return
        try:
            line = await asyncio.wait_for(reader.readuntil(b"\n"), _READ_SECONDS)
        except asyncio.LimitOverrunError:
            limit = max_request_bytes(self._max_chars)
            await _answer(writer, {"error": "request", "message": f"request longer than {limit} bytes"})
            return
        except TimeoutError:
            await _answer(writer, {"error": "request", "message": f"no request within {_READ_SECONDS:g}s"})
            return
        except asyncio.IncompleteReadError:
            return  # closed before a whole line: nothing to answer
        try:
            event, wait, timeout = _parse(line, self._max_chars)
            await self._target.submit(event)
        except _BadRequest as exc:
            await _answer(writer, {"error": "request", "message": str(exc)})
            return
        except InputError as exc:
            await _answer(writer, {"error": "input", "message": str(exc)})
            return
        except PersynError as exc:  # the store refused: the queue path says it the usual way
            await _answer(writer, {"error": "internal", "message": str(exc)})
            return
        await _answer(writer, {"accepted": event.id})
        if not wait:
            return
        # A sender that leaves (Ctrl-C) ends the wait; its event stays queued and is answered.
        waiting = asyncio.ensure_future(self._target.wait_marker(event.agent_id, event.id, timeout))
        gone = asyncio.ensure_future(reader.read(1))
        try:
            await asyncio.wait({waiting, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (gone, waiting):
                if not task.done():
                    task.cancel()
            # Collected, so neither a cancellation nor a reset connection is left unretrieved.
            await asyncio.gather(gone, return_exceptions=True)
            if not waiting.done():
                await asyncio.gather(waiting, return_exceptions=True)
        if waiting.cancelled():
            return
        try:
            marker = waiting.result()
        except TimeoutError:
            await _answer(writer, {"timeout": True})
            return
        outcome = {"transmitted": marker.transmitted, "text": marker.text, "reason": marker.reason}
        await _answer(writer, {"marker": outcome})


def _same_user(writer: asyncio.StreamWriter) -> bool:
    connection = writer.get_extra_info("socket")
    if connection is None:
        return False
    pid_uid_gid = connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
    _, uid, _ = _PEERCRED.unpack(pid_uid_gid)
    return bool(uid == os.geteuid())


async def _answer(writer: asyncio.StreamWriter, body: dict[str, Any]) -> None:
    writer.write(json.dumps(body, ensure_ascii=False).encode() + b"\n")
    await writer.drain()


def _parse(line: bytes, max_chars: int) -> tuple[Event, bool, float]:
    """The request's event, whether to wait, and for how long; `_BadRequest` names what is
    wrong with its shape (the intake judges the message itself)."""
    try:
        body = json.loads(line)
    except ValueError as exc:
        raise _BadRequest(f"request is not JSON: {exc}") from exc
    if not isinstance(body, dict) or body.get("op") != "send":
        raise _BadRequest(f"unknown request {_preview(body)!r}; the only op is 'send'")
    fields = body.get("event")
    wait, timeout = body.get("wait"), body.get("timeout")
    if not isinstance(wait, bool):
        raise _BadRequest(f"'wait' must be true or false, not {wait!r}")
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout < float("inf"):
        raise _BadRequest(f"'timeout' must be a positive number of seconds, not {timeout!r}")
    if not isinstance(fields, dict):
        raise _BadRequest(f"'event' must be an object, not {_preview(fields)!r}")
    names = ("id", "agent_id", "channel", "speaker_id", "display_name", "text", "received_at")
    for name in names:
        if not isinstance(fields.get(name), str):
            raise _BadRequest(f"event field {name!r} must be a string, not {_preview(fields.get(name))!r}")
    if len(fields["text"]) > max_chars:  # the intake says it too; this is before any parsing
        raise InputError(
            f"message is {len(fields['text'])} characters long; the limit is {max_chars} "
            "([conversation] max_message_chars)"
        )
    try:
        received_at = datetime.fromisoformat(fields["received_at"])
    except ValueError as exc:
        raise _BadRequest(f"'received_at' is not an ISO time: {fields['received_at']!r}") from exc
    if received_at.tzinfo is None:
        raise _BadRequest(f"'received_at' has no offset: {fields['received_at']!r}")
    channel = fields["channel"]
    try:
        speaker = Speaker(
            service="cli",
            channel=channel,
            speaker_id=fields["speaker_id"],
            display_name=fields["display_name"],
        )
        event = Event(
            id=fields["id"],
            agent_id=fields["agent_id"],
            service="cli",
            channel=channel,
            speaker=speaker,
            text=fields["text"],
            received_at=received_at,
        )
    except ValidationError as exc:
        raise _BadRequest(f"not an event: {exc.errors()[0].get('msg')}") from exc
    return event, wait, float(timeout)


def _preview(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
