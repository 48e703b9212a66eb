"""The live buses (`runtime/delivery/bus.py`, `runtime/delivery/redis_bus.py`, ARCHITECTURE §5) against real
servers (redis-server; PostgreSQL for what both relaying buses share):
two buses are two processes' worth of connections (the bus keeps nothing in common between
instances), one taking events in and showing their tokens, one publishing them. What a
stranger on the same Redis sees, and what one sending there can do, is checked with a raw
client speaking plain pub/sub."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from persyn.core.config import parse_settings
from persyn.core.events import Event
from persyn.gateway.base import SinkEvent
from persyn.runtime.delivery.bus import (
    LIVE_META,
    LiveBus,
    PostgresLiveBus,
    RelayBus,
    live_bus,
    live_namespace,
)
from persyn.runtime.delivery.redis_bus import RedisLiveBus, probe_redis, redis_channels
from persyn.testing.harness import RecordingChannel
from persyn.testing.postgres import PostgresForTests
from persyn.testing.redis_server import RedisForTests, free_port

pytestmark = pytest.mark.services

WAIT = 30.0  # bounds a broken test only


def _event(number: int = 1) -> Event:
    return Event(
        id=f"01JEVENT{number:018d}",
        agent_id="ADA",
        service="test",
        channel="room",
        text="hello",
        received_at=datetime(2026, 12, 2, tzinfo=UTC),
    )


class Woken:
    """What the listening side was asked to flush; a flush of `slow` waits for `gate` (a
    flush reads the store, which takes a while)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.arrived = asyncio.Event()
        self.slow: tuple[str, str] | None = None
        self.gate = asyncio.Event()

    async def __call__(self, service: str, agent_id: str) -> int:
        self.calls.append((service, agent_id))
        self.arrived.set()
        if (service, agent_id) == self.slow:
            await self.gate.wait()
        return 0


async def _until(condition: Callable[[], bool], then: Callable[[], Awaitable[object]] | None = None) -> None:
    """Wait (bounded) until `condition()`; `then` is repeated meanwhile (a message lost to a
    reconnection is sent again, as a later one would be)."""
    async with asyncio.timeout(WAIT):
        while not condition():
            if then is not None:
                await then()
            await asyncio.sleep(0.05)


@pytest.fixture(params=["redis", "postgresql"])
async def front_and_worker(
    request: pytest.FixtureRequest, redis_server: RedisForTests
) -> AsyncIterator[tuple[RelayBus, RelayBus]]:
    """The process a web client is connected to (`front`) and one that runs the turns, on
    each bus that relays through a server (what they share is tested on both)."""
    if request.param == "postgresql":
        postgres: PostgresForTests = request.getfixturevalue("postgres_server")
        front: RelayBus = PostgresLiveBus(postgres.url())
        worker: RelayBus = PostgresLiveBus(postgres.url())
    else:
        front, worker = RedisLiveBus(redis_server.url(), "unit"), RedisLiveBus(redis_server.url(), "unit")
    yield front, worker
    await front.close()
    await worker.close()


async def _started(bus: RelayBus, channel: RecordingChannel | None = None) -> Woken:
    woken = Woken()
    await bus.start(woken, lambda event: channel.sink_for(event) if channel is not None else None)
    return woken


async def test_tokens_reach_the_process_that_took_the_event_in_in_order(
    front_and_worker: tuple[RelayBus, RelayBus],
) -> None:
    front, worker = front_and_worker
    channel = RecordingChannel()
    await _started(front, channel)
    await _started(worker)
    event = front.taken_in(_event(), channel)
    sink = worker.remote_sink(event)
    assert sink is not None
    words = [f"word{i} " for i in range(200)]
    for word in words:
        sink(SinkEvent(phase="draft", kind="delta", text=word))
    sink(SinkEvent(phase="draft", kind="end"))
    await _until(lambda: ("draft", "end") in channel.phases)
    assert "".join(channel.streamed) == "".join(words)
    assert channel.phases[-1] == ("draft", "end")
    assert worker.dropped == 0


async def test_a_delta_larger_than_one_message_arrives_whole_whatever_its_characters(
    front_and_worker: tuple[RelayBus, RelayBus],
) -> None:
    front, worker = front_and_worker
    channel = RecordingChannel()
    await _started(front, channel)
    await _started(worker)
    event = front.taken_in(_event(), channel)
    sink = worker.remote_sink(event)
    assert sink is not None
    # escapes and wide characters take more room in a message than their count says
    text = ('"\\\n\x01' + "日本語のテキスト" + "🙂") * 3000
    sink(SinkEvent(phase="draft", kind="delta", text=text))
    sink(SinkEvent(phase="draft", kind="end"))
    await _until(lambda: ("draft", "end") in channel.phases)
    assert "".join(channel.streamed) == text
    assert len(channel.streamed) > 1 and worker.dropped == 0


