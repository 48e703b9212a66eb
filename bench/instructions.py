"""Instructions per turn and per idle second, counted by valgrind's callgrind (issue 33, item 15).

CPU time swings 2x on a busy or shared machine; an instruction count does not. Each
configuration runs in a child process under `valgrind --tool=callgrind` with instrumentation
off until the runtime is started, seeded and warmed up (two turns); a client request (a tiny C
helper compiled here with the system's `valgrind/callgrind.h`) then counts, across all threads,
either `--turns` turns (each from submit to its marker and until its background work —
critique, refinement, emotion reading — has finished) or `--idle-seconds` of a deployment
nobody talks to. The turns reuse `bench/turn.py`'s model double (0 ms per call) and memories.

In the turn rows the scheduler is off and the polls are slowed: the queue workers' to 10 s
(enqueues in this process wake them at once, `runtime/durable/_wake.py`), the outbox's to
60 s, the dead-executor watch to an hour. Under valgrind a turn lasts 20-50 s of wall time,
and polls at their defaults (0.25 s while busy) would be counted with it by the hundred. The
idle row keeps the defaults; `--dispatch 'quiet_polling_seconds = 0'` there gives the busy
polling rate. Compare rows of this script only.

`--ns-per-instruction` converts to CPU ms; without it a calibration (a pure-Python loop, its
CPU time natively, best of 5, over its count under callgrind) gives the ratio on this machine.

    uv run python bench/instructions.py [--turns 5] [--memories 10000] [--idle-seconds 20]
        [--modes inline,deferred,idle] [--bench-dir bench]

`--bench-dir` and `PYTHONPATH` may name another checkout (its `bench/turn.py` supplies the
double), to count an older commit with this script.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

_HELPER_C = r"""
#include <valgrind/callgrind.h>
void count_start(void) { CALLGRIND_START_INSTRUMENTATION; CALLGRIND_ZERO_STATS; }
void count_stop(const char *what) { CALLGRIND_DUMP_STATS_AT(what); CALLGRIND_STOP_INSTRUMENTATION; }
"""
_QUIET_POLLING = "queue_polling_seconds = 10\noutbox_poll_seconds = 60\ndead_executor_seconds = 3600\n"
_SAMPLE_LOOKS = 30
_CALIBRATION = "sum(i * i % 7 for i in range(3_000_000))"


def _helper(directory: Path) -> Path:
    source, library = directory / "count.c", directory / "libcount.so"
    source.write_text(_HELPER_C)
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    return library


# child: one configuration, counted ------------------------------------------------------------
_LOOKS = [0]  # queue listings `_settled` made: the bench's own work, taken off the count


async def _settled() -> None:
    """Until neither queue has work enqueued or running (a turn's background work included),
    looked at every 0.5 s. The looks are counted with the turns; the parent takes them off at
    the cost of a look measured on its own (`--child`'s second dump, `looks`)."""
    from dbos import DBOS

    while True:
        busy = False
        for queue in ("persyn-events", "persyn-background", "persyn-events"):
            _LOOKS[0] += 1
            if await DBOS.list_queued_workflows_async(
                queue_name=queue, status=["ENQUEUED", "PENDING"], load_input=False, load_output=False
            ):
                busy = True
                break
        if not busy:
            return
        await asyncio.sleep(0.5)


async def _child(
    mode: str,
    turns: int,
    memories: int,
    idle_seconds: float,
    home: Path,
    count: Any,
    extra_dispatch: Sequence[str] = (),
) -> dict[str, Any]:
    import turn as bench  # the `--bench-dir` checkout's bench/turn.py  # pyright: ignore[reportMissingImports]

    from persyn.core.config import AgentConfig, load_settings
    from persyn.core.events import Event, Speaker
    from persyn.core.ids import new_id
    from persyn.runtime.compose import build_runtime
    from persyn.testing import register_double

    bench._MODEL.delay = 0.0  # pyright: ignore[reportPrivateUsage]
    register_double("bench-turn", bench._MODEL)  # pyright: ignore[reportPrivateUsage]
    bench._home(home, "deferred" if mode == "idle" else mode)  # pyright: ignore[reportPrivateUsage]
    dispatch = ("" if mode == "idle" else _QUIET_POLLING) + "".join(f"{line}\n" for line in extra_dispatch)
    if dispatch:
        with (home / "persyn.toml").open("a") as toml:
            toml.write(f"[dispatch]\n{dispatch}")
    settings = load_settings(home, environ={})
    agent = AgentConfig(name="Ada", id=new_id())
    runtime = build_runtime(settings.model_copy(update={"agents": [agent]}))
    # The reminder schedule's tick (every 5 s of wall time) would keep the turn rows from ever
    # settling under valgrind; the idle row keeps it (it is part of what idling costs).
    await runtime.start(workers=True, scheduler=mode == "idle")
    speaker = Speaker(service="bench", channel="bench", speaker_id="u", display_name="Uma")
    try:
        person_id, _ = await runtime.resolve_speaker(agent.id, speaker)
        await bench._seed_memories(runtime, agent, memories, person_id)  # pyright: ignore[reportPrivateUsage]

        async def turn(index: int) -> None:
            now = runtime.clock.now()
            text = f"What do you think about the garden plan, turn {index}?"
            event = Event(
                id=new_id(now),
                agent_id=agent.id,
                service="bench",
                channel="bench",
                speaker=speaker,
                text=text,
                received_at=now,
            )
            bench._turn_events[str(index)] = event.id  # pyright: ignore[reportPrivateUsage]
            await runtime.submit(event)
            await runtime.wait_marker(agent.id, event.id, timeout=600)
            await _settled()

        for index in range(2):  # warm caches and the model up
            await turn(index)
        if mode == "idle":
            await asyncio.sleep(12)  # the polls go quiet (10 s after the last work)
            count.count_start()
            wall = time.perf_counter()
            await asyncio.sleep(idle_seconds)
            wall = time.perf_counter() - wall
            count.count_stop(b"window")
            return {"wall": wall}
        count.count_start()
        wall = time.perf_counter()
        _LOOKS[0] = 0
        for index in range(2, turns + 2):
            await turn(index)
        wall = time.perf_counter() - wall
        looks = _LOOKS[0]
        count.count_stop(b"window")
        count.count_start()  # the cost of `_SAMPLE_LOOKS` looks at quiet queues, on their own
        _LOOKS[0] = 0
        while _LOOKS[0] < _SAMPLE_LOOKS:
            await _settled()
        sampled = _LOOKS[0]
        count.count_stop(b"looks")
        return {"turns": turns, "wall": wall, "looks": looks, "sampled": sampled}
    finally:
        await runtime.stop()


# parent: run each configuration under callgrind, print the table ------------------------------
def _counted(out: Path, what: str = "window") -> int:
    """Instructions in the dump made by `count_stop(what)` (its `totals:` line). Only the dump
    whose trigger line names `what` counts: the one made at exit holds no count."""
    for dump in sorted(out.parent.glob(out.name + ".*")):
        lines = dump.read_text(errors="replace").splitlines()
        if f"desc: Trigger: Client Request: {what}" in lines:
            return next(int(line.split()[1]) for line in lines if line.startswith("totals:"))
    raise RuntimeError(f"no dump of {what!r} in {out}.*")


def _under_callgrind(argv: list[str], out: Path, env: dict[str, str]) -> str:
    command = [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        "--cache-sim=no",
        f"--callgrind-out-file={out}",
        sys.executable,
        *argv,
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed:\n{done.stderr[-4000:]}")
    return done.stdout


def _calibrate(tmp: Path, env: dict[str, str]) -> float:
    """Nanoseconds of CPU per instruction on this machine for interpreted Python."""
    timing = (
        "import time\nbest = 1e9\nfor _ in range(5):\n    t = time.process_time()\n"
        f"    {_CALIBRATION}\n    best = min(best, time.process_time() - t)\nprint(best)\n"
    )
    seconds = float(
        subprocess.run([sys.executable, "-c", timing], capture_output=True, text=True, check=True).stdout
    )
    out = tmp / "calibration.out"
    script = (
        f"import ctypes\ncount = ctypes.CDLL({env['PERSYN_COUNT_LIB']!r})\n"
        f"count.count_start()\n{_CALIBRATION}\ncount.count_stop(b'window')\n"
    )
    _under_callgrind(["-c", script], out, env)
    return seconds * 1e9 / _counted(out)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=5, help="counted turns per mode")
    parser.add_argument("--memories", type=int, default=10_000, help="synthetic memories in the store")
    parser.add_argument("--idle-seconds", type=float, default=20.0, help="length of the counted quiet window")
    parser.add_argument(
        "--modes", default="inline,deferred,idle", help="comma-separated: inline, deferred, idle"
    )
    parser.add_argument("--bench-dir", type=Path, default=Path(__file__).parent, help="whose bench/turn.py")
    parser.add_argument(
        "--dispatch",
        action="append",
        default=[],
        help="a [dispatch] key for every row, e.g. 'quiet_polling_seconds = 0' (repeatable)",
    )
    parser.add_argument("--ns-per-instruction", type=float, default=None, help="skip the calibration")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    sys.path.insert(0, str(args.bench_dir.resolve()))
    if args.child is not None:
        count = ctypes.CDLL(os.environ["PERSYN_COUNT_LIB"])
        with tempfile.TemporaryDirectory() as home:
            result = asyncio.run(
                _child(
                    args.child,
                    args.turns,
                    args.memories,
                    args.idle_seconds,
                    Path(home) / "home",
                    count,
                    args.dispatch,
                )
            )
        print("RESULT " + json.dumps(result))
        return
    rows: list[tuple[str, int, float, float | None, float]] = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        env = {**os.environ, "PERSYN_COUNT_LIB": str(_helper(tmp))}
        ns = args.ns_per_instruction or _calibrate(tmp, env)
        for mode in args.modes.split(","):
            out = tmp / f"{mode}.out"
            argv = [
                str(Path(__file__).resolve()),
                "--child",
                mode,
                "--turns",
                str(args.turns),
                "--memories",
                str(args.memories),
                "--idle-seconds",
                str(args.idle_seconds),
                "--bench-dir",
                str(args.bench_dir.resolve()),
                *(f"--dispatch={line}" for line in args.dispatch),
            ]
            stdout = _under_callgrind(argv, out, env)
            result = json.loads(next(line for line in stdout.splitlines() if line.startswith("RESULT "))[7:])
            counted = _counted(out)
            if mode == "idle":
                per_second = counted / result["wall"]
                rows.append(
                    (mode, round(per_second), per_second * ns / 1e6, per_second * ns / 1e7, result["wall"])
                )
            else:
                look = _counted(out, "looks") / result["sampled"]
                per_turn = (counted - look * result["looks"]) / result["turns"]
                rows.append(
                    (mode, round(per_turn), per_turn * ns / 1e6, None, result["wall"] / result["turns"])
                )
    print(
        f"memories: {args.memories}, turns: {args.turns}, idle window: {args.idle_seconds:.0f} s, model 0 ms"
    )
    print(f"{'row':>9} {'instructions':>14} {'CPU ms':>8} {'% of a core':>12} {'wall s':>7}")
    for mode, counted, ms, share, wall in rows:
        unit = "per second" if mode == "idle" else "per turn"
        shown = "" if share is None else f"{share:.2f}"
        print(f"{mode:>9} {counted:>14,} {ms:>8.1f} {shown:>12} {wall:>7.1f}  {unit}")
    print(
        f"{ns:.3f} ns per instruction (interpreted Python on this machine, "
        f"{'given' if args.ns_per_instruction else 'calibrated'}): CPU ms = instructions x that.\n"
        "A turn counts every thread from submit until its background work has finished, less the\n"
        "bench's own looks at the queues (each costed on its own)."
    )


if __name__ == "__main__":
    main()
