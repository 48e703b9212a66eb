"""The Embedder port: the test double, WordLlama offline, a real OpenAI-compatible service
on loopback (and its failures), configuration strings."""

from __future__ import annotations

import asyncio
import math
import socket
import sys
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from hypothesis import given
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from persyn.core.config import MemoryConfig
from persyn.core.errors import ConfigError
from persyn.core.ids import new_id
from persyn.core.records import MemoryRecord
from persyn.memory.embedder import (
    Embedder,
    EmbedderOptions,
    EmbedderUnavailable,
    OpenAICompatibleEmbedder,
    SentenceTransformersEmbedder,
    WordLlamaEmbedder,
    build_embedder,
    register_embedder,
    warm_embedder,
)
from persyn.memory.retrieval import Retriever
from persyn.store import open_store
from persyn.testing.embedder import HashEmbedder, UnavailableEmbedder

NOW = datetime(2026, 3, 10, tzinfo=UTC)


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    return math.fsum(x * y for x, y in zip(a, b, strict=True))


# the test double -------------------------------------------------------------------------------
@given(st.text(max_size=200))
def test_hash_embedder_is_deterministic_and_unit_length(text: str) -> None:
    first, second = HashEmbedder().vector(text), HashEmbedder().vector(text)
    assert first == second
    assert len(first) == 64
    assert math.fsum(x * x for x in first) == pytest.approx(1.0)


async def test_hash_embedder_puts_similar_texts_closer() -> None:
    hiking, hiked, taxes = await HashEmbedder().embed(
        ["I went hiking on the ridge with Ann", "Ann and I hiked the ridge", "We filed the tax forms"]
    )
    assert _cosine(hiking, hiked) > _cosine(hiking, taxes)


def test_doubles_are_built_from_configuration_strings() -> None:
    assert isinstance(build_embedder("test:hash"), HashEmbedder)
    assert isinstance(build_embedder("test:unavailable"), UnavailableEmbedder)
    assert isinstance(build_embedder("test:hash"), Embedder)


def test_an_embedder_kind_registers_its_factory() -> None:
    """Every kind goes through one registry: the built-ins, the doubles (an entry point) and a
    plugin registered in-process alike."""
    built: list[tuple[str, EmbedderOptions]] = []

    def factory(rest: str, options: EmbedderOptions) -> Embedder:
        built.append((rest, options))
        return HashEmbedder(options.dims)

    register_embedder("unit-kind", factory, replace=True)
    embedder = build_embedder("unit-kind:small", dims=8, timeout_seconds=2.0)
    assert embedder.dims == 8
    assert built == [("small", EmbedderOptions(spec="unit-kind:small", dims=8, timeout_seconds=2.0))]
    with pytest.raises(ValueError, match="already registered"):
        register_embedder("unit-kind", factory)
    with pytest.raises(ConfigError, match=r"registered kinds: .*test.*unit-kind"):
        build_embedder("other:x")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("nonsense", "unknown embedder 'nonsense'"),
        ("test:nope", "unknown test embedder 'test:nope'"),
        ("openai:bge", "must be 'openai:MODEL@URL'"),
        ("openai:bge@localhost:8080", "must start with http:// or https://"),
        ("wordllama:big", "takes no model name"),
    ],
)
def test_bad_embedder_strings_are_config_errors(spec: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_embedder(spec)


def test_a_missing_sentence_transformers_extra_names_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # as if the extra were absent
    with pytest.raises(ConfigError, match="uv sync --extra sentence-transformers"):
        SentenceTransformersEmbedder("all-MiniLM-L6-v2")


# WordLlama ------------------------------------------------------------------------------------------
def _no_network(*args: object, **kwargs: object) -> socket.socket:
    raise AssertionError("the default encoder tried to open a network connection")


async def test_wordllama_loads_offline_and_ranks_paraphrases_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket, "create_connection", _no_network)
    monkeypatch.setattr(socket.socket, "connect", _no_network)
    embedder = build_embedder("wordllama")
    assert isinstance(embedder, WordLlamaEmbedder)
    assert (embedder.name, embedder.dims) == ("wordllama:l2_supercat-256", 256)
    cats, kittens, stocks, empty = await embedder.embed(
        ["I really like cats", "I love kittens", "The stock market fell sharply", ""]
    )
    assert len(cats) == 256
    assert math.fsum(x * x for x in cats) == pytest.approx(1.0)
    assert math.fsum(x * x for x in empty) == pytest.approx(1.0)  # no NaN for an empty text
    assert _cosine(cats, kittens) > _cosine(cats, stocks) + 0.2


