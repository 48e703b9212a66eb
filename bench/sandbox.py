"""What a sandboxed command costs (SPEC §4.6; issue 19): per provider present on this machine,
the time to detect it (one `true` inside, as at start-up), a first command in a fresh workspace
(sandbox start + `python3 -c pass`), warm commands after it, and a file write through the
sandbox agent's `write_file` path (`cat` inside, the content on stdin). Every command starts a
new sandbox: there is no long-lived container to warm.

    uv run python bench/sandbox.py [--runs 20] [--network none|loopback|full]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Literal, cast

from persyn.core.config.sandbox import SandboxConfig
from persyn.tools.sandbox.isolation import detect_provider


async def _timed(work: Awaitable[object]) -> float:
    started = time.perf_counter()
    await work
    return (time.perf_counter() - started) * 1000


async def bench(provider_name: str, runs: int, network: str) -> list[str] | None:
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        choice = cast(Literal["bubblewrap", "runsc", "docker"], provider_name)
        config = SandboxConfig(provider=choice, network=network)
        started = time.perf_counter()
        detected = await detect_provider(config, root)
        detect_ms = (time.perf_counter() - started) * 1000
        provider = detected.provider
        if provider is None:
            print(f"{provider_name}: not available — {detected.summary}")
            return None
        first = await _timed(provider.run(root / "agent", "python3 -c pass"))
        warm = [await _timed(provider.run(root / "agent", "python3 -c pass")) for _ in range(runs)]
        shell = [await _timed(provider.run(root / "agent", "true")) for _ in range(runs)]
        payload = b"x = 1\n" * 2000
        writes = [
            await _timed(provider.run(root / "agent", "cat > script.py", stdin=payload)) for _ in range(runs)
        ]
        return [
            provider_name,
            network,
            f"{detect_ms:.0f}",
            f"{first:.0f}",
            f"{statistics.median(warm):.0f}",
            f"{statistics.median(shell):.0f}",
            f"{statistics.median(writes):.0f}",
        ]


async def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--network", default="none", choices=("none", "loopback", "full"))
    args = parser.parse_args()
    header = [
        "provider",
        "network",
        "detect ms",
        "first python3 ms",
        "python3 p50 ms",
        "true p50 ms",
        "write 12 KB p50 ms",
    ]
    rows = [
        row
        for name in ("bubblewrap", "runsc", "docker")
        if (row := await bench(name, args.runs, args.network))
    ]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))


if __name__ == "__main__":
    asyncio.run(main())
