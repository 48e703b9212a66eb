"""Switching the encoder: `persyn memory reindex` re-embeds what another model embedded,
newest first, in batches; an interrupted run resumes where it stopped; and no ranking ever
compares a query with vectors of another model (both backends)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from persyn.core.config import AgentConfig, MemoryConfig
from persyn.core.ids import new_id
from persyn.core.records import MemoryRecord
from persyn.memory.embedder import MiniLMEmbedder, WordLlamaEmbedder
from persyn.memory.retrieval import Retriever
from persyn.ops.memory import MemoryOps
from persyn.store import open_store
from persyn.testing import harness_settings

NOW = datetime(2026, 3, 10, tzinfo=UTC)
CHANNEL = "terminal:terminal"
TOPICS = [
    "Sam baked rye bread with caraway seeds",
    "Sam fixed the puncture on his bicycle",
    "Sam read a novel about a lighthouse keeper",
    "Sam planted tomatoes on the balcony",
    "Sam went swimming in the cold lake",
    "Sam learned three chords on the guitar",
    "Sam painted the kitchen a pale green",
    "Sam adopted a grey cat from the shelter",
    "Sam ran a half marathon in the rain",
    "Sam cooked a curry for his neighbours",
]


class Interrupted(Exception):
    """Stands for the process being stopped between two batches."""


async def test_an_interrupted_reindex_resumes_and_never_mixes_models(store_url: str, tmp_path: Path) -> None:
    old, new = WordLlamaEmbedder(), MiniLMEmbedder()
    agent = AgentConfig(name="Ada", id=new_id(NOW))
    settings = harness_settings(tmp_path / "home", agent=agent)
    store = open_store(store_url)
    await store.setup()
    try:
        await store.ensure_agent(agent.id, agent.name, NOW)
        records: list[MemoryRecord] = []
        for index, text in enumerate(TOPICS):
            when = NOW - timedelta(days=len(TOPICS) - index)  # the last topic is the newest
            record = MemoryRecord(
                id=new_id(when), agent_id=agent.id, channel=CHANNEL, summary=text, created_at=when
            )
            [vector] = await old.embed([text])
            await store.add_record(record, vector, old.name)
            records.append(record)
        ops = MemoryOps(settings, agent, store, new, None)

        seen: list[tuple[int, int]] = []

        def stop_after_the_first_batch(done: int, total: int) -> None:
            seen.append((done, total))
            raise Interrupted

        with pytest.raises(Interrupted):
            await ops.reindex(stop_after_the_first_batch, batch=4)
        assert seen == [(4, 10)]
        pending = await store.records_needing_vectors(agent.id, new.name, 100)
        newest_four = {r.id for r in records[-4:]}
        assert {r.id for r in pending} == {r.id for r in records[:-4]}  # newest first were done

        # Half-way: a recall with the new encoder ranks only vectors of the new model.
        retriever = Retriever(store, new, MemoryConfig(embedder="minilm"))
        for query in TOPICS:
            result = await retriever.retrieve(
                agent.id,
                query,
                channel=CHANNEL,
                participants=[],
                now=NOW,
                budget_tokens=10_000,
                mode="vector",
            )
            assert {s.record.id for s in result.records} <= newest_four

        progress: list[tuple[int, int]] = []
        assert await ops.reindex(lambda done, total: progress.append((done, total)), batch=4) == 6
        assert progress == [(4, 10), (6, 10)]
        assert await store.records_needing_vectors(agent.id, new.name, 100) == []
        assert await ops.reindex(batch=4) == 0  # nothing left: a second run is a no-op

        result = await retriever.retrieve(
            agent.id,
            "Did Sam get a pet?",
            channel=CHANNEL,
            participants=[],
            now=NOW,
            budget_tokens=10_000,
            mode="vector",
        )
        assert len(result.records) == len(TOPICS)
        assert result.records[0].record.summary == "Sam adopted a grey cat from the shelter"
    finally:
        await store.close()