async def test_wordllama_can_be_truncated() -> None:
    embedder = WordLlamaEmbedder(dims=64)
    [vector] = await embedder.embed(["hello there"])
    assert len(vector) == 64 and embedder.name == "wordllama:l2_supercat-64"
    with pytest.raises(ConfigError):
        WordLlamaEmbedder(dims=100)


async def test_a_local_encoder_is_warmed_offline_before_its_first_embed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(socket, "create_connection", _no_network)
    monkeypatch.setattr(socket.socket, "connect", _no_network)
    embedder = WordLlamaEmbedder(dims=64)
    assert await warm_embedder(embedder) is True
    assert await warm_embedder(embedder) is True  # loaded once; warming again is harmless
    [vector] = await embedder.embed(["warm already"])
    assert len(vector) == 64
    assert await warm_embedder(HashEmbedder()) is False  # nothing to load


class _MissingWeights(WordLlamaEmbedder):
    config_name = "no_such_weights"


async def test_an_encoder_whose_weights_are_missing_fails_its_warm_up_by_name() -> None:
    with pytest.raises(EmbedderUnavailable, match=r"'no_such_weights'.*downloads are disabled"):
        await warm_embedder(_MissingWeights())


# The client's timeout in these tests: long enough that a healthy answer on a loaded CI machine
# comes in time (0.3 s once did not: a connect timeout), short against the slow behaviour.
_CLIENT_TIMEOUT = 2.0


# a real OpenAI-compatible service on loopback -------------------------------------------------------
@dataclass
class Service:
    """An `/v1/embeddings` server whose behaviour a test switches: "ok", "error" (HTTP 500),
    "garbage" (not the right JSON), "slow" (answers after the client gave up)."""

    base_url: str = ""
    behaviour: str = "ok"
    requests: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])


def _app(service: Service) -> Starlette:
    double = HashEmbedder(dims=32)

    async def embeddings(request: Request) -> Response:
        body = await request.json()
        service.requests.append(body)
        if service.behaviour == "error":
            return PlainTextResponse("model not loaded", status_code=500)
        if service.behaviour == "garbage":
            return JSONResponse({"data": [{"embedding": "nope"}]})
        if service.behaviour == "slow":
            await asyncio.sleep(3 * _CLIENT_TIMEOUT)
        inputs = body["input"]
        data = [
            {"object": "embedding", "index": i, "embedding": [x * 3 for x in double.vector(t)]}
            for i, t in enumerate(inputs)
        ]
        return JSONResponse({"object": "list", "model": body["model"], "data": list(reversed(data))})

    return Starlette(routes=[Route("/v1/embeddings", embeddings, methods=["POST"])])


