"""The root `--now` is one clock for every command (issue 15, item 2), and what is written
under a moved clock never reorders the dialog said after it on the real one.

Real `persyn` subprocesses on one deployment; the agent answers with `test:echo`.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from persyn_cli import Persyn

from persyn.core.config import load_settings
from persyn.core.ids import new_id
from persyn.store import open_store
from persyn.store.ports.activity import ActivityEntry

pytestmark = pytest.mark.e2e

LATER = datetime.now(UTC) + timedelta(days=30)


def _runs_at(persyn: Persyn, when: datetime, tokens: int) -> None:
    """A heartbeat run logged at `when`, as a daemon on that clock would have logged it."""
    settings = load_settings(persyn.home, environ={})
    agent_id = settings.agent(None).id

    async def log() -> None:
        store = open_store(settings.database_url)
        await store.setup()
        try:
            entry = ActivityEntry(
                id=new_id(when),
                agent_id=agent_id,
                at=when,
                kind="heartbeat",
                reminder_id=new_id(when),
                objective="think",
                outcome="thought about the garden",
                tokens=tokens,
            )
            await store.add_activity(entry)
        finally:
            await store.close()

    asyncio.run(log())


def test_heartbeat_status_counts_the_window_ending_at_the_moved_clock(persyn: Persyn) -> None:
    _runs_at(persyn, LATER - timedelta(hours=2), 1073)
    moved = ("--now", LATER.isoformat())
    status = json.loads(persyn.run(*moved, "heartbeat", "status", "--json").stdout)
    activity = json.loads(persyn.run(*moved, "activity", "--since", "1d", "--json").stdout)
    assert status["tokens_today"] == sum(run["tokens"] for run in activity) == 1073
    # On the real clock that run has not happened yet: nothing spent in the last 24 hours.
    assert json.loads(persyn.run("heartbeat", "status", "--json").stdout)["tokens_today"] == 0
    # Two days on, it is out of the window, and before the day it ran, not yet in it.
    for when in (LATER + timedelta(days=2), LATER - timedelta(days=2)):
        shown = persyn.run("--now", when.isoformat(), "heartbeat", "status")
        assert "autonomy budget: 0 of" in shown.stdout, shown.stdout


def test_recall_and_cull_take_the_root_now_and_their_own_means_the_same(persyn: Persyn) -> None:
    old = (datetime.now(UTC) - timedelta(days=20)).date().isoformat()
    history = persyn.home.parent / "history.jsonl"
    line = {"time": old, "channel": "terminal:terminal", "participants": ["Sam"], "summary": "A chat."}
    history.write_text(json.dumps({**line, "importance": 1, "ref": "h:1"}) + "\n")
    assert persyn.run("memory", "import", str(history)).returncode == 0
    early = (datetime.now(UTC) - timedelta(days=25)).isoformat()
    # Before the memory was made, nothing is old enough to cull, however the time is given.
    for args in (
        ("--now", early, "memory", "cull", "--dry-run"),
        ("memory", "cull", "--dry-run", "--now", early),
    ):
        assert persyn.run(*args).stdout.startswith("would delete 0 memories"), args
    assert persyn.run("memory", "cull", "--dry-run").stdout.startswith("would delete 1 memories")
    both = persyn.run("--now", early, "memory", "cull", "--dry-run", "--now", LATER.isoformat())
    assert both.returncode == 2 and "--now given twice" in both.stderr
    bad = persyn.run("memory", "recall", "chat", "--now", "yesterday")
    assert bad.returncode == 2 and "invalid --now 'yesterday'" in bad.stderr


def _dialog(persyn: Persyn, conversation_id: str) -> list[tuple[str, str]]:
    shown: dict[str, Any] = json.loads(persyn.run("conversations", "show", conversation_id, "--json").stdout)
    return [(m["role"], m["text"]) for m in shown["messages"]]


def _conversations(persyn: Persyn) -> list[dict[str, Any]]:
    return json.loads(persyn.run("conversations", "list", "--json").stdout)


def test_a_run_on_a_clock_moved_ahead_never_reorders_the_dialog_said_after_it(persyn: Persyn) -> None:
    ahead = persyn.run("--now", LATER.isoformat(), "chat", "--as", "Sam", input="hello from next month\n")
    assert "You said: hello from next month" in ahead.stdout
    # Back on the real clock, the same channel: answered as itself, in a conversation of its own.
    now = persyn.run("chat", "--as", "Sam", input="first today\nsecond today\n")
    assert "You said: first today" in now.stdout and "You said: second today" in now.stdout
    today, later = sorted(_conversations(persyn), key=lambda c: c["started_at"])
    assert later["closed_at"] is not None  # it ended when it was last active
    assert _dialog(persyn, today["id"]) == [
        ("user", "first today"),
        ("agent", "You said: first today"),
        ("user", "second today"),
        ("agent", "You said: second today"),
    ]
    assert _dialog(persyn, later["id"]) == [
        ("user", "hello from next month"),
        ("agent", "You said: hello from next month"),
    ]


def test_a_message_sent_from_a_clock_ahead_takes_its_place_in_the_dialog(persyn: Persyn) -> None:
    daemon = persyn.start_daemon("run")
    try:
        sent = persyn.run("--now", LATER.isoformat(), "send", "from a clock ahead")
        assert sent.stdout.strip() == "You said: from a clock ahead", sent.stderr
        after = persyn.run("send", "and now from the real one")
        assert after.stdout.strip() == "You said: and now from the real one", after.stderr
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)
    (conversation,) = _conversations(persyn)
    assert _dialog(persyn, conversation["id"]) == [
        ("user", "from a clock ahead"),
        ("agent", "You said: from a clock ahead"),
        ("user", "and now from the real one"),
        ("agent", "You said: and now from the real one"),
    ]
