"""`persyn init` then `persyn chat` fed on stdin, through the real CLI (issue 2)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from persyn_cli import Persyn

pytestmark = pytest.mark.e2e


def _rows(home: Path, sql: str, *args: object) -> list[tuple[object, ...]]:
    with sqlite3.connect(home / "data" / "persyn.db") as db:
        return db.execute(sql, args).fetchall()


def test_chat_replies_and_stores_the_dialog(persyn: Persyn) -> None:
    done = persyn.run("chat", input="Hello there, Ada!\nWhat is on your mind?\n")
    assert done.returncode == 0, done.stderr
    # test:echo answers deterministically from the last user message.
    assert "Ada: " in done.stdout
    assert "Hello there, Ada!" in done.stdout.split("Ada: ", 1)[1]
    dialog = _rows(persyn.home, "SELECT role, speaker_name, text FROM messages ORDER BY id")
    assert [row[0] for row in dialog] == ["user", "agent", "user", "agent"]
    assert dialog[0][2] == "Hello there, Ada!"
    assert dialog[1][1] == "Ada"
    # What was printed is what was stored as said.
    assert str(dialog[3][2]) in done.stdout
    usage = [json.loads(line) for line in (persyn.home / "usage.jsonl").read_text().splitlines()]
    stages = [u["stage"] for u in usage]
    # "You said: ..." speaks about the past, so each reply is substantive: respond and decide
    # on the way out; on this interactive channel critique runs deferred, in the background
    # (the chat may leave before it finishes: it resumes on the next start), as does the
    # emotional-state reading of each exchange.
    assert stages.count("respond") == 2 and stages.count("decide") == 2
    assert stages.count("emotion") <= 2
    assert all(s in ("respond", "decide", "refine", "emotion") or s.startswith("critique:") for s in stages)
    assert all(u["conversation_id"] and u["agent_id"] and u["surface"] == "terminal" for u in usage)


def test_display_name_is_remembered_between_sessions(persyn: Persyn) -> None:
    first = persyn.run("chat", input="/name Captain\nhi\n")
    assert first.returncode == 0, first.stderr
    assert "will call you Captain" in first.stdout
    second = persyn.run("chat", input="hello again\n")
    assert second.returncode == 0, second.stderr
    names = _rows(persyn.home, "SELECT speaker_name FROM messages WHERE role = 'user' ORDER BY id")
    assert [n[0] for n in names] == ["Captain", "Captain"]
    persons = _rows(persyn.home, "SELECT display_name FROM persons")
    assert persons == [("Captain",)], "a rename must not register a new person"


def test_oversized_and_non_utf8_input_is_rejected_and_nothing_is_lost(persyn: Persyn) -> None:
    assert persyn.run("chat", input="remember this\n").returncode == 0
    before = _rows(persyn.home, "SELECT id, text FROM messages ORDER BY id")
    huge = "x" * 40_000
    done = persyn.run("chat", input=f"{huge}\n")
    assert done.returncode == 0
    assert "40000 characters long; the limit is 32000" in done.stdout
    sent = persyn.run("send", "-", input=b"caf\xe9 \xff\n")
    assert sent.returncode == 2
    assert "not valid UTF-8" in sent.stderr
    assert _rows(persyn.home, "SELECT id, text FROM messages ORDER BY id") == before


def test_limit_is_configurable(persyn: Persyn) -> None:
    done = persyn.run("chat", input="twelve chars\n", PERSYN_CONVERSATION__MAX_MESSAGE_CHARS="5")
    assert "the limit is 5" in done.stdout


def test_unknown_model_string_is_a_clear_error(persyn: Persyn) -> None:
    done = persyn.run("chat", input="hi\n", PERSYN_MODELS__DEFAULT="gpt4-please")
    assert done.returncode == 2
    assert "'gpt4-please'" in done.stderr


def test_malformed_config_is_a_clear_error_and_is_left_alone(persyn: Persyn) -> None:
    path = persyn.home / "persyn.toml"
    original = path.read_text()
    path.write_text(original.replace("#idle_timeout_minutes = 30.0", "idle_timeout_minutes = -3"))
    broken = path.read_text()
    done = persyn.run("chat", input="hi\n")
    assert done.returncode == 2
    assert "conversation.idle_timeout_minutes" in done.stderr and "-3" in done.stderr
    assert path.read_text() == broken


def test_invalid_ids_are_rejected(persyn: Persyn) -> None:
    done = persyn.run("conversations", "show", "../etc/passwd")
    assert done.returncode == 2
    assert "invalid conversation id '../etc/passwd'" in done.stderr


def test_conversation_can_be_read_back(persyn: Persyn) -> None:
    assert persyn.run("chat", input="a line to find later\n").returncode == 0
    listed = persyn.run("conversations", "list", "--json")
    conversations = json.loads(listed.stdout)
    assert len(conversations) == 1
    shown = persyn.run("conversations", "show", conversations[0]["id"])
    assert "a line to find later" in shown.stdout


def test_second_agent_shares_nothing_but_infrastructure(persyn: Persyn) -> None:
    assert persyn.run("init", "--name", "Bob").returncode == 0
    listed = persyn.run("agents", "list", "--json")
    assert [a["name"] for a in json.loads(listed.stdout)] == ["Ada", "Bob"]
    ambiguous = persyn.run("chat", input="hi\n")
    assert ambiguous.returncode == 2 and "--agent" in ambiguous.stderr
    assert persyn.run("chat", "--agent", "Ada", input="only for Ada\n").returncode == 0
    bob = persyn.run("conversations", "list", "--agent", "Bob", "--json")
    assert json.loads(bob.stdout) == []
