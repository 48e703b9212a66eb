"""`persyn run` serving the web channel, for the web tests: one daemon per test module."""

from __future__ import annotations

import json
import re
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from persyn_cli import Persyn, stop_gracefully
from sse_reader import SseReader

HELLO = "Hello there, friend. Nice to meet you."
GARDEN = "What do you think of the garden plan we discussed last week, with all the raised beds?"
SILENCE = "Sam asked me to stop giving garden advice"
REMINDED = "Time to water the plants, as you asked!"
LISBON = "Yes, I remember our trip to Lisbon last spring very clearly, the tiles and the trams."
LISBON_FIXED = "I don't have any memory of a trip to Lisbon. Tell me about it?"


def rules(path: Path, reminder_at: str | None = None) -> None:
    """The model double's script: a greeting, a withdrawn garden draft, a reminder."""
    script: list[dict[str, object]] = [
        {
            "task": "respond",
            "match": "^hello",
            "reply": HELLO,
            "usage": {"input_tokens": 40, "output_tokens": 9},
        },
        {
            "task": "respond",
            "match": "garden plan",
            # Substantive (twelve words or more): a short plain draft that came back before the
            # decision on the input would be sent on the gates alone (docs/architecture.md §3),
            # and this script's double answers both at once.
            "reply": "The raised beds look lovely to me, and the herbs in the sunny corner should thrive.",
        },
        # Decisions see the dialog: the rules of later questions come first.
        {"task": "decide", "match": "hello number", "output": {"action": "speak", "reason": "a greeting"}},
        {"task": "decide", "match": "Lisbon", "output": {"action": "speak", "reason": "it answers"}},
        {"task": "decide", "match": "garden plan", "output": {"action": "silent", "reason": SILENCE}},
        {"task": "respond", "match": "has come due", "reply": REMINDED},
        {"task": "respond", "match": "Lisbon", "reply": LISBON},
        {
            "task": "critique",
            "match": "Lisbon",
            "output": {
                "objections": [
                    {
                        "kind": "confabulation",
                        "span": "I remember our trip to Lisbon",
                        "explanation": "no memory of a trip to Lisbon was recalled",
                    }
                ]
            },
        },
        {"task": "refine", "reply": LISBON_FIXED},
        {"task": "respond", "match": "remind me", "reply": "I will remind you."},
    ]
    if reminder_at is not None:
        script.insert(
            0,
            {
                "task": "respond",
                "match": "remind me",
                "times": 1,
                "tool_calls": [
                    {"name": "set_reminder", "args": {"objective": "water the plants", "at": reminder_at}}
                ],
            },
        )
    path.write_text(json.dumps(script))


@dataclass
class WebDaemon:
    persyn: Persyn
    process: subprocess.Popen[bytes]
    url: str
    rules: Path
    keys: dict[str, str] = field(default_factory=dict[str, str])
    key_ids: dict[str, str] = field(default_factory=dict[str, str])

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start(root: Path, *, keys: dict[str, bool], revoked: tuple[str, ...] = (), **env: str) -> WebDaemon:
    """Init agent Ada, create `keys` (name → operator), revoke `revoked`, start `persyn run`
    with the web channel on a free loopback port."""
    script = root / "rules.json"
    rules(script)
    persyn = Persyn(
        home=root / "home",
        env={
            "PERSYN_MODELS__DEFAULT": f"test:script@{script}",
            "PERSYN_WEB__ENABLED": "true",
            "PERSYN_WEB__PORT": "0",
            "PERSYN_AUTONOMY__TICK_SECONDS": "1",
            **env,
        },
    )
    done = persyn.run("init", "--name", "Ada")
    assert done.returncode == 0, done.stderr
    made: dict[str, str] = {}
    ids: dict[str, str] = {}
    for name, operator in keys.items():
        created = persyn.run(
            "web", "keys", "create", "--name", name, "--json", *(["--operator"] if operator else [])
        )
        assert created.returncode == 0, created.stderr
        data = json.loads(created.stdout)
        made[name], ids[name] = data["key"], data["id"]
    for name in revoked:
        gone = persyn.run("web", "keys", "revoke", ids[name])
        assert gone.returncode == 0, gone.stderr
    process = persyn.start_daemon("run")
    found = re.search(r"web channel on (http://\S+)", persyn.log("run"))
    assert found is not None, persyn.log("run")
    return WebDaemon(persyn, process, found.group(1), script, made, ids)


def split_deployment(root: Path, **env: str) -> tuple[Persyn, str]:
    """A home (under `root`) for a `persyn worker` and a `persyn run --no-workers` serving the
    web on a free port, the model double on `rules`, `env` added: Ada, and alice's web key."""
    script = root / "rules.json"
    rules(script)
    persyn = Persyn(
        home=root / "home",
        env={
            "PERSYN_MODELS__DEFAULT": f"test:script@{script}",
            "PERSYN_WEB__ENABLED": "true",
            "PERSYN_WEB__PORT": "0",
            **env,
        },
    )
    assert persyn.run("init", "--name", "Ada").returncode == 0
    created = persyn.run("web", "keys", "create", "--name", "alice", "--json")
    assert created.returncode == 0, created.stderr
    return persyn, json.loads(created.stdout)["key"]


@contextmanager
def worker_and_front(persyn: Persyn, key: str) -> Iterator[tuple[str, SseReader]]:
    """A `persyn worker` and a `persyn run --no-workers` serving the web; the front's URL and
    an open event stream of Ada's."""
    worker = persyn.start_daemon("worker")
    front: subprocess.Popen[bytes] | None = None
    stream: SseReader | None = None
    try:
        front = persyn.start_daemon("run", "--no-workers")
        found = re.search(r"web channel on (http://\S+)", persyn.log("run"))
        assert found is not None, persyn.log("run")
        stream = SseReader(found.group(1) + "v1/agents/Ada/stream", key)
        assert stream.status == 200
        yield found.group(1), stream
    finally:
        if stream is not None:
            stream.close()
        if front is not None:
            stop_gracefully(front)
        stop_gracefully(worker)
