"""The web surface's own cost (issue 16): time to first streamed token over HTTP vs in-process,
and concurrent SSE clients held with one agent.

One process runs the real runtime (DBOS, SQLite, gateway, meter) with the web channel on
loopback, as `persyn run` does, and the `test:echo` double (0 ms: what is left is platform).

- time to first token: in-process, from `submit` to the first draft delta reaching a listener
  of the web channel; over HTTP, from sending `POST /v1/chat/completions` (stream) with httpx
  (on a thread of its own) to its first content chunk. Turns alternate; the difference of the
  p50s is the web surface's own cost (goal: ≤ 5 ms).
- SSE clients: a child process opens `--clients` streams on one agent's conversation; the
  server's resident memory is read before and after they connect, then one message is sent
  and the time until every client has it is measured (goal: 200 held).

    uv run python bench/web.py [--turns 30] [--clients 200]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import httpx

from persyn.core.config import AgentConfig, load_settings
from persyn.core.events import Event, Speaker
from persyn.core.ids import new_id
from persyn.ops.web_keys import create_key
from persyn.runtime.compose import build_runtime
from persyn.runtime.web_keys import authenticate, revoked_keys
from persyn.store.capabilities import capability
from persyn.store.ports.web_keys import WebKeysPort
from persyn.web.server import WebSurface

_CHILD = r"""
import asyncio, json, sys, time
import httpx

async def main(url, key, count):
    limits = httpx.Limits(max_connections=count + 10, max_keepalive_connections=count + 10)
    got = {}
    ready = asyncio.Event()
    opened = [0]
    async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(30, read=None)) as client:
        async def one(index):
            async with client.stream("GET", url, headers={"Authorization": "Bearer " + key}) as response:
                async for line in response.aiter_lines():
                    if line.startswith(": connected"):
                        opened[0] += 1
                        if opened[0] == count:
                            ready.set()
                    elif line.startswith("event: message"):
                        got[index] = time.time()
                        return
        tasks = [asyncio.ensure_future(one(i)) for i in range(count)]
        await asyncio.wait_for(ready.wait(), 120)
        print("ready", flush=True)
        await asyncio.wait_for(asyncio.gather(*tasks), 120)
    print(json.dumps(sorted(got.values())), flush=True)

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _http_first_token(url: str, key: str, text: str) -> float:
    body = {"model": "Ada", "messages": [{"role": "user", "content": text}], "stream": True}
    with httpx.Client(timeout=60) as client:
        started = time.perf_counter()
        with client.stream(
            "POST", url + "v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}
        ) as response:
            first: float | None = None
            for line in response.iter_lines():  # read to the end: the turn is over then
                content = line.startswith("data: ") and '"content": "' in line and '"content": ""' not in line
                if first is None and content:
                    first = time.perf_counter() - started
            if first is not None:
                return first
    raise RuntimeError("no content chunk")


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--clients", type=int, default=200)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="persyn-bench-web-"))
    (home / "persyn.toml").write_text(
        '[models]\ndefault = "test:echo"\n[web]\nenabled = true\nport = 0\n'
        "[conversation]\nextract_every_messages = 0\n"
    )
    settings = load_settings(home, environ={})
    agent = AgentConfig(name="Ada", id=new_id())
    settings = settings.model_copy(update={"agents": [agent]})
    key, secret = await create_key(settings, "bench", datetime.now(UTC))
    web = WebSurface(settings)
    runtime = build_runtime(settings, meter_adapters=[web.usage])
    await runtime.start(workers=True)
    url = await web.start(
        runtime,
        partial(authenticate, capability(runtime.store, WebKeysPort)),
        partial(revoked_keys, capability(runtime.store, WebKeysPort)),
        runtime.meter.flush,
    )
    speaker = Speaker(service="web", channel=key.id, speaker_id=f"{key.id}:inproc", display_name="in-process")
    await runtime.resolve_speaker(agent.id, speaker)
    local: list[float] = []
    remote: list[float] = []
    try:
        for index in range(args.turns + 2):  # the first two warm caches and the model up
            now = runtime.clock.now()
            event = Event(
                id=new_id(now), agent_id=agent.id, service="web", channel=key.id,
                speaker=speaker, text=f"hello number {index}", received_at=now,
            )  # fmt: skip
            listener = web.channel.wait_for(event.id, key.id)
            started = time.perf_counter()
            await runtime.submit(event)
            while True:
                item = await listener.queue.get()
                if item.type == "token" and item.data.get("kind") == "delta" and item.data.get("text"):
                    break
            first = time.perf_counter() - started
            await runtime.wait_marker(agent.id, event.id)
            web.channel.stop_waiting(event.id)
            over_http = await asyncio.to_thread(_http_first_token, url, secret, f"hello over http {index}")
            if index >= 2:
                local.append(first * 1000)
                remote.append(over_http * 1000)
        print(f"time to first streamed token, test:echo (0 ms model), {args.turns} turns each")
        print(f"{'':14} {'p50 ms':>8} {'p90 ms':>8}")
        print(f"{'in-process':14} {statistics.median(local):8.2f} {_p(local, 0.9):8.2f}")
        print(f"{'over HTTP':14} {statistics.median(remote):8.2f} {_p(remote, 0.9):8.2f}")
        print(f"difference p50: {statistics.median(remote) - statistics.median(local):.2f} ms (goal <= 5 ms)")

        before = _rss_kib()
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _CHILD,
            url + "v1/agents/Ada/stream",
            secret,
            str(args.clients),
            stdout=asyncio.subprocess.PIPE,
        )
        assert child.stdout is not None
        line = (await child.stdout.readline()).decode()
        if line.strip() != "ready":
            raise RuntimeError(f"the SSE clients did not connect: {line!r}")
        held = web.channel.stream_count
        after = _rss_kib()
        sent = time.time()
        async with httpx.AsyncClient(timeout=60) as client:
            posted = await client.post(
                url + "v1/agents/Ada/events", json={"text": "hello all"},
                headers={"Authorization": f"Bearer {secret}"},
            )  # fmt: skip
            posted.raise_for_status()
        received = json.loads(await child.stdout.readline())
        await asyncio.wait_for(child.wait(), 60)
        print(f"\nSSE clients on one agent: {held} held (goal 200), all {len(received)} got the reply")
        print(f"server memory: {before / 1024:.1f} MiB before, {after / 1024:.1f} MiB with them "
              f"({(after - before) / max(held, 1):.1f} KiB per client)")  # fmt: skip
        print(f"submit → last client has the reply: {(received[-1] - sent) * 1000:.1f} ms "
              f"(first: {(received[0] - sent) * 1000:.1f} ms)")  # fmt: skip
    finally:
        await web.stop()
        await runtime.stop()


if __name__ == "__main__":
    asyncio.run(main())
