"""Two agents left alone, and the first reply in a room (issue 18 figures).

1. Two agents of one deployment talk directly (the agent link), each with a model double that
   always replies with something new, under the default pacing (or `--pacing` TOML). Printed:
   messages until they stop, exchanges (pairs), the tokens the reply ledger counted, the model
   tokens metered (input + output of every call, deliberation and background work included),
   the simulated time the pacing spread them over (a moved clock runs fast), the wall time,
   and which safeguard ended it. Goal: stops within 10 exchanges and 5,000 ledger tokens.
2. Time to the first reply in a room: one agent on a paced service (`irc`) with the system
   clock, a person's addressed message → the reply delivered; with the default listening
   period and with none, so the share of the listening period shows.

    uv run python bench/agents.py [--runs 3] [--pacing '[pacing]\nmax_agent_turns = 4']
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from persyn.channels.agents.link import AGENT_SERVICE, AgentLink
from persyn.core.clock import ManualClock, SystemClock
from persyn.store.base import Role
from persyn.store.ports.runs import SpendKind
from persyn.testing.harness import ADA, START, Pilot, RecordingChannel, harness_settings, run_runtime
from persyn.testing.models import register_double
from persyn.testing.pacing import BOB, chatty, ticking


async def two_agents(pacing: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        settings = harness_settings(
            Path(tmp) / "home",
            model="test:bench-chatty",
            config="[conversation]\nextract_every_messages = 0\n" + pacing,
        )
        settings = settings.model_copy(update={"agents": [ADA, BOB]})
        clock = ManualClock(START)
        async with run_runtime(settings, clock=clock) as pilot:
            link = AgentLink({ADA.id: ADA, BOB.id: BOB}, pilot.runtime)
            await link.start()
            turn = await pilot.say("Ada, say hello to Bob")
            bob = next(p for p in await pilot.full_store.list_persons(ADA.id) if p.kind == "agent")
            before = len(pilot.usage())
            began_sim, began = clock.now(), time.perf_counter()
            async with ticking(clock):
                await pilot.runtime.outreach.send_to_contact(
                    ADA.id,
                    turn.event.id,
                    bob.id,
                    AGENT_SERVICE,
                    BOB.id,
                    "Hello Bob, what are you thinking about?",
                )
                await pilot.settle()
            wall = time.perf_counter() - began
            said = await pilot.store.channel_messages(ADA.id, AGENT_SERVICE, BOB.id, 500)
            since = clock.now() - timedelta(hours=24)
            ledger = 0
            for me, other in ((ADA.id, BOB.id), (BOB.id, ADA.id)):
                ledger += await pilot.store.channel_spent(me, SpendKind.REPLIED, AGENT_SERVICE, other, since)
                ledger += await pilot.store.channel_spent(me, SpendKind.SENT, AGENT_SERVICE, other, since)
            usage = pilot.usage()[before:]
            metered = sum(r.input_tokens + r.output_tokens for r in usage)
            generated = sum(r.output_tokens for r in usage)
            ended = await _why_it_ended(pilot, said)
            await link.stop()
            return {
                "messages": len(said),
                "exchanges": len(said) / 2,
                "ledger_tokens": ledger,
                "generated_tokens": generated,
                "metered_tokens": metered,
                "simulated": (said[-1].created_at - began_sim) if said else timedelta(0),
                "wall_s": wall,
                "ended_by": ended,
            }


async def _why_it_ended(pilot: Pilot, said: list[Any]) -> str:
    reasons: list[str] = []
    for me, other in ((ADA.id, BOB.id), (BOB.id, ADA.id)):
        mine = await pilot.store.channel_messages(me, AGENT_SERVICE, other, 500)
        ids = [m.event_id for m in mine if m.role is Role.USER and m.event_id]
        for trace in await pilot.store.deliberation_traces(me, ids):
            decision = trace.trace.get("decision") or {}
            if decision.get("action") == "silent":
                reasons.append(str(decision.get("reason")))
    return reasons[-1][:90] if reasons else "(nothing recorded)"


async def first_reply(listen: float | None, runs: int) -> list[float]:
    """Seconds from a person's addressed message in a room to the delivered reply."""
    timings: list[float] = []
    config = "" if listen is None else f"[pacing.channels.irc]\nlisten_seconds = {listen}\n"
    with tempfile.TemporaryDirectory() as tmp:
        room = RecordingChannel("irc")
        settings = harness_settings(Path(tmp) / "home", model="test:echo", config=config)
        async with run_runtime(settings, clock=SystemClock(), channels={"irc": room}) as pilot:
            for n in range(runs):
                event = pilot.event(f"Ada, question {n}?", service="irc", channel=f"#room{n}")
                began = time.perf_counter()
                await pilot.runtime.submit(event)
                await pilot.wait_for(_delivered(room, n + 1), "the reply")  # polled every 20 ms
                timings.append(time.perf_counter() - began)
    return timings


def _delivered(room: RecordingChannel, count: int) -> Callable[[], Awaitable[bool]]:
    async def delivered() -> bool:
        return len(room.delivered) >= count

    return delivered


async def main(runs: int, pacing: str) -> None:
    register_double(
        "bench-chatty", chatty("idea", words=12, lead="Here is another thought, number {n}: "), replace=True
    )
    result = await two_agents(pacing)
    print("two agents left alone (agent link, default pacing" + (" + --pacing" if pacing else "") + ")")
    print(
        "| messages | exchanges | ledger tokens | generated tokens | metered tokens | simulated | wall s | ended by |"
    )
    print("|---|---|---|---|---|---|---|---|")
    print(
        f"| {result['messages']} | {result['exchanges']:g} | {result['ledger_tokens']} | "
        f"{result['generated_tokens']} | {result['metered_tokens']} | {result['simulated']} | "
        f"{result['wall_s']:.1f} | {result['ended_by']} |"
    )
    print()
    print(f"time to first reply in a room (paced service, system clock, {runs} runs)")
    print("| listening period | p50 s | max s |")
    print("|---|---|---|")
    for label, listen in (("default (3 s)", None), ("none (the jitter, up to 2 s, remains)", 0.0)):
        timings = await first_reply(listen, runs)
        print(f"| {label} | {statistics.median(timings):.2f} | {max(timings):.2f} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3, help="samples of the first reply in a room")
    parser.add_argument(
        "--pacing", default="", help="TOML merged into the settings, e.g. '[pacing]\\nmax_agent_turns = 4'"
    )
    args = parser.parse_args()
    asyncio.run(main(args.runs, args.pacing.replace("\\n", "\n")))
