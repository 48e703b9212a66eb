"""Messages per second one Discord adapter takes into the pipeline (issue 37's figure), with a
0 ms model (`test:instant`).

A `persyn.testing.discord.FakeDiscord` on loopback dispatches `--messages` MESSAGE_CREATEs over its
gateway, each a DM from its own channel (so no listening period merges them; pacing off), to a real
runtime on the embedded store with the adapter connected through its real client. Printed: the rate
at which events were stored (gateway → adapter → `submit`: the intake), and the rate at which
replies came back through REST (the whole turn, intake to delivery), both from the first dispatch.

    uv run python bench/discord_rate.py [--messages 200]

The machine is shared: compare runs back to back, not across days. Measured 2026-12-07 on the
shared 2-core VM (load ~11, other helpers' tests running), `--messages 100`: 7.0 msg/s stored,
6.9 msg/s answered — the adapter hands dispatches to `submit` one at a time, in order, and each
turn runs in the same process, so the figure is the pipeline's, not the gateway's.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from persyn.channels.discord.channel import DiscordChannel
from persyn.channels.discord.config import DiscordConfig
from persyn.core.clock import ManualClock
from persyn.testing.discord import TOKEN, FakeDiscord
from persyn.testing.harness import START, harness_settings, run_runtime


async def _run(messages: int) -> None:
    fake = FakeDiscord(bucket_limit=10_000)
    with tempfile.TemporaryDirectory() as home:
        async with fake:
            config = (
                f'[channels.discord]\nenabled = true\napi_url = "{fake.url}/api/v10"\n'
                f'gateway_url = "{fake.gateway_url}"\n'
                "[pacing.channels.discord]\nlisten_seconds = 0.0\nmin_interval_seconds = 0.0\n"
                "agent_min_interval_seconds = 0.0\njitter_seconds = 0.0\n"
            )
            settings = harness_settings(Path(home), model="test:instant", config=config)
            async with run_runtime(settings, clock=ManualClock(START)) as pilot:
                channel = DiscordChannel(
                    settings.channels.section(DiscordConfig), pilot.agent, pilot.runtime, token=TOKEN
                )
                await channel.start()
                await asyncio.wait_for(channel.ready.wait(), 60)
                stored = 0
                started = time.perf_counter()
                for n in range(messages):
                    fake.message(
                        f"message {n}",
                        author={"id": str(10_000 + n), "username": f"p{n}"},
                        channel_id=str(20_000 + n),
                    )
                intake_at = None
                while len(fake.sent) < messages:
                    if intake_at is None:
                        rows = await pilot.store.channel_messages(
                            pilot.agent.id, "discord", str(20_000 + messages - 1), 1
                        )
                        stored = len(rows)
                        if stored:
                            intake_at = time.perf_counter()
                    await asyncio.sleep(0.01)
                done = time.perf_counter()
                await channel.stop()
    intake = (intake_at or done) - started
    print(f"messages {messages}")
    print(f"intake (stored)        {messages / intake:8.1f} msg/s   ({intake:.2f} s)")
    print(f"answered (REST reply)  {messages / (done - started):8.1f} msg/s   ({done - started:.2f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=200)
    asyncio.run(_run(parser.parse_args().messages))


if __name__ == "__main__":
    main()
