"""Background model calls are attributed to the exchange they serve (SPEC App. C): the
consolidation, observations and graph extraction of a conversation carry its channel and
surface, not `(none)`; and the counters' model tier is strong or cheap, as configured."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from persyn.testing import run_runtime

_CONFIG = (
    "[conversation]\nextract_every_messages = 2\n"
    '[models]\ntiers = { "test:echo" = "cheap" }\n'
    'respond = "test:instant"\n'
)


async def test_background_calls_carry_the_channel_and_surface_of_their_conversation(tmp_path: Path) -> None:
    async with run_runtime(tmp_path / "home", config=_CONFIG) as pilot:
        await pilot.say("I moved to Lisbon last spring and I work on boats now.", channel="harbour")
        await pilot.say("My sister Ines visits every summer.", channel="harbour")
        await pilot.settle()  # incremental extraction ran on the background queue
        assert await pilot.close_idle(timedelta(hours=2)) == 1
        await pilot.settle()  # consolidation, observations and the graph on close
        records = pilot.usage()
    background = [r for r in records if r.stage not in ("respond", "decide", "refine")]
    stages = {r.stage for r in background}
    assert {"summarize", "extract", "graph"} <= stages, stages
    assert [
        (r.stage, r.surface, r.channel) for r in background if (r.surface, r.channel) != ("test", "harbour")
    ] == []
    # The tier label: configured for test:echo, inferred (unknown: strong) for test:instant.
    assert {r.tier for r in records if r.model == "test:echo"} == {"cheap"}
    assert {r.tier for r in records if r.model == "test:instant"} == {"strong"}
