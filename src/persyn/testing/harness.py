"""One way to run the real runtime in a test: `run_runtime(home) as pilot`.

In the spirit of Textual's `App.run_test()` and its `Pilot`: the test gets the real thing
(SQLite files under `home`, real DBOS queues, the gateway and meter, model doubles chosen by
model string such as `test:echo` or `test:script@PATH`), started in the running loop, and a
pilot that drives it the way the outside world does and waits for what it causes::

    async with run_runtime(tmp_path / "home", model="test:echo") as pilot:
        turn = await pilot.say("Hello Ada")
        assert turn.marker.transmitted
        assert [o.text for o in pilot.channel.delivered] == ["You said: Hello Ada"]
        assert {r.stage for r in pilot.usage()} >= {"respond"}

What it sets up, and why:
- Settings for a fresh home: `persyn.toml` holds the harness defaults (no usage log file,
  the `test:hash` embedder, no DBOS reminder schedule, housekeeping only at start) with
  `config` (TOML text) merged over them table by table, and one agent (`ADA`, or `agent`).
  The schedule and the housekeeping loop are off because they fire on the wall clock:
  a test fires reminders (`fire`) and closes conversations (`close_idle`) itself, on a
  `ManualClock` it moves (`advance`); `config` turns them back on where a test is about them.
- A `RecordingChannel` for the `test` service (or the `channels` given) and a
  `RecordingAdapter` on the meter, read through `usage()`.
- The runtime is built and started in `_running` alone, so a change of the composition
  root changes that one function.

No waits on time: `say` returns at the event's completion marker; `settle` returns once no
workflow is queued or running on either DBOS queue (deliberation, consolidation and
extraction all run as queued workflows); `wait_for` polls a condition. Each has a generous
timeout that only bounds a broken test, never decides a passing one.
"""

from __future__ import annotations

import asyncio
import tomllib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple, TypedDict, Unpack

import tomlkit
from dbos import DBOS
from opentelemetry.sdk.trace.export import SpanExporter

from persyn.core.clock import Clock, ManualClock
from persyn.core.config import AgentConfig, Settings, load_settings
from persyn.core.events import CompletionMarker, Event, Notice, Outbound, Speaker
from persyn.core.ids import new_id
from persyn.gateway.base import SinkCallable, SinkEvent
from persyn.runtime.app import Runtime
from persyn.runtime.channel import Channel
from persyn.runtime.compose import build_runtime
from persyn.runtime.durable import workflows
from persyn.store import Store
from persyn.store.base import Conversation
from persyn.store.capabilities import FullStore, missing_capabilities
from persyn.testing.meter import RecordingAdapter
from persyn.usage.meter import MeterAdapter
from persyn.usage.records import UsageRecord

__all__ = [
    "ADA",
    "START",
    "Pilot",
    "RecordingChannel",
    "Turn",
    "Where",
    "harness_settings",
    "run_runtime",
    "until",
]

START = datetime(2026, 11, 30, 9, tzinfo=UTC)
"""Where the harness's `ManualClock` starts unless a test gives a clock of its own."""

ADA = AgentConfig(name="Ada", id=new_id(START))
"""The agent a harness deployment has unless a test gives its own."""

WAIT_SECONDS = 120.0
"""The bound on every wait: far beyond a turn on a loaded machine, reached only when broken."""


