"""The two MCP transports with every message from the server bounded in size as it arrives.

A hostile or broken server can answer with a result of any size. The SDK's own stdio reader
keeps a whole line in memory and re-joins it for every chunk read (a 50 MB line took ~4 CPU
minutes and held the loop), and its HTTP transport reads a JSON body whole. So both
transports are wrapped here, not patched:

- `BoundedStdio` starts the server itself (a new session, so its whole process group can be
  stopped; stderr to the server's log file, never the operator's terminal) and reads its
  stdout line by line, keeping at most `max_message_bytes` of a line. Past the bound it stops
  reading, answers every request still waiting with a `RESULT_TOO_LARGE` error, kills the
  server's process group and ends the stream: the server is started afresh for its next call.
- `BoundedHttp` is an httpx transport around the real one: a JSON body is read up to the bound,
  an event stream is passed on one whole event at a time, each up to the bound. Past it the
  answer to the request that was sent (its JSON-RPC id is in the request) is replaced by a
  `RESULT_TOO_LARGE` error and the response is closed. Compressed bodies are refused
  (`Accept-Encoding: identity` is asked for), since their size says nothing of what they hold.
  `StreamableHttp` is the SDK's streamable-HTTP transport over such a client, closed with it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit
from urllib.request import getproxies, proxy_bypass

import anyio
import httpx2
import mcp_types as types
from anyio.abc import Process
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.client.stdio import get_default_environment
from mcp.client.streamable_http import streamable_http_client
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.message import SessionMessage

__all__ = ["RESULT_TOO_LARGE", "BoundedHttp", "BoundedStdio", "StreamableHttp", "proxy_for"]

log = logging.getLogger(__name__)

# A JSON-RPC "server error" code of our own (the range -32000..-32099 is left to
# implementations; the SDK uses -32000 and -32001, MCP -32020..-32042).
RESULT_TOO_LARGE = -32090
_GRACE_SECONDS = 2.0  # after stdin closes, then again after SIGTERM, as the SDK's stdio client


def too_large(limit: int) -> str:
    return f"the server's answer is larger than {limit} bytes ([mcp] max_result_bytes); it was dropped"


def _too_large_error(request_id: types.RequestId, limit: int) -> types.JSONRPCError:
    return types.JSONRPCError(
        jsonrpc="2.0", id=request_id, error=types.ErrorData(code=RESULT_TOO_LARGE, message=too_large(limit))
    )


class BoundedStdio:
    """A stdio server as an SDK `Transport`: an async context manager giving the session its
    read and write streams, entered and left in one task."""

    def __init__(
        self,
        name: str,
        command: str,
        args: Sequence[str],
        env: Mapping[str, str],
        *,
        max_message_bytes: int,
        stderr_path: Path | None = None,
    ) -> None:
        self._name = name
        self._argv = [command, *args]
        self._env = get_default_environment() | dict(env)
        self._limit = max_message_bytes
        self._stderr_path = stderr_path
        self._stack = contextlib.AsyncExitStack()

    async def __aenter__(self) -> tuple[Any, Any]:
        return await self._stack.enter_async_context(self._run())

    async def __aexit__(self, *exc: Any) -> bool | None:
        return await self._stack.__aexit__(*exc)

    def _stderr(self) -> IO[bytes] | None:
        """The server's log file, appended to (None: the server shares our stderr)."""
        if self._stderr_path is None:
            return None
        self._stderr_path.parent.mkdir(parents=True, exist_ok=True)
        return self._stderr_path.open("ab")

    @contextlib.asynccontextmanager
    async def _run(
        self,
    ) -> AsyncIterator[
        tuple[MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]]
    ]:
        stderr = self._stderr()
        try:
            process = await anyio.open_process(
                self._argv, env=self._env, stderr=stderr, start_new_session=True
            )
        finally:
            if stderr is not None:
                stderr.close()  # the child holds its own descriptor
        incoming, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        write_stream, outgoing = anyio.create_memory_object_stream[SessionMessage](0)
        waiting: set[types.RequestId] = set()  # requests sent and not yet answered
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._read, process, incoming, waiting)
            tasks.start_soon(self._write, process, outgoing, incoming, waiting)
            try:
                yield read_stream, write_stream
            finally:
                with anyio.CancelScope(shield=True):
                    read_stream.close()
                    write_stream.close()
                    await _stop(process)
                tasks.cancel_scope.cancel()

    async def _read(
        self,
        process: Process,
        incoming: MemoryObjectSendStream[SessionMessage | Exception],
        waiting: set[types.RequestId],
    ) -> None:
        assert process.stdout is not None
        line = bytearray()
        try:
            async with incoming:
                async for chunk in process.stdout:
                    start = 0
                    while (end := chunk.find(b"\n", start)) >= 0:
                        line += chunk[start:end]
                        start = end + 1
                        if len(line) > self._limit:
                            break
                        if line.strip():
                            await incoming.send(_parse(bytes(line), waiting))
                        line.clear()
                    else:
                        line += chunk[start:]
                    if len(line) > self._limit:
                        await self._overflow(process, incoming, waiting)
                        return
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            return  # the session is gone, or the pipe closed under the read at shutdown

    async def _overflow(
        self,
        process: Process,
        incoming: MemoryObjectSendStream[SessionMessage | Exception],
        waiting: set[types.RequestId],
    ) -> None:
        """A message past the bound: which request it answers cannot be known without reading
        it whole, so every request waiting on this server gets the error, and the server is
        stopped where it is (what it still writes is never read)."""
        log.warning("MCP server %r: %s", self._name, too_large(self._limit))
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        for request_id in sorted(waiting, key=str):
            await incoming.send(SessionMessage(_too_large_error(request_id, self._limit)))
        waiting.clear()

    async def _write(
        self,
        process: Process,
        outgoing: MemoryObjectReceiveStream[SessionMessage],
        incoming: MemoryObjectSendStream[SessionMessage | Exception],
        waiting: set[types.RequestId],
    ) -> None:
        assert process.stdin is not None
        try:
            async with outgoing:
                async for item in outgoing:
                    message = item.message
                    if isinstance(message, types.JSONRPCRequest):
                        waiting.add(message.id)
                    data = message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send(data.encode() + b"\n")
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            # The server stopped reading (it died): end the session's stream so that no
            # request waits for an answer that cannot come.
            await incoming.aclose()


