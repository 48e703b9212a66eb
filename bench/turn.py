"""Time to transmit a turn, inline vs deferred deliberation, and platform overhead (issue 4).

Runs turns through the real runtime (DBOS, SQLite, gateway, meter, memory retrieval over
`--memories` synthetic records made as `bench/memory_scale.py` makes them, over ten channels) with an in-process model double that sleeps a fixed time per
call. Every reply is substantive, so each turn is critiqued:

- inline: respond → critique (provenance + one lens, concurrently) → refine → decide → send
- deferred: respond, with the decision on the input made beside it → send; critique and
  refine run afterwards in the background

Prints, per mode, the time from submit to the completion marker (p50/p99), the model calls
on the critical path, and the platform overhead = that time minus the model time on the
critical path (measured inside the double, so it excludes only time actually spent "in the
model"). The overhead figure also comes from a run with a 0 ms model.

A second table says where that overhead goes: the CPU each group of threads used from
submit to marker (a turn is CPU-bound: the process's CPU time over a turn is about its
overhead). DBOS runs its system-database calls (a step's check and record, workflow status)
on its executor threads and its queue claims on its queue workers; Persyn's store has
threads of its own; the event loop runs the pipeline, the gateway and DBOS's orchestration.

    uv run python bench/turn.py [--turns 30] [--model-ms 300] [--memories 10000] [--tracing]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import resource
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from persyn.cognition.deliberation import Critique, Decision, Objection
from persyn.core.config import AgentConfig, load_settings
from persyn.core.events import Event, Speaker
from persyn.core.ids import new_id
from persyn.core.records import channel_key
from persyn.runtime.app import Runtime
from persyn.runtime.compose import build_runtime
from persyn.store.capabilities import FullStore, require_capability
from persyn.testing import register_double
from persyn.testing.models import DoubleReply, feelings, last_user_text

sys.path.insert(0, str(Path(__file__).parent))
from memory_scale import CHANNELS
from memory_scale import _records as scale_records  # pyright: ignore[reportPrivateUsage]


class _Model:
    """Sleeps `delay` per call; records which event each call served and when it ran."""

    def __init__(self) -> None:
        self.delay = 0.3
        # Per event: (task, start, end) of each call that returned; `started` counts every
        # call begun, a cancelled one too (a provider may bill what it had read).
        self.time_by_event: dict[str, list[tuple[str | None, float, float]]] = {}
        self.started: dict[str, int] = {}
        self.critic_objects = True

    async def __call__(self, task: str | None, messages: Any, info: Any) -> Any:
        started = time.perf_counter()
        # Which turn a call served, from what it was shown (background calls of an earlier
        # turn can overlap the next one).
        shown = (info.instructions or "") + " ".join(
            str(getattr(part, "content", "")) for message in messages for part in message.parts
        )
        labels = [label for label in _TURN.findall(shown) if label in _turn_events]
        key = _turn_events[max(labels, key=list(_turn_events).index)] if labels else None
        if key is not None:
            self.started[key] = self.started.get(key, 0) + 1
        await asyncio.sleep(self.delay)
        if task == "critique":
            objections = [Objection(kind="unsupported", span="surely", explanation="no grounds given")]
            result: Any = Critique(objections=tuple(objections) if self.critic_objects else ())
        elif task == "decide":
            result = Decision(action="speak", reason="it answers the question")
        elif task == "classify":  # the emotion reading: a distribution over its categories
            result = feelings(info)
        elif task == "refine":
            result = DoubleReply(text="I think the garden plan could work, though I am not certain.")
        elif "briefly" in last_user_text(messages):
            result = DoubleReply(text="Sounds good.")
        else:
            result = DoubleReply(text="Surely the garden plan will work out well, as we discussed last week.")
        if key is not None:
            self.time_by_event.setdefault(key, []).append((task, started, time.perf_counter()))
        return result

    def critical_path(self, event_id: str) -> float:
        """Model seconds a turn waited for: the length of the union of its calls' intervals
        (concurrent calls, the critics or a decision made while the draft is written, count
        once)."""
        total, reach = 0.0, float("-inf")
        for _task, start, end in sorted(self.time_by_event.get(event_id, []), key=lambda c: c[1]):
            if end > reach:
                total += end - max(start, reach)
                reach = end
        return total


_turn_events: dict[str, str] = {}  # turn label -> event id, in the order the turns ran
_TURN = re.compile(r"garden plan, turn (\w+)\?")
_MODEL = _Model()

# The kinds of turn whose model calls the second table counts (deferred mode): whether the
# input and the reply are substantive (SPEC: only substantive replies are decided by a model).
# No digits in these (a number is substantive); the turn label is letters.
_KINDS = (
    ("substantive input, substantive reply", "What will we plant in the garden plan, turn {label}?"),
    ("substantive input, short reply", "What will we plant, briefly, in the garden plan, turn {label}?"),
    ("plain input, short reply", "Nice, briefly: garden plan, turn {label}?"),
    ("plain input, substantive reply", "Nice garden plan, turn {label}?"),
)


# Thread-name prefixes (DBOS 3.4 and ours) -> the group a thread's CPU counts to.
_THREAD_GROUPS = (
    ("MainThread", "event loop"),
    ("dbos-executor", "DBOS db calls"),
    ("queue-worker", "DBOS claims"),
    ("persyn-sqlite", "store"),
)
GROUPS = (*(group for _, group in _THREAD_GROUPS), "other")
# The process's rusage over a turn (kept beside the groups, not summed with them): user and
# kernel CPU, the context switches (voluntary: a thread blocked; involuntary: preempted) and
# the minor page faults (memory the process touched for the first time: kernel time).
_RUSAGE_FIELDS = (
    ("user ms", "ru_utime"),
    ("sys ms", "ru_stime"),
    ("voluntary cs", "ru_nvcsw"),
    ("involuntary cs", "ru_nivcsw"),
    ("page faults", "ru_minflt"),
)


def _thread_cpu() -> dict[str, float]:
    """CPU seconds used so far by the live threads of this process, by group."""
    used = dict.fromkeys(GROUPS, 0.0)
    for thread in threading.enumerate():
        if thread.ident is None:
            continue
        try:
            seconds = time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
        except (OSError, ValueError):  # it ended meanwhile
            continue
        group = next((g for prefix, g in _THREAD_GROUPS if thread.name.startswith(prefix)), "other")
        used[group] += seconds
    return used


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _seed_memories(runtime: Runtime, agent: AgentConfig, count: int, person_id: str) -> None:
    """`count` records as `bench/memory_scale.py` makes them (Zipf-distributed words, ten
    channels, a year of history); the channel this bench talks on is one of the ten, and the
    speaker is a participant of the records made there."""
    assert runtime.embedder is not None
    here = channel_key("bench", "bench")
    records = [
        r.model_copy(update={"channel": here, "participant_ids": (person_id, *r.participant_ids[1:])})
        if r.channel == CHANNELS[-1]
        else r
        for r in scale_records(agent.id, count)
    ]
    for offset in range(0, len(records), 2048):
        batch = records[offset : offset + 2048]
        vectors = await runtime.embedder.embed([r.summary for r in batch])
        await require_capability(runtime.store, FullStore).add_records(batch, vectors, runtime.embedder.name)


_TRACING = {"on": False}  # --tracing: [tracing] enabled, local span files, metadata only


def _home(home: Path, mode: str) -> Path:
    home.mkdir(parents=True)
    (home / "persyn.toml").write_text(
        '[models]\ndefault = "test:bench-turn"\n[metering]\nevent_log = false\n'
        f'[deliberation]\nmode = "{mode}"\nseed = 1\n'
        # Background extraction every few messages is off the critical path, not a turn's cost.
        "[conversation]\nextract_every_messages = 0\n"
        + ('[tracing]\nenabled = true\nexporters = ["local"]\n' if _TRACING["on"] else "")
    )
    return home


async def _run(
    home: Path, turns: int, memories: int, kind: str | None = None
) -> tuple[list[float], list[float], float, dict[str, float], float]:
    settings = load_settings(home, environ={})
    agent = AgentConfig(name="Ada", id=new_id())
    settings = settings.model_copy(update={"agents": [agent]})
    runtime = build_runtime(settings)
    await runtime.start(workers=True)
    speaker = Speaker(service="bench", channel="bench", speaker_id="u", display_name="Uma")
    person_id, _ = await runtime.resolve_speaker(agent.id, speaker)
    await _seed_memories(runtime, agent, memories, person_id)
    totals: list[float] = []
    overheads: list[float] = []
    calls: list[int] = []
    started_calls: list[int] = []
    template = dict(_KINDS).get(kind or "", "What do you think about the garden plan, turn {label}?")
    cpu = dict.fromkeys(GROUPS, 0.0)
    try:
        for index in range(turns + 2):  # the first two warm caches and the model up
            now = runtime.clock.now()
            event = Event(
                id=new_id(now),
                agent_id=agent.id,
                service="bench",
                channel="bench",
                speaker=speaker,
                text=template.format(label=_label(index) if kind else str(index)),
                received_at=now,
            )
            _turn_events[_label(index) if kind else str(index)] = event.id
            before = _thread_cpu()
            usage_before = resource.getrusage(resource.RUSAGE_SELF)
            started = time.perf_counter()
            await runtime.submit(event)
            await runtime.wait_marker(agent.id, event.id, timeout=120)
            elapsed = time.perf_counter() - started
            after = _thread_cpu()
            usage_after = resource.getrusage(resource.RUSAGE_SELF)
            # Only the calls on the critical path: background ones land after the marker.
            model_time = _MODEL.critical_path(event.id)
            if index >= 2:
                calls.append(len(_MODEL.time_by_event.get(event.id, [])))
                started_calls.append(_MODEL.started.get(event.id, 0))
                totals.append(elapsed * 1000)
                overheads.append((elapsed - model_time) * 1000)
                for group in GROUPS:
                    cpu[group] += (after[group] - before[group]) * 1000 / turns
                for name, field in _RUSAGE_FIELDS:
                    scale = 1000 if name.endswith("ms") else 1
                    delta = getattr(usage_after, field) - getattr(usage_before, field)
                    cpu[name] = cpu.get(name, 0.0) + delta * scale / turns
            # Let deferred deliberation finish before the next turn, as a person would pause.
            await asyncio.sleep(_MODEL.delay * 3 + 0.05)
    finally:
        await runtime.stop()
    return totals, overheads, statistics.mean(calls), cpu, statistics.mean(started_calls)


def _label(index: int) -> str:
    """A turn label without digits (a number would make any input substantive)."""
    label = ""
    index += 1
    while index:
        index, digit = divmod(index - 1, 26)
        label = chr(ord("a") + digit) + label
    return label


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=30, help="measured turns per configuration")
    parser.add_argument("--model-ms", type=float, default=300.0, help="sleep per model call")
    parser.add_argument("--kind-turns", type=int, default=5, help="measured turns per kind of turn")
    parser.add_argument("--memories", type=int, default=10_000, help="synthetic memories in the store")
    parser.add_argument("--tracing", action="store_true", help="with [tracing] enabled (local spans)")
    args = parser.parse_args()
    _TRACING["on"] = args.tracing
    register_double("bench-turn", _MODEL)
    rows: list[tuple[str, float, float, float, float, float, float]] = []
    cpu_rows: list[tuple[str, float, dict[str, float]]] = []
    kind_rows: list[tuple[str, float, float, float, float, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for delay in dict.fromkeys((args.model_ms / 1000, 0.0)):  # --model-ms 0: once
            _MODEL.delay = delay
            for mode in ("inline", "deferred"):
                _MODEL.time_by_event.clear()
                _turn_events.clear()
                totals, overheads, calls, cpu, _started = asyncio.run(
                    _run(_home(Path(tmp) / f"{mode}-{int(delay * 1000)}", mode), args.turns, args.memories)
                )
                rows.append(
                    (
                        mode,
                        delay * 1000,
                        calls,
                        statistics.median(totals),
                        _percentile(totals, 0.99),
                        statistics.median(overheads),
                        _percentile(overheads, 0.99),
                    )
                )
                cpu_rows.append((mode, delay * 1000, cpu))
        _MODEL.delay = args.model_ms / 1000
        for kind, _text in _KINDS:
            _MODEL.time_by_event.clear()
            _turn_events.clear()
            totals, overheads, calls, _cpu, started = asyncio.run(
                _run(
                    _home(Path(tmp) / f"kind-{len(kind_rows)}", "deferred"),
                    args.kind_turns,
                    args.memories,
                    kind,
                )
            )
            # Model time on the critical path, in model calls (the target: <= 1.15).
            waited = [
                (total - overhead) / args.model_ms for total, overhead in zip(totals, overheads, strict=True)
            ]
            kind_rows.append(
                (kind, calls, started, statistics.median(totals), statistics.median(waited), max(waited))
            )
    print(f"memories: {args.memories}, turns: {args.turns} per row, every reply substantive")
    print(
        f"{'mode':>9} {'model ms':>9} {'calls':>6} {'transmit p50':>13} {'p99':>8} "
        f"{'overhead p50':>13} {'p99':>8}"
    )
    for mode, delay, calls, p50, p99, o50, o99 in rows:
        print(f"{mode:>9} {delay:>9.0f} {calls:>6.1f} {p50:>13.1f} {p99:>8.1f} {o50:>13.1f} {o99:>8.1f}")
    print(
        "transmit: submit -> completion marker (ms); calls: model calls before it. overhead: that\n"
        "minus the model time on the critical path (the union of the calls' intervals: inline,\n"
        "respond, 2 concurrent critics, refine, decide; deferred, respond with the decision on\n"
        "the input beside it).\n"
    )
    print(f"{'mode':>9} {'model ms':>9} {'CPU':>6} " + " ".join(f"{group:>14}" for group in GROUPS))
    for mode, delay, cpu in cpu_rows:
        print(
            f"{mode:>9} {delay:>9.0f} {sum(cpu[group] for group in GROUPS):>6.1f} "
            + " ".join(f"{cpu[group]:>14.1f}" for group in GROUPS)
        )
    print()
    print(f"{'mode':>9} {'model ms':>9} " + " ".join(f"{name:>14}" for name, _ in _RUSAGE_FIELDS))
    for mode, delay, cpu in cpu_rows:
        print(
            f"{mode:>9} {delay:>9.0f} "
            + " ".join(f"{cpu.get(name, 0.0):>14.1f}" for name, _ in _RUSAGE_FIELDS)
        )
    print(
        "CPU: mean ms per turn from submit to marker, all threads, split by thread group. DBOS's\n"
        "share (db calls + claims, plus its orchestration inside the event loop's figure) is the\n"
        "floor `bench/dbos_floor.py` measures without Persyn. Second table: the process's rusage\n"
        "per turn (`getrusage`): user and kernel (sys) CPU, context switches, minor page faults.\n"
    )
    print(f"deferred, {args.model_ms:.0f} ms model: model calls per turn by kind of turn")
    print(
        f"{'turn':>38} {'calls':>6} {'begun':>6} {'transmit p50':>13} {'x call':>7} {'waited p50':>11} {'max':>6}"
    )
    for kind, calls, started, p50, waited, most in kind_rows:
        print(
            f"{kind:>38} {calls:>6.1f} {started:>6.1f} {p50:>13.1f} {p50 / args.model_ms:>7.2f} "
            f"{waited:>11.2f} {most:>6.2f}"
        )
    print(
        "calls: model calls that returned before the marker; begun: calls started for the turn\n"
        "(a decision cancelled when the draft came back short and plain counts here only).\n"
        "x call: transmit p50 over one model call (the issue's <= 1.15: platform overhead included).\n"
        "waited: model time on the turn's critical path (the union of its calls' intervals) in\n"
        "model calls: 1.00 = one call; two calls in a row = 2.00."
    )


if __name__ == "__main__":
    main()