async def until(condition: Callable[[], object], what: str, seconds: float = WAIT_SECONDS) -> None:
    """Until `condition()` is true (a fake server's record, a channel's state), checked every
    20 ms; fails naming `what` after `seconds`, a bound reached only when something is broken."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


_DEFAULTS: dict[str, dict[str, Any]] = {
    "models": {"default": "test:echo"},
    "metering": {"event_log": False},
    "memory": {"embedder": "test:hash"},
    "autonomy": {"schedule": False},
    "dispatch": {"housekeeping_seconds": 86_400.0},
}
_ACTIVE = ["ENQUEUED", "PENDING"]


class Where(TypedDict, total=False):
    """Who says something where: `speaker` (an id, default "sam") shown as `name` (default the
    id titled) on `service`:`channel` (default test:room), `addressed` to the agent or not."""

    speaker: str
    name: str
    service: str
    channel: str
    addressed: bool


class Turn(NamedTuple):
    """An event the pilot submitted and the completion marker that ended its run."""

    event: Event
    marker: CompletionMarker


class RecordingChannel(Channel):
    """The `test` surface: keeps what the runtime delivered, noticed and streamed to it.

    `interactive` selects the deliberation mode a surface gets (deferred when interactive);
    `sink_raises` makes its token sink fail, as a broken console would; `shows_images` keeps
    the images of a message as attachments (else they are text lines, as most surfaces get)."""

    def __init__(
        self,
        service: str = "test",
        *,
        interactive: bool = False,
        sink_raises: bool = False,
        shows_images: bool = False,
    ) -> None:
        self.service = service
        self.interactive = interactive
        self.shows_images = shows_images
        self.streams_tokens = True
        self.sink_raises = sink_raises
        self.delivered: list[Outbound] = []
        self.notices: list[Notice] = []
        self.streamed: list[str] = []  # the text of each streamed delta
        self.phases: list[tuple[str, str]] = []  # (phase, kind) of every sink event

    async def deliver(self, outbound: Outbound) -> None:
        self.delivered.append(outbound)

    async def notice(self, event: Event, notice: Notice) -> None:
        self.notices.append(notice)

    def sink_for(self, event: Event) -> SinkCallable | None:
        def sink(item: SinkEvent) -> None:
            if self.sink_raises:
                raise RuntimeError("the console fell over")
            self.phases.append((item.phase, item.kind))
            if item.kind == "delta":
                self.streamed.append(item.text)

        return sink


def harness_settings(
    home: Path, *, model: str = "test:echo", config: str = "", agent: AgentConfig | None = None
) -> Settings:
    """Settings for a deployment in `home` (created): `model` as `[models] default`, the
    harness defaults, `config` merged over both, and `agent` (default: `ADA`) as its one agent.
    The file is written, so the CLI pointed at `home` sees the same configuration."""
    home.mkdir(parents=True, exist_ok=True)
    data = _merged(_merged(_DEFAULTS, {"models": {"default": model}}), tomllib.loads(config))
    (home / "persyn.toml").write_text(tomlkit.dumps(data))
    return load_settings(home, environ={}).model_copy(update={"agents": [agent or ADA]})


@asynccontextmanager
async def run_runtime(
    home: Path | Settings,
    *,
    model: str = "test:echo",
    config: str = "",
    agent: AgentConfig | None = None,
    clock: Clock | None = None,
    channels: Mapping[str, Channel] | None = None,
    store: Store | None = None,
    workers: bool = True,
    scheduler: bool = True,
    pace: timedelta = timedelta(seconds=5),
    span_exporters: Sequence[SpanExporter] = (),
) -> AsyncIterator[Pilot]:
    """A started runtime for `home` (see `harness_settings`; or ready `Settings`), stopped on
    exit. `span_exporters` receive the spans when `[tracing] enabled` (the SDK's in-memory
    exporter, a test's collector). `workers=False` is a process that only submits (`persyn send`); `scheduler=False`
    starts no housekeeping and bootstraps no heartbeat (`persyn worker`). `pace` is how far
    `say` and `fire` move a `ManualClock` after each run, so what happens next comes later."""
    if isinstance(home, Settings):
        if model != "test:echo" or config or agent is not None:
            raise ValueError(
                "run_runtime: pass model, config and agent to harness_settings, not with Settings"
            )
        settings = home
    else:
        settings = harness_settings(home, model=model, config=config, agent=agent)
    recording = RecordingAdapter()
    surfaces: dict[str, Channel] = dict(channels) if channels is not None else {"test": RecordingChannel()}
    async with _running(
        settings,
        clock=clock or ManualClock(START),
        store=store,
        channels=surfaces,
        meter_adapters=[recording],
        span_exporters=span_exporters,
        workers=workers,
        scheduler=scheduler,
    ) as runtime:
        yield Pilot(runtime, recording, workers=workers, pace=pace)


@asynccontextmanager
async def _running(
    settings: Settings,
    *,
    clock: Clock,
    store: Store | None,
    channels: dict[str, Channel],
    meter_adapters: list[MeterAdapter],
    span_exporters: Sequence[SpanExporter],
    workers: bool,
    scheduler: bool,
) -> AsyncIterator[Runtime]:
    """The one place the harness builds and starts a runtime."""
    runtime = build_runtime(
        settings,
        clock=clock,
        store=store,
        channels=channels,
        meter_adapters=meter_adapters,
        span_exporters=span_exporters,
    )
    try:
        await runtime.start(workers=workers, scheduler=scheduler)
        yield runtime
    finally:
        await runtime.stop()


class Pilot:
    """Drives a started runtime as its surfaces and scheduler would, and waits for the result."""

    def __init__(
        self, runtime: Runtime, recording: RecordingAdapter, *, workers: bool, pace: timedelta
    ) -> None:
        self.runtime = runtime
        self._recording = recording
        self._workers = workers
        self._pace = pace

    @property
    def settings(self) -> Settings:
        return self.runtime.settings

    @property
    def store(self) -> Store:
        return self.runtime.store

    @property
    def full_store(self) -> FullStore:
        """The store as a built-in backend, every capability offered (what `run_runtime` opens
        unless a test passes a store of its own), for a test to read back what the runtime kept."""
        store = self.runtime.store
        if not isinstance(store, FullStore):
            raise TypeError(f"{store!r} is not a built-in store: it lacks {missing_capabilities(store)}")
        return store

    @property
    def clock(self) -> Clock:
        return self.runtime.clock

    @property
    def agent(self) -> AgentConfig:
        return self.runtime.settings.agents[0]

    @property
    def channel(self) -> RecordingChannel:
        """The `test` surface, when it is the harness's own."""
        surface = self.runtime.channels.get("test")
        if not isinstance(surface, RecordingChannel):
            raise TypeError(f"the test channel is {surface!r}, not the harness's RecordingChannel")
        return surface

    def advance(self, by: timedelta) -> None:
        """Move the manual clock on (a wall clock cannot be moved: that is a test's mistake)."""
        if not isinstance(self.clock, ManualClock):
            raise TypeError(
                f"cannot advance {self.clock!r}: run_runtime was given a clock that is not manual"
            )
        self.clock.advance(by)

    def event(self, text: str, *, at: datetime | None = None, **where: Unpack[Where]) -> Event:
        """What someone says `where` (default: Sam on test:room, addressed to the agent), now
        or `at`."""
        when = at or self.clock.now()
        service, channel = where.get("service", "test"), where.get("channel", "room")
        speaker = where.get("speaker", "sam")
        return Event(
            id=new_id(when),
            agent_id=self.agent.id,
            service=service,
            channel=channel,
            speaker=Speaker(
                service=service,
                channel=channel,
                speaker_id=speaker,
                display_name=where.get("name") or speaker.title(),
            ),
            text=text,
            received_at=when,
            addressed=where.get("addressed", True),
        )

    async def submit(self, event: Event) -> CompletionMarker:
        """Submit `event` as a channel does and wait for its completion marker."""
        await self.runtime.submit(event)
        return await self.runtime.wait_marker(event.agent_id, event.id, timeout=WAIT_SECONDS)

    async def say(self, text: str, *, transmitted: bool | None = None, **where: Unpack[Where]) -> Turn:
        """Someone says `text` (see `event`) once the agent is idle; returns at the completion
        marker, then moves the clock on by `pace`. `transmitted`, when given, is the outcome the
        test expects."""
        await self.idle()
        event = self.event(text, **where)
        marker = await self.submit(event)
        if transmitted is not None:
            assert marker.transmitted is transmitted, marker
        self._pace_on()
        return Turn(event, marker)

    async def idle(self) -> None:
        """Until no activation of the agent is queued or running (a heartbeat would be skipped
        as busy, and a message would queue behind it)."""
        if self._workers:
            await self.wait_for(
                lambda: _negated(self.runtime.intake.busy(self.agent.id)), "the agent to be idle"
            )

    async def settle(self) -> None:
        """Until no workflow is queued or running on either queue: the runs, and the work they
        enqueued (deferred deliberation, close hooks, extraction), have finished. The events
        queue is read again after the background one: a background workflow that enqueues a
        run has done so before it ends."""

        async def quiet() -> bool:
            for queue in (workflows.EVENTS_QUEUE, workflows.BACKGROUND_QUEUE, workflows.EVENTS_QUEUE):
                if await _active(queue):
                    return False
            return True

        await self.wait_for(quiet, "the queued work to finish")

    async def fire(self, by: timedelta | None = None) -> int:
        """The scheduler's tick, by hand: once idle, move the clock on by `by`, fire what is
        due, wait until it (and what it enqueued) has finished; returns how many fired."""
        await self.idle()
        if by is not None:
            self.advance(by)
        fired = await self.runtime.autonomy.fire_due()
        await self.settle()
        self._pace_on()
        return fired

    async def close_idle(self, after: timedelta | None = None) -> int:
        """Housekeeping's close, by hand: move the clock on by `after`, close the conversations
        idle past the timeout, wait for their close hooks (consolidation, observations, the
        graph); returns how many closed."""
        if after is not None:
            self.advance(after)
        closed = await self.runtime.housekeeping.close_idle_conversations()
        await self.settle()
        return closed

    async def end_conversations(self, after: timedelta | None = None) -> list[Conversation]:
        """Close the idle conversations in the store only, enqueueing no hook: as a crash
        between the close and the enqueue leaves them, or for a test that runs one hook itself."""
        if after is not None:
            self.advance(after)
        timeout = self.settings.conversation.idle_timeout_minutes * 60
        return await self.store.close_idle_conversations(self.agent.id, self.clock.now(), timeout)

    def usage(self) -> list[UsageRecord]:
        """Every usage record metered so far (the meter is flushed first)."""
        assert self.runtime.meter.flush(), "the meter did not catch up"
        return list(self._recording.records)

    async def wait_for(self, condition: Callable[[], Awaitable[bool]], what: str = "the condition") -> None:
        """Until `condition()` holds, checked every 20 ms; fails after `WAIT_SECONDS`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT_SECONDS
        while not await condition():
            if loop.time() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            await asyncio.sleep(0.02)

    def _pace_on(self) -> None:
        if isinstance(self.clock, ManualClock):
            self.clock.advance(self._pace)


async def _active(queue: str) -> bool:
    return bool(
        await DBOS.list_queued_workflows_async(
            queue_name=queue, status=_ACTIVE, load_input=False, load_output=False
        )
    )


async def _negated(check: Awaitable[bool]) -> bool:
    return not await check


def _merged(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        current = merged.get(key)
        if isinstance(current, Mapping) and isinstance(value, Mapping):
            merged[key] = _merged(current, value)  # pyright: ignore[reportUnknownArgumentType]
        else:
            merged[key] = value
    return merged
