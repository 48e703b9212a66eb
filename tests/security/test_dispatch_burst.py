"""Five `persyn send --no-wait` at once to a running daemon (issue 13, item 1).

The adversarial run got "You said: (Continue.)" for 4 of 5: a message that waited in the
queue behind another on the same channel was older than the reply written meanwhile, so its
prompt ended with that reply. Each must be answered as itself.
"""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from persyn_cli import Persyn

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _rows(home: Path, sql: str, *params: str) -> list[tuple[str, ...]]:
    with sqlite3.connect(home / "data" / "persyn.db", timeout=10) as db:
        return [tuple(str(c) for c in row) for row in db.execute(sql, params).fetchall()]


def _reply(home: Path, event_id: str) -> str | None:
    rows = _rows(home, "SELECT text FROM messages WHERE role = 'agent' AND event_id = ?", event_id)
    return rows[0][0] if rows else None


def test_five_messages_sent_at_once_are_each_answered_as_themselves(persyn: Persyn) -> None:
    # The five are queued before any daemon runs, so every one but the first waits in the
    # queue behind a turn on the same channel (the situation the bug needs), whatever the
    # machine's speed; the daemon then answers them one at a time.
    texts = [f"burst message number {n}" for n in range(1, 6)]
    with ThreadPoolExecutor(max_workers=len(texts)) as pool:
        sent = list(pool.map(lambda text: persyn.run("send", "--no-wait", text), texts))
    assert all(s.returncode == 0 for s in sent), [s.stderr for s in sent]
    event_ids = [s.stdout.strip() for s in sent]
    assert all(_reply(persyn.home, e) is None for e in event_ids)
    daemon = persyn.start_daemon("run")
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and any(_reply(persyn.home, e) is None for e in event_ids):
            time.sleep(0.1)
    finally:
        if daemon.poll() is None:
            daemon.send_signal(signal.SIGTERM)
            try:
                daemon.wait(timeout=30)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()

    assert [_reply(persyn.home, e) for e in event_ids] == [f"You said: {text}" for text in texts]
    # Every message had arrived before the first reply was written (otherwise this test
    # would prove nothing).
    inbound = sorted(r[0] for r in _rows(persyn.home, "SELECT created_at FROM messages WHERE role = 'user'"))
    replies = sorted(r[0] for r in _rows(persyn.home, "SELECT created_at FROM messages WHERE role = 'agent'"))
    assert len(inbound) == 5 and inbound[-1] < replies[0]
