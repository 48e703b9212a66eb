"""Observations and dossiers through the real CLI: a conversation closes, the background
queue extracts what the person said about themselves, `persyn people` shows it (issue 5)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from persyn_cli import Persyn

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_observations_and_dossier_after_a_conversation_closes(persyn: Persyn, tmp_path: Path) -> None:
    script = tmp_path / "mind.json"
    rules = [
        {
            "task": "extract",
            "output": {
                "observations": [{"person": "Sam", "kind": "occupation", "value": "works as a teacher"}]
            },
        },
        {"task": "dossier", "reply": "I know Sam teaches."},
    ]
    script.write_text(json.dumps({"rules": rules}))
    env = {
        "PERSYN_MODELS__DEFAULT": f"test:script@{script}",
        "PERSYN_CONVERSATION__IDLE_TIMEOUT_MINUTES": "0.02",
        "PERSYN_DISPATCH__HOUSEKEEPING_SECONDS": "0.5",
    }
    chatting = {**env, "PERSYN_CONVERSATION__IDLE_TIMEOUT_MINUTES": "60"}
    # The chat itself never closes the conversation (however slow the machine): the daemon does.
    done = persyn.run("chat", "--as", "Sam", input="I work as a teacher.\n", env=chatting)
    assert done.returncode == 0, done.stderr
    (sam,) = json.loads(persyn.run("contacts", "list", "--json").stdout)
    assert "nothing observed yet" in persyn.run("people", "observations", sam["id"]).stdout
    assert "Nothing is known" in persyn.run("people", "dossier", sam["id"]).stdout

    daemon = persyn.start_daemon("run", env=env)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            found = json.loads(persyn.run("people", "observations", sam["id"], "--json").stdout)
            if found["observations"]:
                break
            time.sleep(1)
        else:
            raise AssertionError("no observation was extracted")
        while (
            time.monotonic() < deadline and "teaches" not in persyn.run("people", "dossier", sam["id"]).stdout
        ):
            time.sleep(0.5)
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)
    assert [o["value"] for o in found["observations"]] == ["works as a teacher"]
    assert persyn.run("people", "dossier", sam["id"]).stdout.strip() == "I know Sam teaches."
    shown = persyn.run("people", "observations", sam["id"], "--history").stdout
    assert "added: None -> 'works as a teacher'" in shown
    bad = persyn.run("people", "observations", "nope")
    assert bad.returncode != 0 and "has no contact named exactly 'nope'" in bad.stderr