async def test_an_outbox_wake_up_arrives_at_once_and_a_burst_of_them_is_coalesced(
    front_and_worker: tuple[RelayBus, RelayBus],
) -> None:
    front, worker = front_and_worker
    woken = await _started(front)
    await _started(worker)
    await worker.announce_outbox("web", "ADA")
    await asyncio.wait_for(woken.arrived.wait(), WAIT)
    assert woken.calls == [("web", "ADA")]
    woken.calls.clear()
    woken.slow = ("web", "BOB")
    await worker.announce_outbox("web", "BOB")
    await _until(lambda: ("web", "BOB") in woken.calls)  # its flush is under way
    for _ in range(50):
        await worker.announce_outbox("web", "BOB")
    await worker.announce_outbox("web", "ADA")
    await _until(lambda: ("web", "ADA") in woken.calls)  # sent after the fifty: they arrived
    assert woken.calls.count(("web", "BOB")) == 1
    woken.gate.set()
    # the wake-ups during the flush run one more after it (that flush may have read before
    # their row was written): never fifty, never none
    await _until(lambda: woken.calls.count(("web", "BOB")) == 2)
    await worker.announce_outbox("web", "ADA")
    await _until(lambda: woken.calls.count(("web", "ADA")) == 2)
    assert woken.calls.count(("web", "BOB")) == 2


async def test_an_event_taken_in_where_nothing_streams_publishes_nothing(
    front_and_worker: tuple[RelayBus, RelayBus],
) -> None:
    front, worker = front_and_worker
    await _started(front)
    await _started(worker)
    quiet = RecordingChannel()
    quiet.streams_tokens = False
    event = front.taken_in(_event(), quiet)
    assert LIVE_META not in event.meta
    assert worker.remote_sink(event) is None
    assert worker.remote_sink(front.taken_in(_event(), None)) is None


async def test_another_namespace_on_the_same_redis_hears_nothing(redis_server: RedisForTests) -> None:
    channel, other_channel = RecordingChannel(), RecordingChannel()
    front, worker = RedisLiveBus(redis_server.url(), "first"), RedisLiveBus(redis_server.url(), "first")
    other = RedisLiveBus(redis_server.url(), "second")
    try:
        woken = await _started(front, channel)
        await _started(worker)
        other_woken = await _started(other, other_channel)
        event = front.taken_in(_event(), channel)
        other.taken_in(event, other_channel)  # even one that knows the event (and its key)
        sink = worker.remote_sink(event)
        assert sink is not None
        sink(SinkEvent(phase="draft", kind="delta", text="only for the first"))
        await worker.announce_outbox("test", "ADA")
        await _until(lambda: bool(channel.streamed) and bool(woken.calls))
        # a sentinel sent after, on the second namespace, arrives there: what was sent before
        # on the first would have arrived first (one connection, one order)
        probe = RedisLiveBus(redis_server.url(), "second")
        await _started(probe)
        await probe.announce_outbox("sentinel", "X")
        await _until(lambda: bool(other_woken.calls))
        await probe.close()
        assert other_channel.streamed == []
        assert other_woken.calls == [("sentinel", "X")]
    finally:
        for bus in (front, worker, other):
            await bus.close()


@pytest.fixture
async def on_redis(redis_server: RedisForTests) -> AsyncIterator[tuple[RedisLiveBus, RedisLiveBus]]:
    front, worker = RedisLiveBus(redis_server.url(), "unit"), RedisLiveBus(redis_server.url(), "unit")
    yield front, worker
    await front.close()
    await worker.close()


async def test_a_stranger_on_the_redis_reads_only_ids_and_text_and_cannot_put_words_in_a_view(
    on_redis: tuple[RedisLiveBus, RedisLiveBus], redis_server: RedisForTests
) -> None:
    front, worker = on_redis
    channel = RecordingChannel()
    await _started(front, channel)
    await _started(worker)
    stranger = aioredis.Redis.from_url(redis_server.url())
    heard = stranger.pubsub()
    try:
        await heard.psubscribe("*")
        subscribed = await heard.get_message(timeout=WAIT)
        assert subscribed is not None and subscribed["type"] == "psubscribe"
        event = front.taken_in(_event(), channel)
        sink = worker.remote_sink(event)
        assert sink is not None
        sink(SinkEvent(phase="draft", kind="delta", text="genuine"))
        await _until(lambda: channel.streamed == ["genuine"])
        message = await heard.get_message(timeout=WAIT)
        assert message is not None and message["channel"] == redis_channels("unit")["persyn_live"].encode()
        seen = json.loads(message["data"])
        assert set(seen) == {"e", "p", "k", "t", "n", "q", "m"}  # ids, phase, text, a seal
        assert event.meta[LIVE_META] not in message["data"].decode()
        live = redis_channels("unit")["persyn_live"]
        # a replay of what it heard, and words of its own under the same ids, are refused
        await stranger.publish(live, message["data"])
        forged = {**seen, "t": "forged", "q": seen["q"] + 1}
        await stranger.publish(live, json.dumps(forged))
        await stranger.publish(live, json.dumps({**forged, "m": "0" * 32, "n": "stranger"}))
        await stranger.publish(live, "not json at all" + "x" * 300_000)
        sink(SinkEvent(phase="draft", kind="delta", text=" and true"))
        await _until(lambda: len(channel.streamed) == 2)
        assert channel.streamed == ["genuine", " and true"]
    finally:
        await heard.aclose()
        await stranger.aclose()


