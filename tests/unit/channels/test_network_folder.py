"""A chat network is one folder plus its entry points: a third party's distribution declares a
network, `acme`, with its own `[channels.acme]` section and secret, and persyn validates, reads
and builds it with no edit to `core` (ARCHITECTURE §14).

The distribution is real: a package and its `.dist-info` on `sys.path`, found by
`importlib.metadata` like any installed plugin. The configuration builds `[channels]` once, when
it is imported, so the deployment runs in a fresh interpreter with that folder on its path.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

import persyn
from persyn.core.config import load_settings
from persyn.core.config.chat import ENTRY_POINT_GROUP, channels_model
from persyn.core.config.settings import channel_secret_variables

_CONFIG = """
from collections.abc import Mapping
from typing import ClassVar

from pydantic import Field

from persyn.core.section import ChannelSection


class AcmeConfig(ChannelSection):
    secrets: ClassVar[Mapping[str, str]] = {"acme_token": "ACME_TOKEN"}

    server: str | None = Field(
        default=None, description="Acme server; unset = no Acme.", examples=["chat.acme.example"]
    )
    port: int = Field(default=7000, ge=1, le=65535, description="Acme server port.")
"""

_PLUGIN = """
from functools import partial

from acme_chat.config import AcmeConfig
from persyn.channels.registry import ChannelPlugin, revealed
from persyn.runtime.channel import Channel, LeasedChannel


class AcmeChannel(Channel):
    service = "acme"

    def __init__(self, config, api, *, token):
        self.config, self.api, self.token = config, api, token

    async def start(self):
        pass

    async def stop(self):
        pass

    async def deliver(self, outbound):
        pass


def _connect(settings, api):
    token = revealed(settings.secrets.channel("acme_token"))
    return LeasedChannel("acme", partial(AcmeChannel, settings.channels.section(AcmeConfig), api, token=token))


PLUGIN = ChannelPlugin(
    "acme", configured=lambda settings: bool(settings.channels.section(AcmeConfig).server), connect=_connect
)
"""

_ENTRY_POINTS = """\
[persyn.channel_settings]
acme = acme_chat.config:AcmeConfig

[persyn.channels]
acme = acme_chat.plugin:PLUGIN
"""

# What the deployment does, in the fresh interpreter: each file and environment, what came of it.
_RUN = """
import json, sys
from pathlib import Path

from persyn.channels.network import configured_channels
from persyn.core.config import load_settings
from persyn.core.config.template import readme_reference, starter_toml
from persyn.core.errors import ConfigError

home = Path(sys.argv[1])
found = {}
cases = {
    "bad port": ('[channels.acme]\\nserver = "chat.acme.example"\\nport = "7000"\\n', {}),
    "bad port in the environment": ("", {"PERSYN_CHANNELS__ACME__PORT": "70000"}),
    "secret in the file": ('[channels.acme]\\nacme_token = "sesame"\\n', {}),
    "unknown network": ('[channels.foo]\\nserver = "x"\\n', {}),
}
for name, (text, environ) in cases.items():
    (home / "persyn.toml").write_text(text)
    try:
        load_settings(home, environ)
    except ConfigError as exc:
        found[name] = str(exc).replace(str(home), "HOME")
