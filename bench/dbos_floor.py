"""What DBOS itself costs per activation on the embedded store: the floor under `turn.py`'s
platform overhead and `dispatch.py`'s CPU per activation.

On the same SQLite system-database engine Persyn uses (`runtime/durable/_system_sqlite.py`), runs
workflows of 0, 1, 3 and 5 steps that do nothing, started directly (until the result) and
enqueued on a queue partitioned like Persyn's events queue (partition concurrency 1, this
process's worker woken on enqueue as the runtime does; until the end of the body, before
DBOS records the outcome). Prints p50 wall time per workflow and the marginal cost of a step. Each step is two system-database transactions (look for a recorded
result, record this one); an enqueued workflow adds the enqueue, the claim and the outcome.

    uv run python bench/dbos_floor.py [--runs 40]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from dbos import DBOS, SetEnqueueOptions, SetWorkflowID

from persyn.core.ids import new_id
from persyn.runtime.durable._system_sqlite import dbos_sqlite_engine
from persyn.runtime.durable._wake import install_queue_waker

_QUEUE = "floor-events"


@DBOS.step(name="floor.step")
async def _step(index: int) -> dict[str, int]:
    return {"index": index}


_done: dict[str, asyncio.Event] = {}


@DBOS.workflow(name="floor.workflow")
async def _workflow(steps: int) -> int:
    for index in range(steps):
        await _step(index)
    # The end of the body, seen by the caller on the same loop (a handle's get_result polls
    # the database once a second, which would measure that instead).
    done = _done.get(DBOS.workflow_id or "")
    if done is not None:
        done.set()
    return steps


async def _measure(home: Path, runs: int) -> list[tuple[int, float, float]]:
    url = f"sqlite:///{home / 'dbos.sqlite'}"
    engine = dbos_sqlite_engine(url)
    assert engine is not None
    DBOS(
        config={
            "name": "persyn-floor",
            "system_database_url": url,
            "system_database_engine": engine,
            "log_level": "WARNING",
        }
    )
    DBOS.launch()
    waker = install_queue_waker()
    queue: Any = await DBOS.register_queue_async(
        _QUEUE, partition_concurrency=1, worker_concurrency=16, polling_interval_sec=0.25
    )
    await asyncio.sleep(1.5)  # the queue's worker thread starts
    rows: list[tuple[int, float, float]] = []
    try:
        for steps in (0, 1, 3, 5):
            direct: list[float] = []
            queued: list[float] = []
            for _ in range(runs):
                started = time.perf_counter()
                with SetWorkflowID(new_id()):
                    handle = await DBOS.start_workflow_async(_workflow, steps)
                await handle.get_result()
                direct.append((time.perf_counter() - started) * 1000)
                workflow_id = new_id()
                done = _done[workflow_id] = asyncio.Event()
                started = time.perf_counter()
                with SetWorkflowID(workflow_id), SetEnqueueOptions(queue_partition_key="agent"):
                    await queue.enqueue_async(_workflow, steps)
                if waker is not None:
                    waker.wake(_QUEUE)
                await done.wait()
                queued.append((time.perf_counter() - started) * 1000)
                await asyncio.sleep(0.02)  # the outcome is recorded; the partition is free again
            rows.append((steps, statistics.median(direct), statistics.median(queued)))
    finally:
        DBOS.destroy(workflow_completion_timeout_sec=2)
        engine.dispose()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=40, help="workflows per row and mode")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = asyncio.run(_measure(Path(tmp), args.runs))
    print(f"{'steps':>6} {'started p50 ms':>15} {'enqueued p50 ms':>16}")
    for steps, direct, queued in rows:
        print(f"{steps:>6} {direct:>15.2f} {queued:>16.2f}")
    (first, d0, q0), (last, d5, _q5) = rows[0], rows[-1]
    per_step = (d5 - d0) / (last - first)
    print(
        f"one step: {per_step:.2f} ms; an enqueued 0-step workflow's body ends {q0:.2f} ms after the enqueue.\n"
        f"{os.cpu_count()} CPUs, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}."
    )


if __name__ == "__main__":
    main()
