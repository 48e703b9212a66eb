"""Token cost of self-initiated runs and the budget arithmetic (issue 6 figures).

Runs heartbeat beats (half resting, half acting) and reminder runs through the real runtime
(DBOS, SQLite, gateway, meter) on a moved clock, with a model double that reports realistic
token counts for each stage (`--prompt-tokens`, `--reply-tokens`), and prints per kind: runs,
tokens per run as the budget counts them (the run's own model calls), and what
`[autonomy] daily_token_budget` and `heartbeat_minutes` allow per day.

    uv run python bench/autonomy.py [--runs 6] [--prompt-tokens 2500] [--reply-tokens 150]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo

from persyn.cognition.reflection import SelfAssessment
from persyn.core.clock import ManualClock
from persyn.core.config import AgentConfig, load_settings
from persyn.core.ids import new_id
from persyn.gateway.base import TokenUsage
from persyn.runtime.app import Runtime
from persyn.runtime.background.autonomy import recent_activity
from persyn.runtime.compose import build_runtime
from persyn.schedule import interval_trigger, set_reminder
from persyn.store.capabilities import FullStore, require_capability
from persyn.testing.models import DoubleReply, minimal_instance, output_schema, register_double

START = datetime(2026, 11, 30, 0, tzinfo=UTC)


class Costly:
    def __init__(self, prompt: int, reply: int) -> None:
        self.usage = TokenUsage(input_tokens=prompt, output_tokens=reply)
        self.beats = 0

    def __call__(self, task: str | None, messages: list[ModelMessage], info: AgentInfo) -> Any:
        if task == "reflect":
            self.beats += 1
            intention = "rest" if self.beats % 2 else "pursue_goal"
            assessment = SelfAssessment(
                patterns="steady",
                serves_objectives=True,
                intention=intention,
                plan="a next step",  # type: ignore[arg-type]
            )
            return DoubleReply(output=assessment, usage=self.usage)
        schema = output_schema(info)
        if schema is not None:  # consolidation of the run's conversation (background)
            return DoubleReply(output=minimal_instance(schema), usage=self.usage)
        return DoubleReply(text="Done: a small next step.", usage=self.usage)


async def _settle(runtime: Runtime, agent_id: str, runs: int) -> None:
    """Until the fired runs are logged and their workflows have finished (bounded)."""
    for _ in range(3000):
        logged = (
            len(await recent_activity(require_capability(runtime.store, FullStore), agent_id, limit=1000))
            >= runs
        )
        if logged and not await runtime.intake.busy(agent_id):
            return
        await asyncio.sleep(0.02)
    raise TimeoutError("self-initiated runs did not finish")


async def _measure(runs: int, prompt: int, reply: int) -> None:
    register_double("bench-autonomy", Costly(prompt, reply), replace=True)
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        (home / "persyn.toml").write_text(
            '[models]\ndefault = "test:bench-autonomy"\n[metering]\nevent_log = false\n'
            '[memory]\nembedder = "test:hash"\n[deliberation]\nenabled = false\n'
            "[conversation]\nextract_every_messages = 0\n"
            "[autonomy]\nheartbeat_minutes = 60\nmax_runs_per_hour = 100\ndaily_token_budget = 100000000\n"
        )
        agent = AgentConfig(name="Ada", id=new_id(START))
        settings = load_settings(home, environ={}).model_copy(update={"agents": [agent]})
        clock = ManualClock(START)
        runtime = build_runtime(settings, clock=clock)
        await runtime.start(workers=True)
        try:
            await set_reminder(
                require_capability(runtime.store, FullStore),
                agent.id,
                "check the plan",
                interval_trigger(3600, START + timedelta(minutes=30)),
                START,
            )
            for _ in range(runs):
                for minutes in (31, 30):  # the reminder, then the heartbeat
                    clock.advance(timedelta(minutes=minutes) if minutes == 31 else timedelta(minutes=29))
                    before = len(
                        await recent_activity(
                            require_capability(runtime.store, FullStore), agent.id, limit=1000
                        )
                    )
                    fired = await runtime.autonomy.fire_due()
                    await _settle(runtime, agent.id, before + fired)
            entries = await recent_activity(
                require_capability(runtime.store, FullStore), agent.id, limit=1000
            )
        finally:
            await runtime.stop()
    budget = settings.autonomy.daily_token_budget
    default_budget = type(settings.autonomy)().daily_token_budget
    beats_per_day = 24 * 60 / settings.autonomy.heartbeat_minutes
    print(f"model double: {prompt} prompt + {reply} reply tokens per call")
    print(f"{'kind':<22}{'runs':>6}{'tokens/run p50':>16}{'max':>8}")
    rows: dict[str, list[int]] = {}
    for entry in entries:
        label = entry.kind
        if entry.kind == "heartbeat":
            label = (
                "heartbeat (rest)"
                if entry.outcome.startswith(f"{agent.name} chose silence")
                else "heartbeat (act)"
            )
        rows.setdefault(label, []).append(entry.tokens)
    for label, tokens in sorted(rows.items()):
        print(f"{label:<22}{len(tokens):>6}{statistics.median(tokens):>16.0f}{max(tokens):>8}")
    acting = statistics.median(rows.get("heartbeat (act)", [0]))
    resting = statistics.median(rows.get("heartbeat (rest)", [0]))
    worst = beats_per_day * max(acting, resting)
    print(
        f"budget: {beats_per_day:.0f} beats/day cost at most {worst:,.0f} tokens if every beat acts "
        f"({beats_per_day * resting:,.0f} if all rest); the default daily_token_budget of "
        f"{default_budget:,} allows {default_budget / max(1, acting):,.0f} acting beats or reminder runs a day "
        f"(this run used a budget of {budget:,})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=6, help="reminder runs and heartbeat beats each")
    parser.add_argument("--prompt-tokens", type=int, default=2500)
    parser.add_argument("--reply-tokens", type=int, default=150)
    args = parser.parse_args()
    asyncio.run(_measure(args.runs, args.prompt_tokens, args.reply_tokens))


if __name__ == "__main__":
    main()
