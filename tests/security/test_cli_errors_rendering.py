"""Stored text on the operator's terminal (issue 13, item 15): escape sequences and other
control characters in messages, names, memories, facts, goals, reminders, activity, graph
facts, dossiers and usage are shown visibly (`\\x1b`), never written raw; Rich markup prints
literally; `--json` stays valid JSON carrying the exact text."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from persyn_cli import Persyn

from persyn.core.config import load_settings
from persyn.core.ids import new_id
from persyn.people.observations import DOSSIER_FLAG
from persyn.present.render import block, dump_json, one_line, visible
from persyn.runtime.background.autonomy import ActivityEntry
from persyn.store import open_store
from persyn.store.base import AtTrigger, Goal, Observation, Reminder
from persyn.store.capabilities import require_capability
from persyn.store.ports.graph import GraphPort
from persyn.store.ports.graph_rows import EntityFact, FactSource, RelationFact

# What a hostile message carries: a window-title change (OSC ... BEL), colours, a screen
# clear through the 8-bit CSI, a right-to-left override, Rich markup and a hyperlink.
EVIL = (
    "\x1b]0;pwned\x07\x1b[31mred\x1b[0m \x9b2J [bold]b[/bold] [link=http://evil.example]x[/link] \u202eevil"
)
# Raw bytes that must never reach the terminal: C0 except newline, DEL, C1, bidi controls.
NAME = "Sam\x1b]0;pwned\x07\x1b[31m[bold]\u202e"  # a contact's name is at most 64 characters
# No deliberation: nothing runs on in the background when the chat process ends.
QUIET = {"PERSYN_DELIBERATION__ENABLED": "false"}
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def test_visible_shows_control_characters_and_keeps_layout() -> None:
    assert visible("a\x1b[31mb\tc\nd\re\x7f\x9b\u202e") == "a\\x1b[31mb\tc\nd\\re\\x7f\\x9b\\u202e"
    assert one_line("a\nb\tc") == "a\\nb\\tc"
    assert block("one\ntwo", "  ") == "one\n  two"
    assert visible("[bold]plain[/bold] naïve — ok") == "[bold]plain[/bold] naïve — ok"
    assert RAW.search(dump_json({"t": EVIL})) is None
    assert json.loads(dump_json({"t": EVIL})) == {"t": EVIL}


def _seed(persyn: Persyn) -> None:
    """Stored text of every kind, written through the store port (as the runtime writes it)."""
    settings = load_settings(persyn.home, environ={})
    agent = settings.agents[0]
    now = datetime.now(UTC)

    async def seed() -> None:
        store = open_store(settings.database_url)
        await store.setup()
        try:
            (person,) = [p for p in await store.list_persons(agent.id) if "pwned" in p.display_name]
            await store.set_fact(agent.id, person.id, f"likes{EVIL}", f"tea{EVIL}", now)
            await store.add_address(agent.id, person.id, "email", "sam[bold]@example.com", now)
            await store.add_observation(
                Observation(
                    id=new_id(now),
                    agent_id=agent.id,
                    subject_id=person.id,
                    kind="preference",
                    value=f"prefers{EVIL}",
                    observed_at=now,
                ),
                "added",
                f"said so{EVIL}",
            )
            await store.set_flag(agent.id, DOSSIER_FLAG + person.id, json.dumps({"text": f"Sam.\n{EVIL}"}))
            await store.add_goal(
                Goal(
                    id=new_id(now),
                    agent_id=agent.id,
                    description=f"goal{EVIL}",
                    created_at=now,
                    updated_at=now,
                )
            )
            reminder_id = new_id(now)
            await store.add_reminder(
                Reminder(
                    id=reminder_id,
                    agent_id=agent.id,
                    objective=f"remind{EVIL}",
                    trigger=AtTrigger(at=now + timedelta(days=1)),
                    next_fire_at=now + timedelta(days=1),
                    created_at=now,
                    updated_at=now,
                )
            )
            entry = ActivityEntry(
                id=new_id(now),
                agent_id=agent.id,
                at=now,
                kind="reminder",
                reminder_id=reminder_id,
                objective=f"remind{EVIL}",
                outcome=f"did{EVIL}",
                tokens=3,
            )
            await store.add_activity(entry)
            await require_capability(store, GraphPort).upsert_graph(
                agent.id,
                FactSource(channel="terminal:terminal", learned_at=now),
                [EntityFact(name="Ann", attributes={"role": f"boss{EVIL}"})],
                [RelationFact(source="Ann", relation=f"works at{EVIL}", target=f"Acme{EVIL}")],
            )
        finally:
            await store.close()

    asyncio.run(seed())
    usage = {
        "id": new_id(now),
        "at": now.isoformat(),
        "agent_id": agent.id,
        "stage": "respond",
        "model": "test:echo",
        "tier": "test",
        "channel": f"terminal{EVIL}",
    }
    with open(settings.usage_log_path, "a", encoding="utf-8") as ledger:
        ledger.write(json.dumps(usage) + "\n")


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*_strings(k), *_strings(v))]  # type: ignore[union-attr]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]  # type: ignore[union-attr]
    return []


def _ids(persyn: Persyn, *command: str) -> list[dict[str, object]]:
    done = persyn.run(*command, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _shown_safely(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    for stream in (done.stdout, done.stderr):
        raw = RAW.search(stream)
        assert raw is None, f"raw {raw.group()!r} in {stream!r}" if raw else ""
    return done.stdout


@pytest.mark.e2e
def test_every_command_printing_stored_text_shows_control_characters_visibly(
    persyn: Persyn, tmp_path: Path
) -> None:
    chat = persyn.run("chat", "--as", f"Sam{EVIL}", input=f"hello{EVIL}\nsecond line\n", env=QUIET)
    assert chat.returncode == 0, chat.stderr
    (operator,) = _ids(persyn, "contacts", "list")
    renamed = persyn.run("contacts", "rename", str(operator["id"]), NAME)
    assert renamed.returncode == 0, renamed.stderr
    history = tmp_path / "history.jsonl"
    line = {
        "time": "2026-11-01T10:00:00+00:00",
        "channel": "terminal:terminal",
        "participants": ["Sam"],
        "summary": f"memory{EVIL}\nforged line",
        "ref": "evil-1",
        "dialog": [{"speaker": "Sam", "text": f"said{EVIL}", "time": "2026-11-01T10:00:00+00:00"}],
    }
    history.write_text(json.dumps(line) + "\n", encoding="utf-8")
    imported = persyn.run("memory", "import", str(history))
    assert imported.returncode == 0, imported.stderr
    _seed(persyn)

    conversation = _ids(persyn, "conversations", "list")[0]  # newest first: the chat
    contacts = _ids(persyn, "contacts", "list")
    (sam,) = [c for c in contacts if "pwned" in str(c["display_name"])]
    (record,) = [r for r in _ids(persyn, "memory", "list") if r["ref"] == "evil-1"]
    (reminder,) = _ids(persyn, "reminders", "list")
    commands: list[tuple[str, ...]] = [
        ("conversations", "list"),
        ("conversations", "show", str(conversation["id"])),
        ("conversations", "show", str(conversation["id"]), "--deliberation"),
        ("contacts", "list"),
        ("contacts", "show", str(sam["id"])),
        ("channels", "list"),
        ("channels", "show", "terminal:terminal"),
        ("people", "observations", str(sam["id"]), "--history"),
        ("people", "dossier", str(sam["id"])),
        ("memory", "list"),
        ("memory", "show", str(record["id"]), "--dialog"),
        ("goals", "list"),
        ("reminders", "list"),
        ("reminders", "show", str(reminder["id"])),
        ("activity",),
        ("heartbeat", "status"),
        ("graph", "query", "Ann"),
        ("graph", "path", "Ann", f"Acme{EVIL}"),
        ("usage", "--by", "channel"),
    ]
    shown: dict[tuple[str, ...], str] = {}
    plain = {("conversations", "list"), ("channels", "list"), ("channels", "show", "terminal:terminal")}
    for command in commands:
        shown[command] = _shown_safely(persyn.run(*command))
        if command not in plain:  # these print no stored text with an escape in it
            assert "\\x1b" in shown[command], (command, shown[command])

    dialog = shown[("conversations", "show", str(conversation["id"]))]
    assert "[bold]b[/bold] [link=http://evil.example]x[/link]" in dialog  # markup, literally
    assert "\\x1b]0;pwned\\x07\\x1b[31mred\\x1b[0m \\x9b2J" in dialog
    assert "\\u202eevil" in dialog
    # A name is one line; a message's own newlines stay, indented under it.
    assert f"] Sam{one_line(EVIL)}: hello{visible(EVIL)}\n" in dialog or f"hello{visible(EVIL)}\n" in dialog
    listing = shown[("memory", "list")]
    assert "memory" in listing and "\\nforged line" in listing
    memory = shown[("memory", "show", str(record["id"]), "--dialog")]
    assert "\n                  forged line" in memory
    assert f"likes{one_line(EVIL)} = tea{one_line(EVIL)}" in shown[("contacts", "show", str(sam["id"]))]
    assert f"Sam.\n{visible(EVIL)}" in shown[("people", "dossier", str(sam["id"]))]

    # --json: valid, exact, and no raw control character on the terminal either.
    for command in [
        ("conversations", "show", str(conversation["id"])),
        ("contacts", "show", str(sam["id"])),
        ("memory", "show", str(record["id"]), "--dialog"),
        ("people", "observations", str(sam["id"])),
        ("goals", "list"),
        ("reminders", "list"),
        ("activity",),
        ("graph", "query", "Ann"),
        ("usage", "--by", "channel"),
    ]:
        done = persyn.run(*command, "--json")
        text = _shown_safely(done)
        assert any(EVIL in value for value in _strings(json.loads(text))), command
    messages = json.loads(persyn.run("conversations", "show", str(conversation["id"]), "--json").stdout)
    assert messages["messages"][0]["text"] == f"hello{EVIL}"


@pytest.mark.e2e
def test_errors_and_replies_show_stored_text_visibly(persyn: Persyn) -> None:
    chat = persyn.run("chat", input=f"hi{EVIL}\n", env=QUIET)
    text = _shown_safely(chat)
    assert f"You said: hi{visible(EVIL)}" in text
    missing = persyn.run("contacts", "rename", new_id(), f"x{EVIL}")
    assert missing.returncode == 2 and RAW.search(missing.stderr) is None, missing.stderr
