"""Email's registration (`channels/registry.py`): connected when `[channels.email] enabled`;
`persyn doctor` logs in to the IMAP server and selects the mailbox."""

from __future__ import annotations

import asyncio
import contextlib
from functools import partial

from persyn.channels.mail.channel import EMAIL_SERVICE, EmailChannel, connect_imap, drop
from persyn.channels.mail.config import EmailConfig
from persyn.channels.registry import PROBE_SECONDS, RETRYING, ChannelPlugin, Probe, revealed, served_agent
from persyn.core.config import Settings
from persyn.core.errors import ChannelError, ConfigError
from persyn.runtime.api import RuntimeAPI
from persyn.runtime.channel import LeasedChannel

__all__ = ["PLUGIN"]


def _connect(settings: Settings, api: RuntimeAPI) -> LeasedChannel:
    email = settings.channels.section(EmailConfig)
    password = revealed(settings.secrets.channel("email_imap_password"))
    if password is None:
        raise ConfigError("[channels.email] enabled = true needs the IMAP password in EMAIL_IMAP_PASSWORD")
    if not email.address or not email.imap_host or not email.smtp_host:
        raise ConfigError("[channels.email] enabled = true needs address, imap_host and smtp_host")
    agent = served_agent(settings, email.agent)
    smtp = revealed(settings.secrets.channel("email_smtp_password"))
    return LeasedChannel(
        EMAIL_SERVICE,
        partial(EmailChannel, email, agent, api, imap_password=password, smtp_password=smtp),
    )


async def _probe(settings: Settings) -> Probe:
    config = settings.channels.section(EmailConfig)
    password = revealed(settings.secrets.channel("email_imap_password"))
    if password is None:
        return Probe(
            "email", False, "enabled but EMAIL_IMAP_PASSWORD is not set", "export EMAIL_IMAP_PASSWORD=..."
        )
    if not config.address or not config.imap_host or not config.smtp_host:
        return Probe(
            "email", False, "enabled without address, imap_host or smtp_host", "set them in [channels.email]"
        )
    where = f"{config.imap_host}:{config.imap_port}"
    try:
        imap = await asyncio.wait_for(connect_imap(config, password), PROBE_SECONDS)
    except ChannelError as exc:
        hint = (
            "check EMAIL_IMAP_PASSWORD and imap_user"
            if "refused" in str(exc)
            else f"check imap_host/imap_port; {RETRYING}"
        )
        return Probe("email", False, f"IMAP {where}: {exc}", hint)
    except (OSError, TimeoutError) as exc:
        return Probe(
            "email",
            False,
            f"IMAP {where} does not answer ({type(exc).__name__})",
            f"check imap_host/imap_port; {RETRYING}",
        )
    try:
        selected = await asyncio.wait_for(imap.select(config.mailbox), PROBE_SECONDS)
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(imap.logout(), PROBE_SECONDS)
        drop(imap)
    if selected.result != "OK":
        return Probe(
            "email", False, f"IMAP {where}: no mailbox {config.mailbox!r}", "check [channels.email] mailbox"
        )
    return Probe("email", True, f"IMAP {where}: {config.mailbox} of {config.imap_user or config.address}")


PLUGIN = ChannelPlugin(
    EMAIL_SERVICE,
    rank=6,
    configured=lambda settings: settings.channels.section(EmailConfig).enabled,
    connect=_connect,
    probe=_probe,
    section="[channels.email]",
)
