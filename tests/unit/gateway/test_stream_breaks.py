"""A stream that fails: before its first text it is retried (or falls back), invisibly; after
it, it is neither repeated nor replaced, so the sink never shows any text twice, and the
interrupted attempt is billed (`RetryingModel`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from gateway_fakes import RecordingAdapter, make_agent
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo

from persyn.core.config import ModelsConfig, Settings, Task
from persyn.core.errors import ModelError
from persyn.gateway.base import Prompt, SinkEvent, UserTurn
from persyn.gateway.gateway import ModelGateway
from persyn.testing import registered_double
from persyn.testing.models import DoubleReply
from persyn.usage.meter import Meter

PROMPT = Prompt(system="You are Ada.", items=(UserTurn(text="Hello?"),))
ANSWER = "The garden needs water and some patience."


class Breaking:
    """Answers `ANSWER`; its first `breaking` calls break after `after` streamed chunks."""

    def __init__(self, after: int, breaking: int = 1) -> None:
        self.after = after
        self.breaking = breaking
        self.calls = 0

    def __call__(self, task: str | None, messages: list[ModelMessage], info: AgentInfo) -> Any:
        self.calls += 1
        if self.calls <= self.breaking:
            return DoubleReply(text=ANSWER, breaks_after=self.after)
        return DoubleReply(text=ANSWER)


def _settings(tmp_path: Path, respond: Any) -> Settings:
    return Settings(home=tmp_path, models=ModelsConfig(default="test:echo", respond=respond, max_retries=1))


def _shown(events: list[SinkEvent]) -> str:
    return "".join(event.text for event in events if event.kind == "delta")


async def test_a_stream_that_fails_before_its_first_text_is_retried_and_shown_once(
    tmp_path: Path, meter: Meter, recorder: RecordingAdapter
) -> None:
    double = Breaking(after=0)
    with registered_double("breaks", double):
        gateway = ModelGateway(
            _settings(tmp_path, "test:breaks"), make_agent(), meter, retry_base_delay=0.001
        )
        seen: list[SinkEvent] = []
        completion = await gateway.complete(Task.RESPOND, PROMPT, sink=seen.append)
        await gateway.aclose()
    meter.flush()
    assert double.calls == 2
    assert completion.text == ANSWER
    assert _shown(seen) == ANSWER
    assert [event.kind for event in seen][-1] == "end"
    assert len(recorder.records) == 1  # the retried attempt returned nothing to bill


async def test_a_stream_that_fails_before_its_first_text_falls_back_to_the_next_model(
    tmp_path: Path, meter: Meter, recorder: RecordingAdapter
) -> None:
    double = Breaking(after=0, breaking=99)
    with registered_double("breaks", double):
        gateway = ModelGateway(
            _settings(tmp_path, ["test:breaks", "test:echo"]), make_agent(), meter, retry_base_delay=0.001
        )
        seen: list[SinkEvent] = []
        completion = await gateway.complete(Task.RESPOND, PROMPT, sink=seen.append)
        await gateway.aclose()
    meter.flush()
    assert double.calls == 2  # the first try and its one retry
    assert (completion.model, completion.text) == ("test:echo", "You said: Hello?")
    assert _shown(seen) == "You said: Hello?"
    assert [record.model for record in recorder.records] == ["test:breaks", "test:echo"]


async def test_a_stream_that_breaks_off_mid_reply_is_not_repeated_and_its_attempt_is_billed(
    tmp_path: Path, meter: Meter, recorder: RecordingAdapter
) -> None:
    double = Breaking(after=3, breaking=99)
    with registered_double("breaks", double):
        gateway = ModelGateway(
            _settings(tmp_path, ["test:breaks", "test:echo"]), make_agent(), meter, retry_base_delay=0.001
        )
        seen: list[SinkEvent] = []
        with pytest.raises(ModelError, match="broke off its streamed reply"):
            await gateway.complete(Task.RESPOND, PROMPT, sink=seen.append)
        await gateway.aclose()
    meter.flush()
    assert double.calls == 1  # neither retried nor handed to the next model
    assert _shown(seen) == "The garden needs "  # three chunks, shown once
    assert [event.kind for event in seen][-1] == "end"
    assert [(r.model, r.output_tokens > 0) for r in recorder.records] == [("test:breaks", True)]


async def test_a_request_that_is_not_streamed_is_retried_as_before(  # positive control
    tmp_path: Path, meter: Meter, recorder: RecordingAdapter
) -> None:
    double = Breaking(after=3)
    with registered_double("breaks", double):
        gateway = ModelGateway(
            _settings(tmp_path, "test:breaks"), make_agent(), meter, retry_base_delay=0.001
        )
        completion = await gateway.complete(Task.RESPOND, PROMPT)
        await gateway.aclose()
    assert (double.calls, completion.text) == (2, ANSWER)
