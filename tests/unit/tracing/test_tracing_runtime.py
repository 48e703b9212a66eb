"""Tracing through the real runtime (SPEC App. D): one trace per activation, its exact tree,
tokens matching the usage ledger, background work joining the turn's trace, the content
policy, and collectors that hang or refuse never breaking a turn.

Spans are read from the SDK's in-memory exporter and from a real OTLP/HTTP receiver on
loopback that decodes what the SDK's exporter posts (`otlp_receiver.py`)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from otlp_receiver import otlp_receiver
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo

from persyn.cognition.deliberation import Critique, Decision, Objection
from persyn.gateway.base import TokenUsage
from persyn.ops.doctor.checks import check_tracing
from persyn.runtime.background.autonomy import recent_activity
from persyn.schedule import at_trigger, set_reminder
from persyn.testing import ADA, RecordingChannel, consolidation_reply, run_runtime, tool_returns
from persyn.testing.models import DoubleReply, last_user_text, registered_double
from persyn.tracing import ATTR, read_losses, read_spans, trace_id_of

SECRET = "zebracorn"  # in the input, the tool's arguments and every reply: must never leave with metadata


class Mind:
    """A respond model that calls a tool once, then answers with a premise a critic objects to;
    critics that wait for each other (so they can only pass if run concurrently); a refiner and
    a decider."""

    def __init__(self) -> None:
        self.critics_waiting = 0
        self.both_critics = asyncio.Event()

    async def __call__(self, task: str | None, messages: list[ModelMessage], info: AgentInfo) -> Any:
        if task == "respond":
            if not tool_returns(messages):
                return DoubleReply(
                    tool_calls=[{"name": "calculate", "args": {"expression": "6*7"}}],
                    usage=TokenUsage(input_tokens=120, output_tokens=9, cache_read_tokens=80),
                )
            return DoubleReply(
                text=f"It is 42, and since the moon is made of cheese the {SECRET} can eat it forever.",
                usage=TokenUsage(input_tokens=150, output_tokens=21),
            )
        if task == "critique":
            self.critics_waiting += 1
            if self.critics_waiting % 2 == 0:
                self.both_critics.set()
            await asyncio.wait_for(self.both_critics.wait(), 60)  # a condition, not a pause
            if "rules critic" in (info.instructions or ""):
                return Critique(
                    objections=(
                        Objection(
                            kind="false-premise", span="the moon is made of cheese", explanation="rock"
                        ),
                    )
                )
            return Critique()
        if task == "refine":
            return DoubleReply(text=f"It is 42. The moon is rock, so the {SECRET} will need other food.")
        if task == "decide":
            return Decision(action="speak", reason=f"it answers the {SECRET} question")
        return DoubleReply(text=f"noted about {last_user_text(messages)[:20]}")


@pytest.fixture
def mind() -> Iterator[Mind]:
    instance = Mind()
    with registered_double("tracer", instance):
        yield instance


def _config(*, content: str = "full", exporters: str = "[]", extra: str = "") -> str:
    return (
        '[deliberation]\nmode = "inline"\nlenses = ["constrained"]\n'
        f'[tracing]\nenabled = true\ncontent = "{content}"\nexporters = {exporters}\n{extra}'
    )


def _tree(spans: list[ReadableSpan], trace_id: int) -> tuple[ReadableSpan, list[ReadableSpan]]:
    mine = [span for span in spans if span.context is not None and span.context.trace_id == trace_id]
    (root,) = [span for span in mine if span.parent is None]
    assert root.context is not None
    children = sorted(
        (span for span in mine if span.parent is not None and span.parent.span_id == root.context.span_id),
        key=lambda span: span.start_time or 0,
    )
    return root, children


async def test_a_tool_using_inline_turn_is_one_trace_with_the_exact_tree(tmp_path: Path, mind: Mind) -> None:
    memory = InMemorySpanExporter()
    async with run_runtime(
        tmp_path / "home", model="test:tracer", config=_config(), span_exporters=[memory]
    ) as pilot:
        event, marker = await pilot.say(f"What is 6*7, and what does the {SECRET} eat?")
        assert (
            marker.transmitted
            and marker.text == f"It is 42. The moon is rock, so the {SECRET} will need other food."
        )
        await pilot.settle()  # the workflow has returned: its root span has ended
        assert pilot.runtime.tracing.force_flush()
        usage = {record.id: record for record in pilot.usage()}
        root, children = _tree(list(memory.get_finished_spans()), int(trace_id_of(event.id), 16))
        attributes = dict(root.attributes or {})
        conversation = await pilot.store.get_conversation(ADA.id, str(attributes[ATTR.CONVERSATION]))
    assert conversation is not None and conversation.channel == "room"

    assert root.name == "activation message"
    assert attributes[ATTR.EVENT] == event.id and attributes[ATTR.SURFACE] == "test"
    assert (attributes[ATTR.PARTICIPANT],) == conversation.participant_ids  # Sam's person id
    assert attributes[ATTR.PARTICIPANT_NAME] == "Sam"
    assert attributes[ATTR.INPUT] == f"What is 6*7, and what does the {SECRET} eat?"
    assert attributes[ATTR.OUTPUT] == marker.text and attributes[ATTR.ACTION] == "speak"
    names = [span.name for span in children]
    assert names[:3] == ["model respond", "tool calculate", "model respond"]
    assert sorted(names[3:5]) == ["model critique:constrained", "model critique:provenance"]
    # After the reply, the emotional-state reading joins the trace from the background queue.
    assert names[5:] == ["model refine", "model decide", "emotion"]
    # The critics ran concurrently: each began before the other ended.
    first, second = children[3], children[4]
    assert (first.start_time or 0) < (second.end_time or 0) and (second.start_time or 0) < (
        first.end_time or 0
    )
    # Every model span carries its usage record's id and exactly its tokens.
    models = [span for span in children if span.name.startswith("model ")]
    for span in models:
        values = dict(span.attributes or {})
        record = usage[str(values[ATTR.USAGE_ID])]
        assert (values[ATTR.INPUT_TOKENS], values[ATTR.OUTPUT_TOKENS], values[ATTR.CACHE_READ_TOKENS]) == (
            record.input_tokens,
            record.output_tokens,
            record.cache_read_tokens,
        )
        assert values[ATTR.STAGE] == record.stage and values[ATTR.MODEL] == "test:tracer"
    first_respond = dict(models[0].attributes or {})
    assert (first_respond[ATTR.INPUT_TOKENS], first_respond[ATTR.CACHE_READ_TOKENS]) == (120, 80)
    assert "calculate" in list(first_respond[ATTR.TOOLS_OFFERED])  # pyright: ignore[reportArgumentType]
    assert "calculate" in str(first_respond[ATTR.TOOL_DEFINITIONS])
    tool = dict(children[1].attributes or {})
    assert json.loads(str(tool[ATTR.TOOL_ARGUMENTS])) == {"expression": "6*7"}
    assert tool[ATTR.TOOL_STATUS] == "ok" and "42" in str(tool[ATTR.TOOL_RESULT])
    # The tool ran between the two round-trips, inside the root.
    assert (models[0].end_time or 0) <= (children[1].start_time or 0)
    assert (children[1].end_time or 0) <= (models[1].start_time or 0)
    # The turn's own spans lie inside the root; the background reading may outlive it.
    assert (root.start_time or 0) <= (children[0].start_time or 0) and (children[-2].end_time or 0) <= (
        root.end_time or 0
    )
    assert dict(children[-1].attributes or {})[ATTR.KIND] == "background"


async def test_a_deferred_turns_background_work_joins_its_trace(tmp_path: Path, mind: Mind) -> None:
    memory = InMemorySpanExporter()
    config = (
        '[deliberation]\nmode = "deferred"\nlenses = ["constrained"]\n'
        "[conversation]\nextract_every_messages = 2\n"
        "[tracing]\nenabled = true\nexporters = []\n"
    )
    channel = RecordingChannel(interactive=True)
    async with run_runtime(
        tmp_path / "home",
        model="test:tracer",
        config=config,
        span_exporters=[memory],
        channels={"test": channel},
    ) as pilot:
        event, marker = await pilot.say(f"Tell me about the {SECRET} and the moon, at some length please.")
        assert marker.transmitted
        await pilot.settle()  # deliberation and extraction ran on the background queue
        assert pilot.runtime.tracing.force_flush()
    spans = list(memory.get_finished_spans())
    trace_id = int(trace_id_of(event.id), 16)
    root, children = _tree(spans, trace_id)
    assert root.context is not None
    background = {
        span.name: span for span in children if dict(span.attributes or {})[ATTR.KIND] == "background"
    }
    assert set(background) == {"deliberation", "extraction", "emotion"}
    deliberation = background["deliberation"]
    assert deliberation.context is not None
    under = [
        span.name
        for span in spans
        if span.parent is not None and span.parent.span_id == deliberation.context.span_id
    ]
    assert sorted(under) == ["model critique:constrained", "model critique:provenance", "model refine"]
    extraction = background["extraction"]
    assert extraction.context is not None
    assert any(
        span.parent is not None
        and span.parent.span_id == extraction.context.span_id
        and span.name.startswith("model ")
        for span in spans
    )
    # No span of this turn's work landed in a trace of its own.
    assert all(
        span.context is not None and span.context.trace_id == trace_id
        for span in spans
        if dict(span.attributes or {}).get(ATTR.CONVERSATION)
        == dict(root.attributes or {})[ATTR.CONVERSATION]
    )


def _reminding(task: str | None, messages: list[ModelMessage], info: AgentInfo) -> Any:
    if task == "decide":
        return Decision(action="speak", reason="it is due")
    return consolidation_reply(task) or DoubleReply(text="Time to stretch, Sam!")


async def test_a_reminder_is_a_trace_and_its_consolidation_joins_it(tmp_path: Path) -> None:
    memory = InMemorySpanExporter()
    config = "[deliberation]\nenabled = false\n[tracing]\nenabled = true\nexporters = []\n"
    with registered_double("reminding", _reminding):
        async with run_runtime(
            tmp_path / "home", model="test:reminding", config=config, span_exporters=[memory]
        ) as pilot:
            now = pilot.clock.now()
            await set_reminder(
                pilot.full_store,
                ADA.id,
                "tell Sam to stretch",
                at_trigger(now + timedelta(minutes=5), now),
                now,
            )
            assert await pilot.fire(timedelta(minutes=6)) == 1  # waits for the run and its close hooks
            assert pilot.runtime.tracing.force_flush()
            (entry,) = await recent_activity(pilot.full_store, ADA.id)
    spans = list(memory.get_finished_spans())
    (root,) = [span for span in spans if span.parent is None]
    assert root.name == "activation reminder" and root.context is not None
    values = dict(root.attributes or {})
    assert values[ATTR.SURFACE] == "self" and values[ATTR.CONVERSATION] == entry.conversation_id
    assert all(span.context is not None and span.context.trace_id == root.context.trace_id for span in spans)
    (closed,) = [span for span in spans if span.name == "conversation closed"]
    assert closed.parent is not None and closed.parent.span_id == root.context.span_id
    assert closed.context is not None
    under = {
        span.name
        for span in spans
        if span.parent is not None and span.parent.span_id == closed.context.span_id
    }
    assert {"model summarize", "model rate"} <= under


async def test_metadata_content_leaves_no_conversation_text_in_any_exported_byte(
    tmp_path: Path, mind: Mind
) -> None:
    bodies: dict[str, bytes] = {}
    for content in ("metadata", "full"):
        home = tmp_path / content
        with otlp_receiver() as collector:
            config = _config(
                content=content,
                exporters='["local", "otlp"]',
                extra=f'otlp_endpoint = "{collector.url}"\n',
            )
            async with run_runtime(home, model="test:tracer", config=config) as pilot:
                _, marker = await pilot.say(f"What is 6*7, and what does the {SECRET} eat?")
                assert marker.transmitted
            # Stopping flushed both exporters.
            otlp = b"".join(collector.received.bodies)
            assert len(collector.received.snapshot()) >= 8, [s.name for s in collector.received.snapshot()]
        local = b"".join(
            path.read_bytes() for path in sorted((home / "data" / "traces").glob("spans-*.jsonl"))
        )
        bodies[content] = otlp + local
        assert b"model critique:constrained" in local and b"model critique:constrained" in otlp
    assert SECRET.encode() not in bodies["metadata"]
    assert b"6*7" not in bodies["metadata"] and b"moon" not in bodies["metadata"]
    # The same turn with full content does carry the text: the check above can fail.
    assert SECRET.encode() in bodies["full"] and b"6*7" in bodies["full"]


async def test_a_hanging_collector_drops_and_counts_spans_but_never_breaks_a_turn(
    tmp_path: Path, mind: Mind
) -> None:
    with otlp_receiver("hang") as collector:
        config = _config(
            exporters='["otlp"]',
            extra=f'otlp_endpoint = "{collector.url}"\notlp_timeout_seconds = 2\nqueue_size = 1\n',
        )
        async with run_runtime(tmp_path / "home", model="test:tracer", config=config) as pilot:
            (processor,) = pilot.runtime.tracing.processors
            turns = 0
            while processor.counts.dropped == 0 and turns < 40:
                _, marker = await pilot.say(f"What is 6*7, and what does the {SECRET} eat? ({turns})")
                assert marker.transmitted and marker.text and "42" in marker.text
                turns += 1
            assert processor.counts.dropped > 0
            settings = pilot.settings
    assert collector.received.bodies  # it was sent spans, and never answered
    (loss,) = read_losses(settings.traces_dir, since=_epoch())
    assert loss.exporter == "otlp" and loss.dropped + loss.failed > 0
    check = await check_tracing(settings)
    assert check.warning and "spans lost in 24 h: otlp:" in check.detail


async def test_a_refusing_collector_fails_exports_counted_never_the_turn(tmp_path: Path, mind: Mind) -> None:
    with otlp_receiver() as collector:
        url = collector.url  # the receiver is gone once this block ends: nothing listens there
    config = _config(
        exporters='["otlp", "local"]', extra=f'otlp_endpoint = "{url}"\notlp_timeout_seconds = 1\n'
    )
    async with run_runtime(tmp_path / "home", model="test:tracer", config=config) as pilot:
        event, marker = await pilot.say(f"What is 6*7, and what does the {SECRET} eat?")
        assert marker.transmitted and marker.text and "42" in marker.text
        await pilot.settle()  # the background reading joins the trace (see the exact tree above)
        otlp, local = pilot.runtime.tracing.processors
        settings = pilot.settings
    assert otlp.counts.failed > 0 and otlp.counts.exported == 0
    # The local store did not suffer for it.
    assert local.counts.failed == 0 and local.counts.exported == otlp.counts.failed
    stored = [span for span in read_spans(settings.traces_dir) if span.trace_id == trace_id_of(event.id)]
    # The whole turn and its background reading (the emotion double's reply is not a
    # reading: asked twice), each span kept once, although none reached the collector.
    assert sorted(span.name for span in stored) == [
        "activation message", "emotion", "model critique:constrained", "model critique:provenance",
        "model decide", "model emotion", "model emotion", "model refine", "model respond",
        "model respond", "tool calculate",
    ]  # fmt: skip
    check = await check_tracing(settings)
    assert check.warning and "does not answer" in check.detail and "not exported" in check.detail


def _epoch() -> Any:
    from datetime import UTC, datetime

    return datetime(2000, 1, 1, tzinfo=UTC)