def _parse(line: bytes, waiting: set[types.RequestId]) -> SessionMessage | Exception:
    try:
        message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValueError as exc:  # the session reports it; the connection goes on
        return exc
    if isinstance(message, types.JSONRPCResponse | types.JSONRPCError) and message.id is not None:
        waiting.discard(message.id)
    return SessionMessage(message)


async def _stop(process: Process) -> None:
    """Close the server's stdin and give it a moment to leave, then end its process group
    (SIGTERM, then SIGKILL): every wait is bounded."""
    if process.stdin is not None:
        with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            await process.stdin.aclose()
    with anyio.move_on_after(_GRACE_SECONDS):
        await process.wait()
    await terminate_posix_process_tree(process, _GRACE_SECONDS)
    with anyio.move_on_after(_GRACE_SECONDS):
        await process.aclose()


class StreamableHttp:
    """The streamable-HTTP transport with our own HTTP client (headers, timeout), closed with it."""

    def __init__(self, url: str, http: httpx2.AsyncClient) -> None:
        self._url = url
        self._http = http
        self._context: Any = None

    async def __aenter__(self) -> Any:
        # Events are bounded by `BoundedHttp` (to [mcp] max_result_bytes), not by the SDK's own
        # 1 MiB default, so that the error says which setting to raise.
        self._context = streamable_http_client(self._url, http_client=self._http, max_sse_event_size=None)
        return await self._context.__aenter__()

    async def __aexit__(self, *exc: Any) -> Any:
        try:
            return await self._context.__aexit__(*exc)
        finally:
            await self._http.aclose()


