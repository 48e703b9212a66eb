"""How many Slack messages per second the adapter hands into the pipeline (issue 37), with a
0 ms model (`test:instant`), against the local fake of Slack (`persyn.testing.slack`) over
real loopback HTTP and WebSocket, through the official slack-sdk clients.

A burst of `--messages` DMs from `--people` people is pushed as Socket Mode envelopes; the
table shows the rate at which they are stored as events (acknowledged, named by `users.info`,
submitted: the adapter's share) and the rate at which their replies come back through
`chat.postMessage` (the whole pipeline: turn, outbox, delivery). The runtime is the test
harness's (SQLite, DBOS, the gateway), as `persyn run` composes it.

    uv run python bench/slack_rate.py [--messages 200] [--people 10]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from persyn.channels.slack.channel import SlackChannel
from persyn.channels.slack.config import SlackConfig
from persyn.channels.slack.inbound import SLACK_SERVICE
from persyn.core.clock import ManualClock
from persyn.core.ids import derived_id
from persyn.testing.harness import START, harness_settings, run_runtime
from persyn.testing.slack import APP_TOKEN, BOT_TOKEN, FakeSlack, SlackUser

_PACING = (
    "[pacing.channels.slack]\nlisten_seconds = 0.0\nmin_interval_seconds = 0.0\n"
    "agent_min_interval_seconds = 0.0\njitter_seconds = 0.0\n"
)


async def _run(messages: int, people: int, home: Path) -> tuple[float, float]:
    fake = FakeSlack()
    fake.users |= {f"U{i:04d}": SlackUser(f"U{i:04d}", f"person{i}") for i in range(people)}
    await fake.start()
    config = f'[channels.slack]\nenabled = true\napi_url = "{fake.api_url}"\n{_PACING}'
    settings = harness_settings(home, model="test:instant", config=config)
    try:
        async with run_runtime(settings, clock=ManualClock(START)) as pilot:
            channel = SlackChannel(
                settings.channels.section(SlackConfig),
                pilot.agent,
                pilot.runtime,
                bot_token=BOT_TOKEN,
                app_token=APP_TOKEN,
            )
            await channel.start()
            await asyncio.wait_for(channel.ready.wait(), 60)
            payloads = [
                fake.message_event(
                    f"message {n}", user=f"U{n % people:04d}", channel=f"D{n % people:04d}", channel_type="im"
                )
                for n in range(messages)
            ]
            ids = [
                derived_id(
                    datetime.fromtimestamp(float(p["event"]["ts"]), UTC),
                    SLACK_SERVICE,
                    p["event"]["channel"],
                    p["event"]["ts"],
                )
                for p in payloads
            ]
            started = time.perf_counter()
            for payload in payloads:
                await fake.push(payload)
            pending = set(ids)
            while pending:
                pending = {i for i in pending if await pilot.runtime.get_event(pilot.agent.id, i) is None}
                await asyncio.sleep(0.01)
            stored = time.perf_counter() - started
            deadline = time.perf_counter() + 600
            # The fake's list of posts has no event to wait on: polled.
            while len(fake.posted) < messages and time.perf_counter() < deadline:  # noqa: ASYNC110
                await asyncio.sleep(0.02)
            answered = time.perf_counter() - started
            await channel.stop()
            if len(fake.posted) < messages:
                raise SystemExit(f"only {len(fake.posted)} of {messages} answered within 600 s")
            return messages / stored, messages / answered
    finally:
        await fake.stop()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--people", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        intake, answers = asyncio.run(_run(args.messages, args.people, Path(tmp) / "home"))
    print(f"| {args.messages} DMs from {args.people} people | messages/s |")
    print("|---|---|")
    print(f"| stored as events (the adapter's intake) | {intake:.1f} |")
    print(f"| answered through chat.postMessage (whole pipeline) | {answers:.1f} |")


if __name__ == "__main__":
    main()
