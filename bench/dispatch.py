"""Dispatch throughput and latency on the embedded store (issue 2 figures).

For 1, 10 and 100 agents, submits events through the real runtime (persist → enqueue on the
DBOS `events` queue partitioned by agent → activation workflow → transmit) with an instant
in-process model double, and prints activations per second and the latency from the event
being persisted to the first model request (p50/p99).

    uv run python bench/dispatch.py [--events N] [--agents 1,10,100] [--polling SECONDS]

It also prints the process's CPU time per activation during the burst: on a shared machine
the rate moves with other load, the CPU cost much less. Compare changes back to back.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

from dbos import DBOS

from persyn.core.config import AgentConfig, Settings, load_settings
from persyn.core.events import Event, Speaker
from persyn.core.ids import new_id
from persyn.runtime.app import Runtime
from persyn.runtime.compose import build_runtime
from persyn.testing import register_double

_SEQUENTIAL = 50
_first_request: dict[str, float] = {}
_persisted: dict[str, float] = {}


def _instant(task: str | None, messages: object, info: object) -> str:
    text = str(messages[-1].parts[-1].content)  # type: ignore[index,attr-defined]
    key = text.split("#", 1)[-1]
    _first_request.setdefault(key, time.perf_counter())
    return "ok"


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _settings(home: Path, agent_count: int, polling: float | None) -> tuple[Settings, list[AgentConfig]]:
    home.mkdir(parents=True)
    # Background extraction (observations, graph) every few messages is not part of an
    # activation, and the instant double cannot answer its structured requests (each would
    # fail and be retried): off here, so the figure is the dispatcher's.
    toml = (
        '[models]\ndefault = "test:bench"\n[metering]\nevent_log = false\n'
        "[conversation]\nextract_every_messages = 0\n"
    )
    if polling is not None:
        toml += f"[dispatch]\nqueue_polling_seconds = {polling}\n"
    (home / "persyn.toml").write_text(toml)
    settings = load_settings(home, environ={})
    agents = [AgentConfig(name=f"agent{i}", id=new_id()) for i in range(agent_count)]
    return settings.model_copy(update={"agents": agents}), agents


async def _run(
    settings: Settings, agents: list[AgentConfig], events: int
) -> tuple[float, float, list[float]]:
    agent_count = len(agents)
    runtime = build_runtime(settings)
    await runtime.start(workers=True)
    _first_request.clear()
    _persisted.clear()
    try:
        # Warm up (the first call builds the model), then measure latency as a chat sees
        # it: one event at a time, each awaited.
        warm = await _submit(runtime, agents[0], "warm")
        await runtime.wait_marker(agents[0].id, warm, timeout=120)
        _persisted.clear()
        for index in range(_SEQUENTIAL):
            agent = agents[index % agent_count]
            event_id = await _submit(runtime, agent, f"s{index}")
            await runtime.wait_marker(agent.id, event_id, timeout=120)
        latencies = [(_first_request[k] - _persisted[k]) * 1000 for k in _persisted if k in _first_request]
        # Throughput: a burst spread over every agent.
        event_ids: list[tuple[str, str]] = []
        started = time.perf_counter()
        cpu_started = time.process_time()
        for index in range(events):
            agent = agents[index % agent_count]
            event_ids.append((agent.id, await _submit(runtime, agent, f"e{index}")))
        for agent_id, event_id in event_ids:
            await runtime.wait_marker(agent_id, event_id, timeout=600)
        elapsed = time.perf_counter() - started
        cpu = time.process_time() - cpu_started
        # The marker is written inside the transmit step; let the workflows record their
        # outcome before DBOS is destroyed, so a run ends without shutdown noise.
        for _agent_id, event_id in event_ids[-worker_window(settings) :]:
            await (await DBOS.retrieve_workflow_async(event_id)).get_result()
    finally:
        await runtime.stop()
    return events / elapsed, cpu * 1000 / events, latencies


def worker_window(settings: Settings) -> int:
    """How many activations can still be running when the last marker appears."""
    return settings.dispatch.worker_concurrency * 2


async def _submit(runtime: Runtime, agent: AgentConfig, key: str) -> str:
    now = runtime.clock.now()
    event = Event(
        id=new_id(now),
        agent_id=agent.id,
        service="bench",
        channel="bench",
        speaker=Speaker(service="bench", channel="bench", speaker_id="u", display_name="U"),
        text=f"hello #{key}",
        received_at=now,
    )
    await runtime.store.save_event(event)
    _persisted[key] = time.perf_counter()
    await runtime.intake.enqueue_activation(agent.id, event.id)
    return event.id


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=300, help="events per configuration")
    parser.add_argument("--agents", default="1,10,100", help="comma-separated agent counts")
    parser.add_argument(
        "--polling", type=float, default=None, help="[dispatch] queue_polling_seconds (default: the config's)"
    )
    args = parser.parse_args()
    register_double("bench", _instant)
    rows: list[tuple[int, float, float, float, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for count in (int(a) for a in args.agents.split(",")):
            settings, agents = _settings(Path(tmp) / f"a{count}", count, args.polling)
            rate, cpu_ms, latencies = asyncio.run(_run(settings, agents, args.events))
            rows.append((count, rate, cpu_ms, statistics.median(latencies), _percentile(latencies, 0.99)))
    print(f"{'agents':>7} {'burst':>7} {'activations/s':>14} {'CPU ms/act':>11} {'p50 ms':>8} {'p99 ms':>8}")
    for count, rate, cpu_ms, p50, p99 in rows:
        print(f"{count:>7} {args.events:>7} {rate:>14.1f} {cpu_ms:>11.1f} {p50:>8.1f} {p99:>8.1f}")
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"p50/p99: event persisted -> first model request over {_SEQUENTIAL} events sent one at a time;\n"
        "activations/s: a burst spread over all agents; CPU ms/act: this process's CPU time (all\n"
        "threads) during the burst per activation, less sensitive than the rate to other load.\n"
        f"Embedded SQLite store, instant model double; {os.cpu_count()} CPUs, load average {load}."
    )


if __name__ == "__main__":
    main()
