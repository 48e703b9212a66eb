"""`persyn doctor` on the chat networks of `[channels]`: for each one configured, whether its
credentials are in the environment and whether its server answers. Every probe is bounded by
a short timeout and changes nothing on the server (no log-in that would leave a device
behind); a network that is down only means `persyn run` keeps retrying it while the agents
answer elsewhere. A last line says which process connects each network (the holder of its
lease, `runtime/delivery/channel_leases.py`), or that none does."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from datetime import datetime

import httpx

from persyn.core.config import Settings
from persyn.core.errors import PersynError
from persyn.ops.doctor.postgres import Check

__all__ = ["channel_checks", "channel_owner_check"]

_TIMEOUT_SECONDS = 5.0
_RETRYING = "`persyn run` keeps retrying it; the agents answer on their other channels meanwhile"


async def channel_checks(settings: Settings) -> list[Check]:
    """One line per configured chat network, or one saying none is configured."""
    channels = settings.channels
    checks: list[Check] = []
    if channels.irc.server:
        checks.append(await _irc(settings))
    if channels.telegram.enabled:
        checks.append(await _telegram(settings))
    if channels.matrix.homeserver:
        checks.append(await _matrix(settings))
    if not checks:
        return [Check("chat channels", True, "none configured ([channels.irc], .telegram, .matrix)")]
    return checks


async def channel_owner_check(settings: Settings, now: datetime) -> Check | None:
    """Which process connects each configured network (`runtime/delivery/channel_leases.py`): the
    holder of its lease, or that none does. None when no network is configured."""
    from persyn.ops.history import opened_store
    from persyn.runtime.delivery.channel_leases import channel_lease

    channels = settings.channels
    services = [
        service
        for service, configured in (
            ("agent", len(settings.agents) > 1),
            ("irc", bool(channels.irc.server)),
            ("telegram", channels.telegram.enabled),
            ("matrix", bool(channels.matrix.homeserver)),
        )
        if configured
    ]
    if not services:
        return None
    try:
        async with opened_store(settings) as store:
            held = {lease.name: lease for lease in await store.leases()}
    except PersynError as exc:
        return Check("channel owners", True, f"unreadable: {exc}", "check the database", warning=True)
    lines: list[str] = []
    idle = False
    for service in services:
        lease = held.get(channel_lease(service))
        idle = idle or lease is None or lease.expires_at <= now
        if lease is None:
            lines.append(f"{service}: no process connects it (start `persyn run`)")
        elif lease.expires_at <= now:
            lines.append(
                f"{service}: no process connects it ({lease.holder} stopped renewing at "
                f"{lease.expires_at:%H:%M:%S} UTC; the next `persyn run` takes it over)"
            )
        else:
            lines.append(f"{service}: {lease.holder} (lease runs to {lease.expires_at:%H:%M:%S} UTC)")
    return Check("channel owners", True, "; ".join(lines), warning=idle)


async def _irc(settings: Settings) -> Check:
    config = settings.channels.irc
    where = f"{config.server}:{config.port}" + (" (TLS)" if config.tls else "")
    rooms = ", ".join(config.channels) or "no rooms"
    if config.sasl and settings.secrets.irc_password is None:
        return Check(
            "irc", False, f"{where}: sasl = true but IRC_PASSWORD is not set", "export IRC_PASSWORD=..."
        )
    try:
        context = ssl.create_default_context() if config.tls else None
        _, writer = await asyncio.wait_for(
            asyncio.open_connection(config.server, config.port, ssl=context), _TIMEOUT_SECONDS
        )
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
    except (OSError, TimeoutError, ssl.SSLError) as exc:
        detail = f"{where} does not answer ({type(exc).__name__}: {exc})"
        return Check("irc", False, detail, f"check [channels.irc] server, port and tls; {_RETRYING}")
    password = "IRC_PASSWORD set" if settings.secrets.irc_password is not None else "no password"
    return Check("irc", True, f"{where} answers; {password}; rooms {rooms}")


async def _telegram(settings: Settings) -> Check:
    config = settings.channels.telegram
    token = settings.secrets.telegram_bot_token
    if token is None:
        return Check(
            "telegram", False, "enabled but TELEGRAM_BOT_TOKEN is not set", "export TELEGRAM_BOT_TOKEN=..."
        )
    try:
        async with httpx.AsyncClient(timeout=_TIMEOUT_SECONDS) as client:
            response = await client.get(f"{config.api_url}/bot{token.get_secret_value()}/getMe")
        data = (
            response.json() if response.headers.get("content-type", "").startswith("application/json") else {}
        )
    except (httpx.HTTPError, ValueError) as exc:
        detail = f"{config.api_url} does not answer ({type(exc).__name__})"
        return Check("telegram", False, detail, f"check [channels.telegram] api_url; {_RETRYING}")
    if not isinstance(data, dict) or not data.get("ok"):
        detail = f"{config.api_url} refused the bot token (HTTP {response.status_code})"
        return Check("telegram", False, detail, "check TELEGRAM_BOT_TOKEN (from @BotFather)")
    name = (data.get("result") or {}).get("username") or "?"
    return Check("telegram", True, f"{config.api_url}: the bot @{name}")


async def _matrix(settings: Settings) -> Check:
    config = settings.channels.matrix
    server = config.homeserver or ""
    token, password = settings.secrets.matrix_access_token, settings.secrets.matrix_password
    if token is None and password is None:
        return Check(
            "matrix",
            False,
            f"{server}: neither MATRIX_ACCESS_TOKEN nor MATRIX_PASSWORD is set",
            "export one of them",
        )
    try:
        async with httpx.AsyncClient(base_url=server, timeout=_TIMEOUT_SECONDS) as client:
            versions = await client.get("/_matrix/client/versions")
            if versions.status_code != 200:
                detail = f"{server} is not a Matrix homeserver (HTTP {versions.status_code} on /versions)"
                return Check("matrix", False, detail, "check [channels.matrix] homeserver")
            if token is None:
                return Check(
                    "matrix",
                    True,
                    f"{server} answers; MATRIX_PASSWORD set (not tried: a log-in makes a device)",
                )
            headers = {"Authorization": f"Bearer {token.get_secret_value()}"}
            who = await client.get("/_matrix/client/v3/account/whoami", headers=headers)
    except httpx.HTTPError as exc:
        detail = f"{server} does not answer ({type(exc).__name__})"
        return Check("matrix", False, detail, f"check [channels.matrix] homeserver; {_RETRYING}")
    if who.status_code != 200:
        detail = f"{server} refused MATRIX_ACCESS_TOKEN (HTTP {who.status_code})"
        return Check("matrix", False, detail, "make a new access token for the agent's account")
    user = str(who.json().get("user_id"))
    served = [
        a
        for a in settings.agents
        if not config.agents or a.name.lower() in {n.lower() for n in config.agents}
    ]
    expected = config.user_for(served[0].name) if len(served) == 1 else None
    if expected is not None and user != expected:
        detail = f"MATRIX_ACCESS_TOKEN is {user!r}'s, but [channels.matrix] user_id is {expected!r}"
        return Check("matrix", False, detail, "set user_id to the token's user, or use that user's token")
    return Check("matrix", True, f"{server} answers; MATRIX_ACCESS_TOKEN is {user}")