@pytest.fixture(scope="module")
def service() -> Iterator[Service]:
    state = Service()
    config = uvicorn.Config(
        _app(state), host="127.0.0.1", port=0, log_level="error", lifespan="off", ws="none"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        thread.join(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    state.base_url = f"http://127.0.0.1:{port}/v1"
    try:
        yield state
    finally:
        server.should_exit = True
        thread.join(5)


@pytest.fixture
async def healthy(service: Service) -> AsyncIterator[Service]:
    service.behaviour = "ok"
    service.requests.clear()
    yield service
    service.behaviour = "ok"


async def test_service_embeds_in_batches_in_order_normalised(healthy: Service) -> None:
    embedder = build_embedder(f"openai:hash-32@{healthy.base_url}")
    assert isinstance(embedder, OpenAICompatibleEmbedder)
    embedder = OpenAICompatibleEmbedder("hash-32", healthy.base_url, batch_size=2)
    texts = ["hiking the ridge", "tax forms", "the ridge hike", "a fourth text", "fifth"]
    vectors = await embedder.embed(texts)
    assert len(vectors) == 5 and embedder.dims == 32 and embedder.name == "openai:hash-32"
    assert [len(r["input"]) for r in healthy.requests] == [2, 2, 1]
    assert healthy.requests[0]["model"] == "hash-32"
    for text, vector in zip(texts, vectors, strict=True):  # reversed `data` is put back in order
        assert vector == pytest.approx(HashEmbedder(dims=32).vector(text))


@pytest.mark.parametrize(
    ("behaviour", "message"),
    [("error", "answered HTTP 500"), ("garbage", "unusable reply"), ("slow", "timed out")],
)
async def test_service_failures_are_embedder_unavailable(
    healthy: Service, behaviour: str, message: str
) -> None:
    healthy.behaviour = behaviour
    embedder = OpenAICompatibleEmbedder("hash-32", healthy.base_url, timeout_seconds=_CLIENT_TIMEOUT)
    with pytest.raises(EmbedderUnavailable, match=message):
        await embedder.embed(["anything"])


async def test_a_dead_service_is_embedder_unavailable() -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    embedder = OpenAICompatibleEmbedder("m", f"http://127.0.0.1:{port}/v1", timeout_seconds=1)
    with pytest.raises(EmbedderUnavailable, match="unreachable"):
        await embedder.embed(["anything"])


async def test_configured_dimensions_are_checked(healthy: Service) -> None:
    embedder = build_embedder(f"openai:hash-32@{healthy.base_url}", dims=128)
    with pytest.raises(EmbedderUnavailable, match="128 dimensions are configured"):
        await embedder.embed(["anything"])


async def test_a_service_is_not_called_to_warm_it(healthy: Service) -> None:
    """A remote encoder has nothing to load, and a call may cost: warming leaves it alone."""
    assert await warm_embedder(OpenAICompatibleEmbedder("hash-32", healthy.base_url)) is False
    assert healthy.requests == []


async def test_an_api_key_is_sent_when_given() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization", ""))
        return httpx.Response(200, json={"data": [{"embedding": [1.0, 0.0], "index": 0}]})

    embedder = OpenAICompatibleEmbedder(
        "m", "http://127.0.0.1:1/v1", api_key="sekrit", transport=httpx.MockTransport(handler)
    )
    assert await embedder.embed(["x"]) == [[1.0, 0.0]]
    assert seen == ["Bearer sekrit"]


async def test_a_failing_service_degrades_recall_to_keywords_never_raises(
    healthy: Service, tmp_path: Path
) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'persyn.db'}")
    await store.setup()
    try:
        agent_id = new_id(NOW)
        await store.ensure_agent(agent_id, "Ada", NOW)
        embedder = OpenAICompatibleEmbedder("hash-32", healthy.base_url, timeout_seconds=_CLIENT_TIMEOUT)
        record = MemoryRecord(
            id=new_id(NOW),
            agent_id=agent_id,
            created_at=NOW,
            channel="terminal:terminal",
            summary="I baked rye bread.",
        )
        [vector] = await embedder.embed([record.summary])
        await store.add_record(record, vector, embedder.name)
        retriever = Retriever(store, embedder, MemoryConfig())
        for behaviour in ("ok", "error", "garbage", "slow"):
            healthy.behaviour = behaviour
            result = await retriever.retrieve(
                agent_id,
                "rye bread",
                channel="terminal:terminal",
                participants=[],
                now=NOW,
                budget_tokens=500,
            )
            assert [s.record.id for s in result.records] == [record.id]
            assert (result.degraded is None) == (behaviour == "ok")
            if result.degraded:
                assert "openai:hash-32" in result.degraded and "keyword-only" in result.degraded
    finally:
        await store.close()
