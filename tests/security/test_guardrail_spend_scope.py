"""Issue 33 item 7: one stranger's spend blocks that stranger, not the agent for everyone.

~50 probing messages from one web key tripped `spend-spike`, which blocked the whole agent
(IRC and the operator included) for 30 minutes. A finding one channel caused blocks that
channel; only the agent's own spend blocks the agent; the operator's channel never is.

The real daemon (`persyn run`) serves the web on loopback and sits on a real IRC server
(ngircd); its scheduler evaluates the guardrails every second; the operator speaks with
`persyn send`. The stranger's probes are metered at 60,000 tokens each, over a 100,000 limit.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import tomlkit
from irc_server import IrcPeer, IrcServer
from persyn_cli import Persyn, stop_gracefully

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

WAIT_SECONDS = 120.0  # bounds a broken test only
PROBE_TOKENS = 60_000
THRESHOLD = 100_000

SCRIPT = [
    {"task": "respond", "match": "^probe", "reply": "Probed.", "usage": {"input_tokens": PROBE_TOKENS}},
    {"task": "respond", "match": "^hello", "reply": "Hello to you.", "usage": {"input_tokens": 40}},
]


def _configure(toml: Path, port: int) -> None:
    """The IRC network (a room), no pacing, evaluation every second and a spend-spike of
    `THRESHOLD` tokens an hour, set in the `persyn.toml` that `init` wrote."""
    document = tomlkit.parse(toml.read_text())
    settings: dict[str, dict[str, Any]] = {
        "irc": {"server": "127.0.0.1", "port": port, "tls": False, "channels": ["#lab"]},
        "pacing": {"listen_seconds": 0.0, "min_interval_seconds": 0.0, "jitter_seconds": 0.0},
        "safety": {"evaluate_seconds": 1.0},
    }
    channels = document.setdefault("channels", tomlkit.table())
    for table, values in settings.items():
        target = (
            channels.setdefault(table, tomlkit.table())
            if table == "irc"
            else document.setdefault(table, tomlkit.table())
        )
        for key, value in values.items():
            target[key] = value
    spike = {
        "name": "spend-spike",
        "detector": "token_spend",
        "window_minutes": 60.0,
        "threshold": float(THRESHOLD),
        "actions": ["notify", "block"],
        "block_minutes": 30.0,
    }
    document["guardrails"] = tomlkit.aot()
    document["guardrails"].append(tomlkit.item(spike))
    toml.write_text(tomlkit.dumps(document))


def _deployment(root: Path, port: int) -> tuple[Persyn, dict[str, str], dict[str, str]]:
    """Ada with the IRC network and the web channel, and two client keys: the stranger's and a
    friend's; returns the runner, the keys' secrets and their ids."""
    script = root / "rules.json"
    script.write_text(json.dumps(SCRIPT))
    persyn = Persyn(
        home=root / "home",
        env={
            "PERSYN_MODELS__DEFAULT": f"test:script@{script}",
            "PERSYN_WEB__ENABLED": "true",
            "PERSYN_WEB__PORT": "0",
            "PERSYN_DISPATCH__HOUSEKEEPING_SECONDS": "1",
        },
    )
    done = persyn.run("init", "--name", "Ada")
    assert done.returncode == 0, done.stderr
    _configure(persyn.home / "persyn.toml", port)
    secrets: dict[str, str] = {}
    ids: dict[str, str] = {}
    for name in ("stranger", "friend"):
        made = persyn.run("web", "keys", "create", "--name", name, "--json")
        assert made.returncode == 0, made.stderr
        secrets[name], ids[name] = json.loads(made.stdout)["key"], json.loads(made.stdout)["id"]
    return persyn, secrets, ids


def _say(url: str, secret: str, text: str) -> str:
    body = {"model": "Ada", "messages": [{"role": "user", "content": text}]}
    with httpx.Client(
        base_url=url, headers={"Authorization": f"Bearer {secret}"}, timeout=WAIT_SECONDS
    ) as http:
        said = http.post("/v1/chat/completions", json=body)
    assert said.status_code == 200, said.text
    return str(said.json()["choices"][0]["message"]["content"])


def _blocks(persyn: Persyn) -> list[dict[str, object]]:
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        listed = persyn.run("guardrails", "list", "--json")
        assert listed.returncode == 0, listed.stderr
        blocks: list[dict[str, object]] = json.loads(listed.stdout)["blocks"]
        if blocks:
            return blocks
        time.sleep(0.5)
    raise AssertionError(f"no guardrail block within {WAIT_SECONDS:g}s:\n{persyn.log('run')}")


async def test_a_spend_spike_by_one_web_key_blocks_that_key_only(tmp_path: Path, ircd: IrcServer) -> None:
    persyn, secrets, ids = _deployment(tmp_path, ircd.port)
    kim = await IrcPeer("kim").connect(ircd.port)
    daemon = persyn.start_daemon("run")
    try:
        found = re.search(r"web channel on (http://\S+)", persyn.log("run"))
        assert found is not None, persyn.log("run")
        url = found.group(1)
        await kim.join("#lab")
        joined = await kim.wait_for(lambda h: h.command == "JOIN" and h.nick != "kim", "Ada in #lab")

        for number in (1, 2):  # 120,000 tokens, all spent for the stranger's key
            assert await asyncio.to_thread(_say, url, secrets["stranger"], f"probe {number}") == "Probed."
        (block,) = await asyncio.to_thread(_blocks, persyn)

        # The stranger is silenced...
        refused = await asyncio.to_thread(_say, url, secrets["stranger"], "probe 3")
        assert "guardrail 'spend-spike' blocks replies here" in refused, refused
        # ...while another key, IRC and the operator are answered.
        assert await asyncio.to_thread(_say, url, secrets["friend"], "hello from a friend") == "Hello to you."
        await kim.say(joined.nick, "hello from IRC")
        answer = await kim.wait_for(
            lambda h: h.command == "PRIVMSG" and h.nick == joined.nick and h.target == "kim", "Ada's answer"
        )
        assert answer.text == "Hello to you."
        operator = await asyncio.to_thread(persyn.run, "send", "hello from the operator")
        assert operator.returncode == 0 and "Hello to you." in operator.stdout, (
            operator.stdout,
            operator.stderr,
        )
        # The block is the stranger's key's channel, not the agent.
        assert (block["guardrail"], block["subject_kind"], block["subject"]) == (
            "spend-spike", "channel", f"web:{ids['stranger']}",
        )  # fmt: skip
    finally:
        await kim.close()
        stop_gracefully(daemon)
