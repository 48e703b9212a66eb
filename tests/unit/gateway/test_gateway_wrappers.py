"""The wrappers every model call goes through: a task's fallback chain (each attempt metered with
the model that made it), the concurrency limit, and a composition root's own wrapper."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from gateway_fakes import RecordingAdapter, make_agent
from pydantic import BaseModel
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models import Model, ModelRequestParameters
from pydantic_ai.models.function import AgentInfo
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings

from persyn.core.config import AgentConfig, ModelsConfig, Settings, Task
from persyn.core.errors import ModelUnavailableError
from persyn.core.ids import new_id
from persyn.gateway.base import Prompt, SinkEvent, UserTurn
from persyn.gateway.gateway import ModelGateway
from persyn.testing import registered_double
from persyn.usage.meter import Meter

PROMPT = Prompt(system="You are Ada.", items=(UserTurn(text="Hello?"),))


class Verdict(BaseModel):
    """Whether to speak."""

    speak: bool


def chain_settings(tmp_path: Path, respond: Any, **models: Any) -> Settings:
    models.setdefault("default", "test:echo")
    return Settings(home=tmp_path, models=ModelsConfig(respond=respond, max_retries=1, **models))


async def test_the_next_model_answers_when_the_first_fails_and_both_attempts_are_metered(
    tmp_path: Path, meter: Meter, recorder: RecordingAdapter
) -> None:
    gateway = ModelGateway(
        chain_settings(tmp_path, ["test:unreachable", "test:echo"]),
        make_agent(),
        meter,
        retry_base_delay=0.001,
    )
    completion = await gateway.complete(Task.RESPOND, PROMPT)
    await gateway.aclose()
    meter.flush()
    assert completion.text == "You said: Hello?"
    assert completion.model == "test:echo"
    assert [(r.model, r.stage, r.input_tokens + r.output_tokens > 0) for r in recorder.records] == [
        ("test:unreachable", "respond", False),
        ("test:echo", "respond", True),
    ]
    assert completion.usage_id == recorder.records[1].id


async def test_a_chain_serves_structured_output_and_streams(
    tmp_path: Path, meter: Meter, recorder: RecordingAdapter
) -> None:
    settings = chain_settings(
        tmp_path, ["test:unreachable", "test:echo"], decide=["test:unreachable", "test:instant"]
    )
    gateway = ModelGateway(settings, make_agent(), meter, retry_base_delay=0.001)
    seen: list[SinkEvent] = []
    streamed = await gateway.complete(Task.RESPOND, PROMPT, sink=seen.append)
    decided = await gateway.complete(Task.DECIDE, PROMPT, output=Verdict)
    await gateway.aclose()
    meter.flush()
    assert "".join(event.text for event in seen if event.kind == "delta") == "You said: Hello?"
    assert (streamed.model, streamed.usage_id) == ("test:echo", recorder.records[1].id)
    assert (decided.output, decided.model) == (Verdict(speak=True), "test:instant")
    assert [record.model for record in recorder.records] == [
        "test:unreachable",
        "test:echo",
        "test:unreachable",
        "test:instant",
    ]


async def test_when_every_model_fails_the_error_names_each(tmp_path: Path, meter: Meter) -> None:
    gateway = ModelGateway(
        chain_settings(tmp_path, ["test:unreachable", "test:unreachable"]),
        make_agent(),
        meter,
        retry_base_delay=0.001,
    )
    with pytest.raises(ModelUnavailableError) as caught:
        await gateway.complete(Task.RESPOND, PROMPT)
    await gateway.aclose()
    assert str(caught.value).count("'test:unreachable' failed after 2 attempt(s)") == 2


async def test_an_agent_may_name_its_own_chain(tmp_path: Path, meter: Meter) -> None:
    agent = AgentConfig(name="Ada", id=new_id(), models={"respond": ["test:unreachable", "test:instant"]})
    gateway = ModelGateway(chain_settings(tmp_path, None), agent, meter, retry_base_delay=0.001)
    completion = await gateway.complete(Task.RESPOND, PROMPT)
    await gateway.aclose()
    assert (completion.text, completion.model) == ("OK.", "test:instant")
    assert str(gateway.spec_for(Task.RESPOND)) == "test:unreachable"


def test_an_empty_chain_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="needs at least one model string"):
        ModelsConfig(respond=[])
    with pytest.raises(ValueError, match="blank model string"):
        AgentConfig(name="Ada", id=new_id(), models={"respond": ["test:echo", " "]})


class Overlap:
    """A double that counts how many of its requests are in flight at once."""

    def __init__(self) -> None:
        self.active = 0
        self.peak = 0

    async def __call__(self, task: str | None, messages: list[ModelMessage], info: AgentInfo) -> str:
        self.active += 1
        self.peak = max(self.peak, self.active)
        for _ in range(5):
            await asyncio.sleep(0)  # let every other waiting request in, if it may enter
        self.active -= 1
        return "done"


@pytest.mark.parametrize(("limit", "peak"), [(0, 3), (1, 1), (2, 2)])
async def test_the_concurrency_limit_bounds_requests_in_flight(
    tmp_path: Path, meter: Meter, limit: int, peak: int
) -> None:
    overlap = Overlap()
    settings = Settings(
        home=tmp_path, models=ModelsConfig(default="test:overlap", max_concurrent_requests=limit)
    )
    gateway = ModelGateway(settings, make_agent(), meter)
    with registered_double("overlap", overlap):
        answers = await asyncio.gather(*(gateway.complete(Task.RESPOND, PROMPT) for _ in range(3)))
    await gateway.aclose()
    assert [answer.text for answer in answers] == ["done"] * 3
    assert overlap.peak == peak


class Tally(WrapperModel):
    """A composition root's wrapper: sees every request of a task's model, whichever model of
    the chain serves it."""

    def __init__(self, wrapped: Model, seen: list[str]) -> None:
        super().__init__(wrapped)
        self._seen = seen

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        response = await self.wrapped.request(messages, model_settings, model_request_parameters)
        self._seen.append(str((response.metadata or {}).get("persyn_model")))
        return response


async def test_wrappers_of_the_composition_root_wrap_the_whole_chain(tmp_path: Path, meter: Meter) -> None:
    seen: list[str] = []
    gateway = ModelGateway(
        chain_settings(tmp_path, ["test:unreachable", "test:echo"]),
        make_agent(),
        meter,
        retry_base_delay=0.001,
        wrappers=[lambda model: Tally(model, seen)],
    )
    await gateway.complete(Task.RESPOND, PROMPT)
    await gateway.complete(Task.SUMMARIZE, PROMPT)
    await gateway.aclose()
    assert seen == ["test:echo", "test:echo"]