async def test_a_burst_larger_than_the_queue_drops_tokens_counted_and_keeps_the_rest_in_order(
    front_and_worker: tuple[RelayBus, RelayBus],
) -> None:
    front, worker = front_and_worker
    channel = RecordingChannel()
    woken = await _started(front, channel)
    await _started(worker)
    event = front.taken_in(_event(), channel)
    sink = worker.remote_sink(event)
    assert sink is not None
    # nothing yields in between, so the queue (2000) takes the first ones only
    for number in range(5000):
        sink(SinkEvent(phase="draft", kind="delta", text=f"{number},"))
    assert worker.dropped == 3000
    # the reply's wake-up, written while the queue is still full, takes the oldest token's
    # place: the reply is not left to the poll
    await worker.announce_outbox("test", "ADA")
    assert worker.dropped == 3001
    await _until(lambda: bool(woken.calls))
    await _until(lambda: "".join(channel.streamed) == "".join(f"{n}," for n in range(1, 2000)))
    # joined into a few messages, not two thousand
    assert len(channel.streamed) < 20


async def test_a_redis_that_is_not_there_loses_tokens_quietly_and_never_blocks(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bus = RedisLiveBus(f"redis://127.0.0.1:{free_port()}/0", "unit")
    try:
        with caplog.at_level(logging.WARNING, logger="persyn.runtime"):
            await _started(bus)  # returns after the first refused attempt
            assert not bus.subscribed.is_set()
            sink = bus.remote_sink(_event().model_copy(update={"meta": {LIVE_META: "k"}}))
            assert sink is not None
            for _ in range(10):
                assert sink(SinkEvent(phase="draft", kind="delta", text="lost")) is None
            await bus.announce_outbox("test", "ADA")
            await _until(lambda: bus.dropped >= 2)
        assert any("listening failed" in r.getMessage() for r in caplog.records)
        assert any("not sent" in r.getMessage() for r in caplog.records)
    finally:
        await bus.close()
    found = await probe_redis(bus.url)
    assert found.version is None and found.error


async def test_a_redis_that_goes_away_is_listened_to_again_when_it_is_back(tmp_path: Path) -> None:
    server = RedisForTests(tmp_path).start()
    front, worker = RedisLiveBus(server.url(), "unit"), RedisLiveBus(server.url(), "unit")
    try:
        woken = await _started(front)
        await _started(worker)
        server.stop()
        await _until(lambda: not front.subscribed.is_set())
        await worker.announce_outbox("test", "lost")
        await _until(lambda: worker.dropped >= 1)
        server.start()  # the same port
        await _until(front.subscribed.is_set)

        async def announce() -> None:
            await worker.announce_outbox("test", "ADA")
            await asyncio.sleep(0.2)

        await _until(lambda: ("test", "ADA") in woken.calls, then=announce)
        assert ("test", "lost") not in woken.calls
        assert (await probe_redis(server.url())).version
    finally:
        await front.close()
        await worker.close()
        server.stop()


def test_the_bus_is_chosen_by_configuration_and_named_after_the_deployment(tmp_path: Path) -> None:
    sqlite = parse_settings({}, tmp_path, environ={})
    assert type(live_bus(sqlite)) is LiveBus
    postgres = parse_settings(
        {"storage_url": "postgresql://u:secret@db.example/persyn"}, tmp_path, environ={}
    )
    assert type(live_bus(postgres)) is PostgresLiveBus
    environ = {"PERSYN_LIVE__REDIS_URL": "redis://:pw@127.0.0.1:6390/2"}
    on_redis = parse_settings(
        {"storage_url": "postgresql://u:secret@db.example/persyn"}, tmp_path, environ=environ
    )
    bus = live_bus(on_redis)
    assert isinstance(bus, RedisLiveBus)
    namespace = live_namespace(on_redis)
    assert bus.channels == {
        "persyn_outbox": f"persyn:{namespace}:outbox",
        "persyn_live": f"persyn:{namespace}:live",
    }
    # the store's password does not change the name (hosts may be given it differently),
    # another database does, and nothing of the URL is readable in it
    same = parse_settings(
        {"storage_url": "postgresql://u:other@db.example/persyn"}, tmp_path, environ=environ
    )
    other = parse_settings(
        {"storage_url": "postgresql://u:secret@db.example/other"}, tmp_path, environ=environ
    )
    assert live_namespace(same) == namespace != live_namespace(other)
    assert "db.example" not in namespace and "persyn" not in namespace
    assert live_namespace(sqlite) != live_namespace(parse_settings({}, tmp_path / "elsewhere", environ={}))
    named = parse_settings(
        {"live": {"redis_url": "redis://127.0.0.1/0", "redis_namespace": "acme"}}, tmp_path, environ={}
    )
    assert live_namespace(named) == "acme"