class BoundedHttp(httpx2.AsyncBaseTransport):
    """An httpx transport that holds every answer of an MCP server to `max_message_bytes`."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, max_message_bytes: int) -> None:
        self._inner = inner
        self._limit = max_message_bytes

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.handle_async_request(request)
        request_id = _request_id(request)
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            await response.aclose()
            return _refusal(request_id, f"the server compressed its answer ({encoding}) though asked not to")
        kind = response.headers.get("content-type", "").partition(";")[0].strip().lower()
        if kind == "text/event-stream":
            return httpx2.Response(
                response.status_code,
                headers=response.headers,
                stream=_BoundedEvents(response.stream, self._limit, request_id),
                extensions=response.extensions,
            )
        assert isinstance(response.stream, httpx2.AsyncByteStream)
        body = bytearray()
        try:
            async for chunk in response.stream:
                body += chunk
                if len(body) > self._limit:
                    return _refusal(request_id, too_large(self._limit))
        finally:
            await response.aclose()
        return httpx2.Response(
            response.status_code,
            headers=response.headers,
            content=bytes(body),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


def _request_id(request: httpx2.Request) -> types.RequestId | None:
    """The JSON-RPC id of the request a POST carries (None for anything else)."""
    if request.method != "POST":
        return None
    try:
        payload = json.loads(request.content)
    except (httpx2.RequestNotRead, ValueError):
        return None
    if isinstance(payload, dict) and "method" in payload:
        found: object = payload.get("id")  # pyright: ignore[reportUnknownMemberType]
        if isinstance(found, str | int) and not isinstance(found, bool):
            return found
    return None


def _error_json(request_id: types.RequestId, message: str) -> bytes:
    error = {"code": RESULT_TOO_LARGE, "message": message}
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "error": error}).encode()


def _refusal(request_id: types.RequestId | None, message: str) -> httpx2.Response:
    """The answer the session reads instead: a JSON-RPC error for the request, or nothing."""
    if request_id is None:
        return httpx2.Response(502, content=b"")
    return httpx2.Response(
        200, headers={"content-type": "application/json"}, content=_error_json(request_id, message)
    )


_EVENT_ENDS = (b"\n\n", b"\r\n\r\n", b"\r\r")


class _BoundedEvents(httpx2.AsyncByteStream):
    """An event stream passed on one whole event at a time; an event past the bound ends the
    stream, after an error event answering the request (when there is one)."""

    def __init__(self, inner: Any, limit: int, request_id: types.RequestId | None) -> None:
        self._inner = inner
        self._limit = limit
        self._request_id = request_id

    async def __aiter__(self) -> AsyncIterator[bytes]:
        event = bytearray()
        searched = 0  # where the last search for an event's end stopped
        async for chunk in self._inner:
            event += chunk
            while (end := _event_end(event, max(0, searched - 3))) >= 0:
                yield bytes(event[:end])
                del event[:end]
                searched = 0
            searched = len(event)
            if len(event) > self._limit:
                if self._request_id is not None:
                    yield (
                        b"event: message\ndata: "
                        + _error_json(self._request_id, too_large(self._limit))
                        + b"\n\n"
                    )
                await self.aclose()
                return
        if event:
            yield bytes(event)

    async def aclose(self) -> None:
        await self._inner.aclose()


def _event_end(buffer: bytearray, start: int) -> int:
    """Where the first complete event in `buffer` ends (after its blank line), or -1."""
    ends = [found + len(mark) for mark in _EVENT_ENDS if (found := buffer.find(mark, start)) >= 0]
    return min(ends, default=-1)


def proxy_for(url: str) -> str | None:
    """The proxy the environment names for `url` (HTTP_PROXY, HTTPS_PROXY, NO_PROXY), as an
    httpx client would pick it: a client given its own transport does not look."""
    parts = urlsplit(url)
    if parts.hostname is None or proxy_bypass(parts.hostname):
        return None
    return getproxies().get(parts.scheme)
