"""CPU a running deployment burns while nobody talks to it (a laptop runs it for months).

Starts the real runtime (workers, scheduler, the DBOS queues and schedule) for one or more
agents with nothing to do, lets it settle, then prints the process's CPU time over a quiet
window as a share of one core. What remains is polling: each queue worker's claim query
(every `[dispatch] queue_polling_seconds` for 10 s after the last work here, then every
`quiet_polling_seconds`; in-process enqueues wake it instead), DBOS's own background threads
(delayed workflows and timeouts, the scheduler, its internal queue), the reminder schedule's
ticks. The window starts once the deployment has been quiet for 12 s.

    uv run python bench/idle.py [--seconds 10] [--agents 1] [--polling SECONDS]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import tempfile
import threading
import time
from pathlib import Path

from persyn.core.config import AgentConfig, load_settings
from persyn.core.ids import new_id
from persyn.runtime.compose import build_runtime


def _write_home(home: Path, polling: float | None) -> None:
    home.mkdir(parents=True)
    toml = '[models]\ndefault = "test:echo"\n[metering]\nevent_log = false\n'
    if polling is not None:
        toml += f"[dispatch]\nqueue_polling_seconds = {polling}\n"
    (home / "persyn.toml").write_text(toml)


def _thread_cpu() -> dict[str, float]:
    """CPU seconds so far of each live thread of this process, by name (numbered pool threads
    summed under their prefix)."""
    used: dict[str, float] = {}
    for thread in threading.enumerate():
        if thread.ident is None:
            continue
        try:
            seconds = time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
        except (OSError, ValueError):  # it ended meanwhile
            continue
        name = thread.name.rstrip("0123456789_-")
        used[name] = used.get(name, 0.0) + seconds
    return used


async def _idle_share(
    home: Path,
    agents: int,
    seconds: float,
    polling: float | None,
    by_thread: dict[str, float],
    split: dict[str, float],
) -> float:
    _write_home(home, polling)
    settings = load_settings(home, environ={})
    configs = [AgentConfig(name=f"agent{i}", id=new_id()) for i in range(agents)]
    runtime = build_runtime(settings.model_copy(update={"agents": configs}))
    await runtime.start(workers=True)
    try:
        await asyncio.sleep(12)  # queue threads start, heartbeats bootstrap, polls go quiet
        threads, cpu, wall = _thread_cpu(), time.process_time(), time.perf_counter()
        usage = resource.getrusage(resource.RUSAGE_SELF)
        await asyncio.sleep(seconds)
        elapsed = time.perf_counter() - wall
        after = resource.getrusage(resource.RUSAGE_SELF)
        split["user"] = (after.ru_utime - usage.ru_utime) / elapsed
        split["sys"] = (after.ru_stime - usage.ru_stime) / elapsed
        split["switches"] = (after.ru_nvcsw - usage.ru_nvcsw) / elapsed
        for name, used in _thread_cpu().items():
            by_thread[name] = (used - threads.get(name, 0.0)) / elapsed
        return (time.process_time() - cpu) / elapsed
    finally:
        await runtime.stop()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="length of the quiet window")
    parser.add_argument("--agents", type=int, default=1, help="agents in the deployment")
    parser.add_argument(
        "--polling", type=float, default=None, help="[dispatch] queue_polling_seconds (default: the config's)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        by_thread: dict[str, float] = {}
        split: dict[str, float] = {}  # the process's user and sys CPU, its context switches
        share = asyncio.run(
            _idle_share(Path(tmp) / "home", args.agents, args.seconds, args.polling, by_thread, split)
        )
    polling = args.polling if args.polling is not None else "default"
    print(f"{'agents':>7} {'polling s':>10} {'window s':>9} {'idle CPU % of a core':>21}")
    print(f"{args.agents:>7} {polling!s:>10} {args.seconds:>9.0f} {share * 100:>21.1f}")
    print(
        f"user {split['user'] * 100:.2f}%, sys {split['sys'] * 100:.2f}% of a core; "
        f"{split['switches']:.0f} voluntary context switches per second"
    )
    shown = sorted(((used, name) for name, used in by_thread.items() if used >= 0.0005), reverse=True)
    print("by thread (% of a core): " + ", ".join(f"{name} {used * 100:.2f}" for used, name in shown))
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{os.cpu_count()} CPUs, load average {load}.")


if __name__ == "__main__":
    main()