(home / "persyn.toml").write_text('[channels.acme]\\nserver = "chat.acme.example"\\n')
settings = load_settings(home, {"ACME_TOKEN": "sesame", "PERSYN_CHANNELS__ACME__PORT": "7001"})
built = [leased.build() for leased in configured_channels(settings, None)]
found["built"] = [(type(c).__name__, c.config.server, c.config.port, c.token) for c in built]
found["without the secret"] = [c.token for c in (l.build() for l in configured_channels(load_settings(home, {}), None))]
found["starter"] = "[channels.acme]" in starter_toml() and "#port = 7000" in starter_toml()
found["readme"] = [line for line in readme_reference().splitlines() if "[channels.acme]" in line]
print(json.dumps(found))
"""


def _distribution(root: Path) -> Path:
    """A third party's distribution `acme-chat` in `root`: its folder and its metadata."""
    package = root / "acme_chat"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "config.py").write_text(_CONFIG)
    (package / "plugin.py").write_text(_PLUGIN)
    metadata = root / "acme_chat-1.0.dist-info"
    metadata.mkdir()
    (metadata / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-chat\nVersion: 1.0\n")
    (metadata / "entry_points.txt").write_text(_ENTRY_POINTS)
    return root


def test_a_network_from_its_folder_and_entry_points_is_validated_read_and_built(tmp_path: Path) -> None:
    site = _distribution(tmp_path / "site")
    home = tmp_path / "home"
    home.mkdir()
    source = Path(persyn.__file__).resolve().parents[1]
    path = os.pathsep.join([str(site), str(source), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-c", _RUN, str(home)],
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found == {
        "bad port": (
            "invalid configuration in HOME/persyn.toml:\n"
            "  - channels.acme.port: Input should be a valid integer (got '7000')"
        ),
        "bad port in the environment": (
            "invalid configuration in the environment:\n"
            "  - PERSYN_CHANNELS__ACME__PORT (channels.acme.port): Input should be less than or equal "
            "to 65535 (got 70000)"
        ),
        "secret in the file": (
            "invalid configuration in HOME/persyn.toml:\n  - channels.acme.acme_token: unknown key (got 'sesame')"
        ),
        "unknown network": ("invalid configuration in HOME/persyn.toml:\n  - channels.foo: unknown key"),
        "built": [["AcmeChannel", "chat.acme.example", 7001, "sesame"]],
        "without the secret": [None],
        "starter": True,
        "readme": [
            "| `[channels.acme] server` | — | Acme server; unset = no Acme. |",
            "| `[channels.acme] port` | `7000` | Acme server port. |",
        ],
    }


_BROKEN = """\
[persyn.channel_settings]
acme = acme_chat.config:AcmeConfig
missing = no_such_module_anywhere:Config
foreign = fractions:Fraction
other = acme_chat.other:OtherConfig
"""

_OTHER = """
from collections.abc import Mapping
from typing import ClassVar

from persyn.core.section import ChannelSection


class OtherConfig(ChannelSection):
    secrets: ClassVar[Mapping[str, str]] = {"other_token": "ACME_TOKEN"}
"""


def test_a_broken_foreign_or_clashing_section_is_skipped_and_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A section that fails to load, is no `ChannelSection`, or reads a secret another network
    reads is logged by name and left out; the rest of `[channels]` is built."""
    site = _distribution(tmp_path)
    (site / "acme_chat" / "other.py").write_text(_OTHER)
    (site / "acme_chat-1.0.dist-info" / "entry_points.txt").write_text(_BROKEN)
    monkeypatch.syspath_prepend(str(site))
    with caplog.at_level(logging.WARNING):
        model = channels_model()
    assert {"acme", "irc", "matrix", "telegram"} <= set(model.model_fields)
    assert not {"missing", "foreign", "other"} & set(model.model_fields)
    assert model.secret_variables()["acme_token"] == "ACME_TOKEN"
    said = caplog.text
    assert f"{ENTRY_POINT_GROUP} entry 'missing' (no_such_module_anywhere:Config) failed to load" in said
    assert f"{ENTRY_POINT_GROUP} entry 'foreign' (Fraction) is not a ChannelSection" in said
    assert f"{ENTRY_POINT_GROUP} entry 'other' names secrets another network named: ['other_token']" in said


def test_persyns_networks_read_their_secrets_from_the_same_variables(tmp_path: Path) -> None:
    """IRC, Telegram and Matrix declare their secrets in their folders; the variables are the
    ones they always were, and a name no network declares is a mistake, not a missing secret."""
    variables = {
        "irc_password": "IRC_PASSWORD",
        "matrix_access_token": "MATRIX_ACCESS_TOKEN",
        "matrix_password": "MATRIX_PASSWORD",
        "telegram_bot_token": "TELEGRAM_BOT_TOKEN",
        "slack_bot_token": "SLACK_BOT_TOKEN",
        "slack_signing_secret": "SLACK_SIGNING_SECRET",
        "slack_app_token": "SLACK_APP_TOKEN",
        "discord_bot_token": "DISCORD_BOT_TOKEN",
        "email_imap_password": "EMAIL_IMAP_PASSWORD",
        "email_smtp_password": "EMAIL_SMTP_PASSWORD",
    }
    assert channel_secret_variables() == variables
    settings = load_settings(tmp_path, {variable: f"{name}!" for name, variable in variables.items()})
    read = {name: settings.secrets.channel(name) for name in variables}
    assert {name: secret.get_secret_value() for name, secret in read.items() if secret} == {
        name: f"{name}!" for name in variables
    }
    assert load_settings(tmp_path, {}).secrets.channel("irc_password") is None
    with pytest.raises(LookupError, match="no chat network declares the secret 'irc_pasword'"):
        settings.secrets.channel("irc_pasword")
