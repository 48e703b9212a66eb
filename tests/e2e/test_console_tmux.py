"""`persyn console` end to end, in a real terminal: tmux runs the real executable,
`send-keys` types, `capture-pane` reads the screen. A `persyn run` daemon in another
process fires a reminder the operator asked for in the console, and it arrives live."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from persyn_cli import Persyn

import needs

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason=needs.reason("tmux")),
]

REMINDED = "Time to water the plants, as you asked!"
WAIT_SECONDS = 90.0


class Terminal:
    """One tmux session on a private server socket, 120x40."""

    def __init__(self, socket: Path, command: str) -> None:
        self.socket = str(socket)
        self._tmux("new-session", "-d", "-s", "console", "-x", "120", "-y", "40", command)

    def _tmux(self, *args: str) -> str:
        done = subprocess.run(
            ["tmux", "-S", self.socket, *args], capture_output=True, text=True, timeout=30, check=True
        )
        return done.stdout

    def type(self, text: str) -> None:
        self._tmux("send-keys", "-t", "console", "-l", text)
        self._tmux("send-keys", "-t", "console", "Enter")

    def keys(self, *keys: str) -> None:
        self._tmux("send-keys", "-t", "console", *keys)

    def screen(self) -> str:
        return self._tmux("capture-pane", "-p", "-t", "console")

    def wait_for(self, condition: Callable[[str], bool], what: str) -> str:
        deadline = time.monotonic() + WAIT_SECONDS
        while time.monotonic() < deadline:
            screen = self.screen()
            if condition(screen):
                return screen
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}; the screen:\n{self.screen()}")

    def close(self) -> None:
        subprocess.run(["tmux", "-S", self.socket, "kill-server"], capture_output=True, check=False)


@pytest.fixture
def terminal_factory(tmp_path: Path) -> Iterator[Callable[[str], Terminal]]:
    opened: list[Terminal] = []

    def open_terminal(command: str) -> Terminal:
        terminal = Terminal(tmp_path / "tmux.sock", command)
        opened.append(terminal)
        return terminal

    yield open_terminal
    for terminal in opened:
        terminal.close()


def _script(path: Path) -> str:
    rules = [
        {
            "task": "respond",
            "match": "remind me",
            "times": 1,
            "tool_calls": [
                {"name": "set_reminder", "args": {"objective": "water the plants", "in_minutes": 60}}
            ],
        },
        {"task": "respond", "match": "remind me", "reply": "I will remind you."},
        {"task": "respond", "match": "has come due", "reply": REMINDED},
    ]
    path.write_text(json.dumps(rules))
    return f"test:script@{path}"


def test_the_console_in_a_terminal_with_a_daemon_firing_a_reminder_live(
    persyn: Persyn, tmp_path: Path, terminal_factory: Callable[[str], Terminal]
) -> None:
    env = {
        "PERSYN_MODELS__DEFAULT": _script(tmp_path / "rules.json"),
        "PERSYN_AUTONOMY__TICK_SECONDS": "1",
        "PERSYN_DISPATCH__OUTBOX_POLL_SECONDS": "0.5",
    }
    exit_file = tmp_path / "console.exit"
    command = " ".join(
        [
            "env",
            *(shlex.quote(f"{k}={v}") for k, v in persyn.environ(**env).items()),
            shlex.quote(sys.executable),
            "-m persyn console --as Sam",
            f"; echo $? > {shlex.quote(str(exit_file))}; sleep 600",
        ]
    )
    terminal = terminal_factory(command)
    terminal.wait_for(lambda s: "Talking with Ada" in s and "you are Sam" in s, "the console")
    terminal.wait_for(lambda s: "starting" not in s, "the runtime to start")

    terminal.type("Please remind me to water the plants")
    terminal.wait_for(lambda s: "Ada: I will remind you." in s, "the reply")
    assert "Sam: Please remind me to water the plants" in terminal.screen()

    # The daemon, two hours on, fires the reminder; the open console shows it as it comes.
    later = datetime.now(UTC) + timedelta(hours=2)
    daemon = persyn.start_daemon("--now", later.isoformat(), "run", env=env)
    try:
        screen = terminal.wait_for(lambda s: REMINDED in s, "the reminder")
        assert "while you were away" not in screen  # it arrived live
        assert screen.count(REMINDED) == 1
        # The directory panel is a keystroke away, and back.
        terminal.keys("F2")
        terminal.wait_for(
            lambda s: "recent conversations" in s and "identity: terminal" in s, "the directory"
        )
        terminal.keys("F1")
        terminal.wait_for(lambda s: "Message Ada" in s, "the chat again")
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)
    terminal.keys("C-q")
    assert _exit_code(terminal, exit_file) == "0", terminal.screen()
    assert "Traceback" not in persyn.log("run")


def _exit_code(terminal: Terminal, exit_file: Path) -> str:
    deadline = time.monotonic() + WAIT_SECONDS
    while not exit_file.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert exit_file.exists(), terminal.screen()
    return exit_file.read_text().strip()


def test_a_console_whose_runtime_fails_to_start_refuses_turns_and_exits_1(
    persyn: Persyn, tmp_path: Path, terminal_factory: Callable[[str], Terminal]
) -> None:
    # A broken configuration the store does not notice: the model's weights file is missing,
    # so the runtime fails to start behind the screen that is already up.
    missing = tmp_path / "no-such-weights.gguf"
    exit_file = tmp_path / "console.exit"
    command = " ".join(
        [
            "env",
            *(
                shlex.quote(f"{k}={v}")
                for k, v in persyn.environ(PERSYN_MODELS__DEFAULT=f"local:{missing}").items()
            ),
            shlex.quote(sys.executable),
            "-m persyn console",
            f"; echo $? > {shlex.quote(str(exit_file))}; sleep 600",
        ]
    )
    terminal = terminal_factory(command)
    screen = terminal.wait_for(lambda s: "does not exist" in s, "the start's error")
    assert "no-such-weights.gguf" in "".join(line.strip() for line in screen.splitlines())  # wrapped
    terminal.type("hello")
    terminal.wait_for(lambda s: "the runtime did not start; nothing was sent" in s, "the refusal")
    terminal.keys("C-q")
    assert _exit_code(terminal, exit_file) == "1", terminal.screen()


def test_the_console_without_a_terminal_says_to_use_chat(persyn: Persyn) -> None:
    done = persyn.run("console", input="hello\n")
    assert done.returncode == 2, done.stderr
    assert "persyn console needs a terminal" in done.stderr and "persyn chat" in done.stderr
    assert "Traceback" not in done.stderr
