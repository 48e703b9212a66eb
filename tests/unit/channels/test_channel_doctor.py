"""`persyn doctor`'s chat-network lines come from the registered channel plugins: one probe per
configured network, in rank order, and one line naming the sections when none is configured.
Nothing here needs a server: a port nobody listens on, missing credentials."""

from __future__ import annotations

import socket
from datetime import UTC, datetime
from pathlib import Path

from persyn.ops.doctor.channels import channel_checks, channel_owner_check
from persyn.testing.harness import harness_settings


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def test_each_configured_network_is_probed_in_rank_order(tmp_path: Path) -> None:
    port = _closed_port()
    settings = harness_settings(
        tmp_path,
        config=(
            f'[channels.irc]\nserver = "127.0.0.1"\nport = {port}\ntls = false\n'
            "[channels.telegram]\nenabled = true\n"
            f'[channels.matrix]\nhomeserver = "http://127.0.0.1:{port}"\n'
            "[channels.discord]\nenabled = true\n"
        ),
    )
    checks = await channel_checks(settings)
    assert [check.name for check in checks] == ["irc", "telegram", "matrix", "discord"]
    irc, telegram, matrix, discord = checks
    assert not irc.ok and irc.detail.startswith(f"127.0.0.1:{port} does not answer")
    assert "check [channels.irc] server, port and tls" in irc.fix
    assert (telegram.ok, telegram.detail) == (False, "enabled but TELEGRAM_BOT_TOKEN is not set")
    assert telegram.fix == "export TELEGRAM_BOT_TOKEN=..."
    assert not matrix.ok and "neither MATRIX_ACCESS_TOKEN nor MATRIX_PASSWORD is set" in matrix.detail
    assert (discord.ok, discord.detail) == (False, "enabled but DISCORD_BOT_TOKEN is not set")
    owners = await channel_owner_check(settings, datetime.now(UTC))
    assert owners is not None and owners.warning
    assert [part.split(":")[0] for part in owners.detail.split(" | ")] == [
        "irc",
        "telegram",
        "matrix",
        "discord",
    ]


async def test_no_network_configured_is_one_line(tmp_path: Path) -> None:
    settings = harness_settings(tmp_path)
    (check,) = await channel_checks(settings)
    assert (check.name, check.ok) == ("chat channels", True)
    assert (
        check.detail
        == "none configured ([channels.irc], .telegram, .matrix, .slack, .discord, .email, [voice])"
    )
    assert await channel_owner_check(settings, datetime.now(UTC)) is None
