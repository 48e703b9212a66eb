"""`persyn --help` imports none of the heavy libraries, and `persyn send` only DBOS (issue 15
item 8: start-up time).

DBOS, pydantic-ai, WordLlama and llama.cpp take seconds to import between them; a command
imports them when it needs them: rendering help needs none, and a process that only submits
needs DBOS's client but no model gateway, cognition or embedder. Checked in a fresh
interpreter, since this test session has imported everything already. `bench/startup.py`
measures the time; this only checks what is imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("dbos", "pydantic_ai", "wordllama", "llama_cpp")

_PROBE = """
import json, sys
heavy = json.loads(sys.argv[2])
from persyn.cli import main
sys.argv = ["persyn", *json.loads(sys.argv[1])]
try:
    main()
except SystemExit:
    pass
print(json.dumps(sorted(name for name in heavy if name in sys.modules)))
"""


@pytest.mark.parametrize(
    "argv", [["--help"], ["chat", "--help"], ["send", "--help"], ["run", "--help"], ["memory", "--help"]]
)
def test_rendering_help_imports_no_heavy_library(argv: list[str]) -> None:
    assert _imported(argv, {}) == [], f"persyn {' '.join(argv)}"


def test_send_imports_dbos_but_no_model_library(tmp_path: Path) -> None:
    env = {"PERSYN_HOME": str(tmp_path / "home"), "PERSYN_MODELS__DEFAULT": "test:echo"}
    _imported(["init", "--name", "Ada"], env)
    assert _imported(["send", "--no-wait", "hello"], env) == ["dbos"]


def _imported(argv: list[str], env: dict[str, str]) -> list[str]:
    """Which of `HEAVY` the command `persyn ARGV` imported."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("PERSYN_")}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(argv), json.dumps(HEAVY)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env={**base, **env},
    )
    return json.loads(done.stdout.strip().splitlines()[-1])
