"""How long the `persyn` command takes to be useful (issue 15 item 8), and to leave (item 4b).

Runs the real command in subprocesses against a fresh deployment whose models are the
instant `test:echo` double, N times each, and prints the median (and the spread):

- `persyn --help`: start to exit (target 0.3 s);
- `persyn chat` ready: start until the prompt is shown on a terminal (a pty; target 1.5 s);
- `persyn chat` leaving: Ctrl-D as soon as the prompt shows, to exit (this includes the rest
  of the runtime's start, which runs behind the prompt and is finished before it stops);
- piped chat, reply to exit: `printf 'hi\\n' | persyn chat`, from the reply's line on stdout
  to the process's exit (target 2 s: background work left unfinished resumes in the next
  process);
- `persyn send` round trip: `persyn send hi` to a running `persyn run`, start to exit with
  the reply printed (target 0.5 s).

Figures move with machine load (`bench/README.md`): the table's header prints `os.getloadavg()`.

    uv run python bench/startup.py [--runs 5] [--only send]

`persyn send` hands the message to the running worker over its control socket
(`runtime/durable/control.py`); `--only send` measures just that row.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pty
import resource
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_PROMPT = b"> "


def _env(home: Path) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("PERSYN_")}
    base.pop("ANTHROPIC_API_KEY", None)
    base.pop("OPENAI_API_KEY", None)
    return {**base, "PERSYN_HOME": str(home), "PERSYN_MODELS__DEFAULT": "test:echo"}


def _persyn(*args: str) -> list[str]:
    return [sys.executable, "-m", "persyn", *args]


def _help(env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(_persyn("--help"), env=env, capture_output=True, check=True)
    return time.perf_counter() - start


def _read_until(fd: int, marker: bytes, timeout: float) -> bool:
    seen = b""
    deadline = time.perf_counter() + timeout
    while marker not in seen:
        left = deadline - time.perf_counter()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return False
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # the child closed the terminal
            return False
        if not chunk:
            return False
        seen += chunk
    return True


def _chat_on_a_terminal(env: dict[str, str]) -> tuple[float, float]:
    """(start → prompt, Ctrl-D → exit) of `persyn chat` on a pty."""
    master, slave = pty.openpty()
    start = time.perf_counter()
    process = subprocess.Popen(_persyn("chat"), stdin=slave, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    try:
        if not _read_until(master, _PROMPT, 60):
            raise RuntimeError("persyn chat showed no prompt within 60 s")
        ready = time.perf_counter() - start
        left = time.perf_counter()
        os.write(master, b"\x04")  # Ctrl-D: end of input
        while process.poll() is None:  # drain what it prints while leaving
            if select.select([master], [], [], 0.05)[0]:
                with contextlib.suppress(OSError):
                    os.read(master, 4096)
        return ready, time.perf_counter() - left
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(master)


def _piped_chat_exit(env: dict[str, str]) -> float:
    """From the reply's line on stdout to the exit of `printf 'hi\\n' | persyn chat`."""
    process = subprocess.Popen(
        _persyn("chat"), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
    )
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(b"hi\n")
    process.stdin.close()
    line = process.stdout.readline()
    replied = time.perf_counter()
    if b"You said" not in line:
        process.kill()
        raise RuntimeError(f"unexpected chat output {line!r}")
    process.stdout.read()
    process.wait()
    exited = time.perf_counter() - replied
    if process.returncode != 0:
        raise RuntimeError(f"persyn chat exited with {process.returncode}")
    return exited


def _send(env: dict[str, str]) -> tuple[float, float]:
    """(wall time, CPU time of the `persyn send` process itself): the CPU time moves less
    with the machine's load than the wall time does."""
    before = _children_cpu()
    start = time.perf_counter()
    process = subprocess.Popen(_persyn("send", "hi"), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stdout, stderr = process.communicate()
    elapsed = time.perf_counter() - start
    cpu = _children_cpu() - before
    if process.returncode != 0 or b"You said: hi" not in stdout:
        raise RuntimeError(f"persyn send failed ({process.returncode}): {stderr.decode()}")
    return elapsed, cpu


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # of the children waited for
    return usage.ru_utime + usage.ru_stime


def _start_daemon(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        daemon = subprocess.Popen(_persyn("run"), stdout=out, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 60
    while "persyn is serving" not in log.read_text(errors="replace"):
        if daemon.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"persyn run did not start:\n{log.read_text(errors='replace')}")
        time.sleep(0.05)
    return daemon


def _row(name: str, samples: list[float], target: float | None) -> str:
    spread = f"{min(samples):.2f}–{max(samples):.2f}"
    goal = f"≤ {target:g}" if target is not None else ""
    return f"| {name} | {statistics.median(samples):.2f} | {spread} | {goal} |"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5, help="runs of each measurement (median shown)")
    parser.add_argument("--only", choices=["send"], help="measure only the `persyn send` round trip")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        env = _env(home)
        subprocess.run(_persyn("init", "--name", "Ada"), env=env, capture_output=True, check=True)
        subprocess.run(_persyn("chat"), env=env, input=b"warm up\n", capture_output=True, check=True)
        rows: dict[str, list[float]] = {}
        for _ in range(0 if args.only else args.runs):
            rows.setdefault("`persyn --help`", []).append(_help(env))
            ready, leaving = _chat_on_a_terminal(env)
            rows.setdefault("`persyn chat` ready for input", []).append(ready)
            rows.setdefault("`persyn chat` Ctrl-D → exit", []).append(leaving)
            rows.setdefault("piped chat: reply → exit", []).append(_piped_chat_exit(env))
        daemon = _start_daemon(env, Path(tmp) / "run.log")
        try:
            _send(env)  # warm up
            sends = [_send(env) for _ in range(args.runs)]
            rows["`persyn send` round trip (daemon running)"] = [wall for wall, _ in sends]
            rows["`persyn send` CPU time of the sender"] = [cpu for _, cpu in sends]
        finally:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(timeout=60)
    targets = {
        "`persyn --help`": 0.3,
        "`persyn chat` ready for input": 1.5,
        "piped chat: reply → exit": 2.0,
        "`persyn send` round trip (daemon running)": 0.5,
    }
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"persyn start-up, {args.runs} runs each, seconds (load average {load}, {os.cpu_count()} CPUs)")
    print("| measure | median | min–max | target |")
    print("|---|---|---|---|")
    for name, samples in rows.items():
        print(_row(name, samples, targets.get(name)))


if __name__ == "__main__":
    main()
