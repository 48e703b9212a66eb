"""Discord's REST API as the adapter uses it, over aiohttp, with Discord's rate limits
(discord.com/developers/docs/topics/rate-limits):

- each route (method and path with its major parameter, the channel id) has a bucket; the
  answer's `X-RateLimit-Remaining` and `X-RateLimit-Reset-After` say how many calls are left
  and when the window ends. A route with none left waits for its reset before the next call,
  so the adapter does not meet a 429 it could foresee;
- a 429 is waited out for its body's `retry_after` (seconds, a float) and the call retried; one
  with `global: true` (or `X-RateLimit-Global`) holds every route for that long;
- any other failure raises `DiscordRefused` naming the status and Discord's message.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp

from persyn.core.errors import ChannelError

__all__ = ["DiscordRefused", "DiscordRest"]

log = logging.getLogger(__name__)

_RETRIES_AFTER_429 = 6
_LONGEST_WAIT = 60.0  # a retry_after beyond this is not waited out here: the outbox retries later


class DiscordRefused(ChannelError):
    """Discord answered a REST call with an error (not a rate limit)."""

    def __init__(self, route: str, status: int, message: object) -> None:
        super().__init__(f"discord {route}: HTTP {status} {message!r:.200}")
        self.status = status


class DiscordRest:
    """REST calls with the bot's token, each route's bucket respected."""

    def __init__(self, api_url: str, token: str, *, timeout: float = 30.0) -> None:
        self._base = api_url.rstrip("/")
        self._headers = {
            "Authorization": f"Bot {token}",
            "User-Agent": "DiscordBot (https://github.com/persyn, 1) persyn",
        }
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None
        self._resets: dict[str, float] = {}  # route → loop time its spent bucket refills
        self._global_until = 0.0
        self.rate_limited = 0  # 429s met (for the operator's log and the tests)

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(headers=self._headers, timeout=self._timeout)
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def call(self, method: str, path: str, *, route: str | None = None, body: Any = None) -> Any:
        """`method path` (under the API base); its JSON answer. `route` names its bucket
        (default: method and path)."""
        route = route or f"{method} {path}"
        loop = asyncio.get_running_loop()
        for _ in range(_RETRIES_AFTER_429):
            wait = max(self._global_until, self._resets.get(route, 0.0)) - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            async with self._client().request(method, f"{self._base}{path}", json=body) as response:
                headers = response.headers
                remaining, reset_after = (
                    headers.get("X-RateLimit-Remaining"),
                    headers.get("X-RateLimit-Reset-After"),
                )
                if remaining == "0" and reset_after is not None:
                    self._resets[route] = loop.time() + _seconds(reset_after)
                else:
                    self._resets.pop(route, None)
                try:
                    data: Any = await response.json(content_type=None)
                except ValueError:
                    data = None
                if response.status == 429:
                    self.rate_limited += 1
                    info: dict[str, Any] = data if isinstance(data, dict) else {}
                    after = _seconds(info.get("retry_after", headers.get("Retry-After", 1)))
                    if after > _LONGEST_WAIT:
                        raise DiscordRefused(route, 429, f"rate limited for {after:g}s")
                    is_global = bool(info.get("global")) or headers.get("X-RateLimit-Global") == "true"
                    log.info(
                        "discord %s: rate limited%s, retrying after %gs",
                        route,
                        " (global)" if is_global else "",
                        after,
                    )
                    if is_global:
                        self._global_until = loop.time() + after
                    else:
                        self._resets[route] = loop.time() + after
                    continue
                if response.status >= 400:
                    message = data.get("message") if isinstance(data, dict) else response.reason
                    raise DiscordRefused(route, response.status, message)
                return data
        raise ChannelError(f"discord {route}: still rate limited after {_RETRIES_AFTER_429} tries")

    async def download(self, url: str, limit: int) -> bytes:
        """An attachment's bytes from the CDN, refused past `limit` bytes."""
        # Without the bot's token: the CDN needs none, and it is never sent off the API's host.
        async with aiohttp.ClientSession(timeout=self._timeout) as plain, plain.get(url) as response:
            if response.status != 200:
                raise ChannelError(f"discord attachment download: HTTP {response.status}")
            body = bytearray()
            async for chunk in response.content.iter_chunked(65536):
                body += chunk
                if len(body) > limit:
                    raise ChannelError(f"the file is over the {limit}-byte download limit")
        return bytes(body)


def _seconds(value: object) -> float:
    try:
        seconds = float(str(value))
    except ValueError:
        return 1.0
    return seconds if seconds >= 0 else 1.0
