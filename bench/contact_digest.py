"""How long `persyn contacts show` takes as a contact's history grows (SPEC App. B: the
digest stays bounded "regardless of how much history a long-known contact has accumulated").

For each history size, stores that many conversations with one contact (each with its
consolidated memory) plus as many with other people, then times the digest the CLI prints
(`ops.history.contact`: opening the store, the participant index walk, the summaries)
and the index walk alone (`Store.person_conversations`).

    uv run python bench/contact_digest.py [--sizes 100,1000,10000] [--repeat 20]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from persyn.core.config import AgentConfig, load_settings
from persyn.core.ids import new_id
from persyn.core.records import MemoryRecord, channel_key
from persyn.ops.history import contact
from persyn.store import Identity, open_store
from persyn.store.capabilities import FullStore

_START = datetime(2020, 1, 1, tzinfo=UTC)


async def _fill(store: FullStore, agent_id: str, person_id: str, size: int) -> None:
    records: list[MemoryRecord] = []
    for n in range(2 * size):  # the contact's conversations interleaved with strangers'
        when = _START + timedelta(minutes=n)
        who = person_id if n % 2 == 0 else new_id(when)
        talk = await store.open_conversation(agent_id, "slack", f"room-{n}", [who], when, 60)
        records.append(
            MemoryRecord(
                id=new_id(when),
                agent_id=agent_id,
                created_at=when,
                channel=channel_key("slack", f"room-{n}"),
                participant_ids=(who,),
                summary=f"conversation {n}",
                conversation_id=talk.id,
            )
        )
    await store.add_records(records, None, None)


async def _measure(size: int, repeat: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        (home / "persyn.toml").write_text('[models]\ndefault = "test:echo"\n')
        agent = AgentConfig(name="bench", id=new_id())
        settings = load_settings(home, environ={}).model_copy(update={"agents": [agent]})
        store = open_store(settings.database_url)
        await store.setup()
        try:
            identity = Identity(service="slack", channel="general", speaker_id="U1")
            person = await store.resolve_person(agent.id, identity, "Sam", "human", _START)
            await _fill(store, agent.id, person.id, size)
            walks: list[float] = []
            for _ in range(repeat):
                began = time.perf_counter()
                await store.person_conversations(agent.id, person.id, 5)
                walks.append(time.perf_counter() - began)
        finally:
            await store.close()
        digest = await contact(settings, agent, person.id)
        digests: list[float] = []
        for _ in range(repeat):
            began = time.perf_counter()
            await contact(settings, agent, person.id)
            digests.append(time.perf_counter() - began)
        assert [summary for _, summary in digest.conversations] == [
            f"conversation {n}" for n in range(2 * size - 2, 2 * size - 12, -2)
        ]
    return statistics.median(walks) * 1000, statistics.median(digests) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="100,1000,10000", help="the contact's conversations, per run")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    print(f"{'contact convs':>13} {'all convs':>10} {'index walk ms':>14} {'contacts show ms':>17}")
    for size in (int(s) for s in args.sizes.split(",")):
        walk, digest = asyncio.run(_measure(size, args.repeat))
        print(f"{size:>13} {2 * size:>10} {walk:>14.2f} {digest:>17.2f}")


if __name__ == "__main__":
    main()
