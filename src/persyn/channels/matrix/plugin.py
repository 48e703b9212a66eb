"""Matrix's registration (`channels/registry.py`): connected when `[channels.matrix] homeserver`
is set; `persyn doctor` checks the homeserver answers and whose the access token is. The adapter
is imported only when connected: mautrix and aiohttp take ~0.5 s to import."""

from __future__ import annotations

from functools import partial

import httpx

from persyn.channels.matrix.config import MatrixConfig
from persyn.channels.registry import PROBE_SECONDS, RETRYING, ChannelPlugin, Probe, revealed
from persyn.core.config import AgentConfig, Settings
from persyn.runtime.api import RuntimeAPI
from persyn.runtime.channel import LeasedChannel, NetworkChannel

__all__ = ["MATRIX_SERVICE", "PLUGIN"]

MATRIX_SERVICE = "matrix"  # `channels/matrix/channel.py`'s, named here so as not to import it


def _connect(settings: Settings, api: RuntimeAPI) -> LeasedChannel:
    agents = {agent.id: agent for agent in settings.agents}
    secrets = settings.secrets
    return LeasedChannel(
        MATRIX_SERVICE,
        partial(
            _matrix_channel,
            settings,
            agents,
            api,
            access_token=revealed(secrets.channel("matrix_access_token")),
            password=revealed(secrets.channel("matrix_password")),
        ),
    )


def _matrix_channel(
    settings: Settings,
    agents: dict[str, AgentConfig],
    api: RuntimeAPI,
    *,
    access_token: str | None,
    password: str | None,
) -> NetworkChannel:
    from persyn.channels.matrix.channel import MatrixChannel

    return MatrixChannel(
        settings.channels.section(MatrixConfig),
        agents,
        api,
        state_dir=settings.data_dir / "matrix",
        access_token=access_token,
        password=password,
        senses=settings.senses,
    )


async def _probe(settings: Settings) -> Probe:
    config = settings.channels.section(MatrixConfig)
    server = config.homeserver or ""
    token, password = (
        settings.secrets.channel("matrix_access_token"),
        settings.secrets.channel("matrix_password"),
    )
    if token is None and password is None:
        return Probe(
            "matrix",
            False,
            f"{server}: neither MATRIX_ACCESS_TOKEN nor MATRIX_PASSWORD is set",
            "export one of them",
        )
    try:
        async with httpx.AsyncClient(base_url=server, timeout=PROBE_SECONDS) as client:
            versions = await client.get("/_matrix/client/versions")
            if versions.status_code != 200:
                detail = f"{server} is not a Matrix homeserver (HTTP {versions.status_code} on /versions)"
                return Probe("matrix", False, detail, "check [channels.matrix] homeserver")
            if token is None:
                return Probe(
                    "matrix",
                    True,
                    f"{server} answers; MATRIX_PASSWORD set (not tried: a log-in makes a device)",
                )
            headers = {"Authorization": f"Bearer {token.get_secret_value()}"}
            who = await client.get("/_matrix/client/v3/account/whoami", headers=headers)
    except httpx.HTTPError as exc:
        detail = f"{server} does not answer ({type(exc).__name__})"
        return Probe("matrix", False, detail, f"check [channels.matrix] homeserver; {RETRYING}")
    if who.status_code != 200:
        detail = f"{server} refused MATRIX_ACCESS_TOKEN (HTTP {who.status_code})"
        return Probe("matrix", False, detail, "make a new access token for the agent's account")
    user = str(who.json().get("user_id"))
    served = [
        a
        for a in settings.agents
        if not config.agents or a.name.lower() in {n.lower() for n in config.agents}
    ]
    expected = config.user_for(served[0].name) if len(served) == 1 else None
    if expected is not None and user != expected:
        detail = f"MATRIX_ACCESS_TOKEN is {user!r}'s, but [channels.matrix] user_id is {expected!r}"
        return Probe("matrix", False, detail, "set user_id to the token's user, or use that user's token")
    return Probe("matrix", True, f"{server} answers; MATRIX_ACCESS_TOKEN is {user}")


PLUGIN = ChannelPlugin(
    MATRIX_SERVICE,
    rank=3,
    configured=lambda settings: bool(settings.channels.section(MatrixConfig).homeserver),
    connect=_connect,
    probe=_probe,
    section="[channels.matrix]",
)
