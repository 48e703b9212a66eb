"""Runs the real `persyn` command in subprocesses for end-to-end tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Persyn:
    """Runs `python -m persyn` against one deployment directory."""

    home: Path
    env: dict[str, str] = field(default_factory=dict[str, str])

    def environ(self, **extra: str) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith("PERSYN_")}
        base.pop("ANTHROPIC_API_KEY", None)
        base.pop("OPENAI_API_KEY", None)
        return {**base, "PERSYN_HOME": str(self.home), **self.env, **extra}

    def run(
        self,
        *args: str,
        input: str | bytes | None = None,
        timeout: float = 120,
        env: Mapping[str, str] | None = None,
        **extra: str,
    ) -> subprocess.CompletedProcess[str]:
        data = input.encode() if isinstance(input, str) else input
        done = subprocess.run(
            [sys.executable, "-m", "persyn", *args],
            input=data,
            capture_output=True,
            env=self.environ(**(env or {}), **extra),
            timeout=timeout,
            check=False,
        )
        return subprocess.CompletedProcess(
            done.args,
            done.returncode,
            done.stdout.decode(errors="replace"),
            done.stderr.decode(errors="replace"),
        )

    def popen(self, *args: str, **env: str) -> subprocess.Popen[bytes]:
        """Start a long-running command; its output goes to a log file beside the home."""
        self.home.parent.mkdir(parents=True, exist_ok=True)
        with open(self.home.parent / f"{args[0]}.log", "ab") as log:
            return subprocess.Popen(
                [sys.executable, "-m", "persyn", *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.environ(**env),
            )

    def log(self, command: str) -> str:
        path = self.home.parent / f"{command}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def start_daemon(
        self, *args: str, startup_timeout: float = 60, env: Mapping[str, str] | None = None, **extra: str
    ) -> subprocess.Popen[bytes]:
        """Start `persyn run` (or `worker`) and wait until it says it is serving."""
        import time

        command = args[0] if args else "run"
        banner = "persyn is serving"
        before = self.log(command).count(banner)
        process = self.popen(*(args or ("run",)), **(env or {}), **extra)
        deadline = time.monotonic() + startup_timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise AssertionError(f"persyn exited with {process.returncode}:\n{self.log(command)}")
            if self.log(command).count(banner) > before:
                return process
            time.sleep(0.05)
        process.kill()
        process.wait()
        raise AssertionError(f"persyn did not start serving:\n{self.log(command)}")


def stop_gracefully(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM a daemon still running and wait for its shutdown; kill it after 30 s."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
