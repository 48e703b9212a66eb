"""`WebSurface`: the web channel served by `persyn run` (uvicorn on the runtime's loop).

Built before the runtime (its usage adapter is one of the runtime's meter adapters), started
after it: the channel is attached like any other (what waited in the outbox for `web` is
delivered first), then uvicorn serves the app on the same event loop, so the runtime's
token sinks publish to HTTP clients without crossing threads.

While streams are open, the keys holding them are checked against the store every
`[dispatch] outbox_poll_seconds` (the pace at which this process already notices what other
processes did): a key revoked by `persyn web keys revoke` has its streams ended then, even
a stream with nothing to deliver. The store is the one place every backend and every process
agree on, whatever live bus a deployment has; what a revoked key's stream would be sent
before that pass is held back by the check before each delivery (`web/context.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable, Generator

import uvicorn

from persyn.channels.web.channel import TurnUsage, WebChannel
from persyn.core.config import Settings
from persyn.core.config.web import is_loopback_host
from persyn.core.errors import ConfigError
from persyn.ops.history import SharedStore
from persyn.runtime.api import RuntimeAPI
from persyn.web._head_deadline import with_head_deadline
from persyn.web.app import build_app
from persyn.web.context import REVOKED, Authenticate, Revoked, WebContext

__all__ = ["WebSurface", "check_bind"]

log = logging.getLogger(__name__)

_WS_MAX_BYTES = 1 << 20


def check_bind(settings: Settings, *, has_keys: bool) -> None:
    """Refuse to serve beyond this machine with no key to guard it."""
    host = settings.web.host
    if not is_loopback_host(host) and not has_keys:
        raise ConfigError(
            f"[web] host = {host!r} is reachable from other machines, and no web key exists: "
            "create one first (`persyn web keys create --name NAME`) or bind 127.0.0.1"
        )


def _listen(host: str, port: int) -> socket.socket:
    """The listening socket, bound here so a taken port is a clear error (uvicorn binding it
    itself would exit the process)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        listening = socket.socket(family, kind, proto)
    except OSError as exc:
        raise ConfigError(f"the web channel could not listen on {host}:{port}: {exc}") from exc
    try:
        listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listening.bind(address)
        listening.listen(2048)
    except OSError as exc:
        listening.close()
        raise ConfigError(
            f"the web channel could not listen on {host}:{port}: {exc.strerror or exc} "
            "(set [web] port, or stop what uses it)"
        ) from exc
    listening.set_inheritable(True)
    return listening


class _Server(uvicorn.Server):
    """uvicorn without its own signal handlers: `persyn run` owns SIGTERM and SIGINT."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None]:
        yield


class WebSurface:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.channel = WebChannel(settings.web.sse_buffer)
        self.usage = TurnUsage()
        self._server: _Server | None = None
        self._task: asyncio.Task[None] | None = None
        self._watch: asyncio.Task[None] | None = None
        self.console_store = SharedStore(settings)  # the console views' store, closed in `stop`

    async def start(
        self,
        runtime: RuntimeAPI,
        authenticate: Authenticate,
        revoked: Revoked,
        flush_usage: Callable[[], object] | None = None,
    ) -> str:
        """Attach the channel and serve; returns the base URL (the bound port, even for 0)."""
        listening = _listen(self.settings.web.host, self.settings.web.port)
        self.channel.bind_loop(asyncio.get_running_loop())
        await runtime.attach_channel(self.channel)
        context = WebContext(
            settings=self.settings,
            runtime=runtime,
            channel=self.channel,
            usage=self.usage,
            authenticate=authenticate,
            revoked=revoked,
            flush_usage=flush_usage,
            console_store=self.console_store,
        )
        config = uvicorn.Config(
            build_app(context),
            host=self.settings.web.host,
            port=self.settings.web.port,
            http=with_head_deadline(self.settings.web.request_timeout_seconds),
            log_level="warning",
            lifespan="off",
            access_log=False,
            server_header=False,
            timeout_graceful_shutdown=1,
            # A WebSocket message over this is refused (1009) before it is read: the voice
            # sockets carry 20 ms frames (`web/voice.py`, Twilio's Media Streams).
            ws_max_size=_WS_MAX_BYTES,
        )
        self._server = _Server(config)
        self._task = asyncio.ensure_future(self._server.serve(sockets=[listening]))
        while not self._server.started:
            if self._task.done():
                self._task.result()  # raises what stopped it
                raise ConfigError(f"the web channel stopped while starting on {self.settings.web.host}")
            await asyncio.sleep(0.01)
        self._watch = asyncio.ensure_future(self._end_revoked(revoked))
        port = listening.getsockname()[1]
        host = self.settings.web.host
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{port}/"

    async def _end_revoked(self, revoked: Revoked) -> None:
        """End the streams of keys revoked since they opened (by any process)."""
        every = self.settings.dispatch.outbox_poll_seconds
        while True:
            await asyncio.sleep(every)
            keys = self.channel.open_keys()
            if not keys:
                continue
            try:
                gone = await revoked(keys)
            except Exception as exc:  # the store is away: the next pass asks again
                log.warning("web: could not check the open streams' keys: %s", exc)
                continue
            for key_id in gone:
                ended = self.channel.end_key(key_id, REVOKED)
                log.info("web: key %s was revoked; %d open stream(s) ended", key_id, ended)

    async def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
            self._watch = None
        if self._server is not None:
            self._server.should_exit = True
        if self._task is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(self._task, 5)
        self._server = None
        self._task = None
        await self.console_store.close()
