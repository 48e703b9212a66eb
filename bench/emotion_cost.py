"""What the emotional state (SPEC §4.9) costs per answered turn, in metered tokens (issue 21).

Runs the same conversation through the real runtime (DBOS, SQLite, gateway, meter) with a model
double, once per setting, and prints the tokens metered per answered turn by stage:

- `off`: `[emotion] enabled = false` (the default before issue 21's stop 27);
- `every exchange`: on with `min_words = 0` (a reading after every answered message);
- `default`: on as shipped (trivially short exchanges skipped; a burst read once).

Every row critiques with the same lens (`constrained`), so the rows differ only by the
emotional state: its own calls and what it adds to other prompts (the trajectory in respond's,
the current state in decide's).

The conversation mixes small talk ("hi", "thanks!") with substantive messages, in the
proportion given by `--short` (one short exchange in every N). Token counts are the double's
(pydantic-ai's estimate from the text's words), so compare the rows, not the absolute figures
with a hosted model's. With `--burst`, messages are sent without waiting for the background
queue in between, so readings of earlier exchanges are still queued when later ones are answered.

    uv run python bench/emotion_cost.py [--turns 24] [--short 3] [--burst]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo

from persyn.testing import registered_double, run_runtime
from persyn.testing.models import DoubleReply, last_user_text, minimal_instance, output_schema

SUBSTANTIVE = [
    "I finally finished the garden shed this weekend, the roof took longer than I expected.",
    "Do you think I should plant tomatoes or peppers along the south fence this year?",
    "My sister visits next month and I want to cook something from her home town for her.",
    "The train was late again this morning and I missed the first half of the meeting.",
]
SHORT = ["hi", "thanks!", "ok", "cool"]
REPLY = (
    "That sounds like a real accomplishment, and I would like to hear more about how it went "
    "and what you plan to do next with it."
)


def double(task: str | None, messages: list[ModelMessage], info: AgentInfo) -> Any:
    said = last_user_text(messages)
    if task == "respond":
        return DoubleReply(text="Hello!" if len(said.split()) < 3 else REPLY)
    if task == "classify" and "say how you feel now" in (info.instructions or ""):
        return {"curious": 0.6, "engaged": 0.4}
    schema = output_schema(info)
    return DoubleReply(output=minimal_instance(schema)) if schema is not None else DoubleReply(text="ok")


async def run(config: str, turns: int, short_every: int, burst: bool) -> tuple[int, dict[str, float]]:
    with tempfile.TemporaryDirectory() as home:
        async with run_runtime(Path(home) / "home", model="test:cost", config=config) as pilot:
            answered = 0
            for n in range(turns):
                text = SHORT[n % len(SHORT)] if n % short_every == 0 else SUBSTANTIVE[n % len(SUBSTANTIVE)]
                turn = await pilot.say(text)
                answered += int(turn.marker.transmitted)
                if not burst:
                    await pilot.settle()
            await pilot.settle()
            by_stage: dict[str, float] = defaultdict(float)
            for record in pilot.usage():
                stage = (record.stage or "?").split(":")[0]  # critique:LENS → critique
                by_stage[stage] += record.input_tokens + record.output_tokens
            return answered, {stage: tokens / max(answered, 1) for stage, tokens in by_stage.items()}


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=24)
    parser.add_argument("--short", type=int, default=3, help="one short exchange in every N")
    parser.add_argument("--burst", action="store_true")
    args = parser.parse_args()
    lenses = '[deliberation]\nlenses = ["constrained"]\n'  # the same critics in every row
    settings = {
        "off": lenses + "[emotion]\nenabled = false\n",
        "every exchange": lenses + "[emotion]\nmin_words = 0\n",
        "default": lenses,
    }
    rows: list[tuple[str, int, dict[str, float]]] = []
    with registered_double("cost", double):
        for name, config in settings.items():
            answered, per_turn = await run(config, args.turns, args.short, args.burst)
            rows.append((name, answered, per_turn))
    stages = sorted({s for _, _, per_turn in rows for s in per_turn})
    print(
        f"load average {os.getloadavg()[0]:.2f}; {args.turns} turns, 1 in {args.short} short"
        f"{', burst' if args.burst else ''}; metered tokens per answered turn"
    )
    print(f"{'setting':<16}{'answered':>9}" + "".join(f"{s:>10}" for s in stages) + f"{'total':>9}")
    for name, answered, per_turn in rows:
        cells = "".join(f"{per_turn.get(s, 0.0):>10.1f}" for s in stages)
        print(f"{name:<16}{answered:>9}{cells}{sum(per_turn.values()):>9.1f}")


if __name__ == "__main__":
    asyncio.run(main())
