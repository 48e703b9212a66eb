"""Provider differences come from the model each provider builds (its profile and settings),
over real HTTP: a fake OpenAI-compatible server on loopback."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from gateway_fakes import LoopbackServer, ScriptedAPI, make_agent, make_settings, openai_error, openai_text
from pydantic import BaseModel
from pydantic_ai.models import Model

from persyn.core.config import ModelsConfig, Settings, Task
from persyn.core.errors import ModelError
from persyn.gateway.base import Prompt, UserTurn
from persyn.gateway.gateway import ModelGateway
from persyn.gateway.openai import build_local_model
from persyn.gateway.registry import ModelSpec
from persyn.usage.meter import Meter

PROMPT = Prompt(system="You are Ada.", items=(UserTurn(text="Rate this."),))


class Rating(BaseModel):
    score: int


@pytest.fixture
def api(serve: Callable[[Any], LoopbackServer]) -> tuple[ScriptedAPI, str]:
    api = ScriptedAPI("/v1/chat/completions")
    return api, f"{serve(api.app).url}/v1"


@pytest.mark.parametrize("status", [422, 500])  # llama-cpp-python's server answers 500
async def test_a_server_that_refuses_json_schema_is_asked_for_json_objects_from_then_on(
    tmp_path: Path, api: tuple[ScriptedAPI, str], meter: Meter, status: int
) -> None:
    server, url = api
    # The refusal's wording is the server's own business: the retry in json_object mode says it.
    server.then(openai_error(status, "unprocessable request")).then(openai_text('{"score": 3}'))
    server.then(openai_text('{"score": 4}'))
    gateway = ModelGateway(make_settings(tmp_path, f"openai:llama@{url}"), make_agent(), meter)
    first = await gateway.complete(Task.RATE, PROMPT, output=Rating)
    second = await gateway.complete(Task.RATE, PROMPT, output=Rating)
    await gateway.aclose()
    assert (first.output, second.output) == (Rating(score=3), Rating(score=4))
    formats = [request["response_format"] for request in server.requests]
    assert [f["type"] for f in formats] == ["json_schema", "json_object", "json_object"]
    assert formats[1]["schema"]["required"] == ["score"]


async def test_an_unrelated_refusal_switches_nothing(
    tmp_path: Path, api: tuple[ScriptedAPI, str], meter: Meter
) -> None:
    server, url = api
    server.then(openai_error(400, "context too long")).then(openai_error(400, "context too long"))
    server.then(openai_text('{"score": 5}'))
    gateway = ModelGateway(make_settings(tmp_path, f"openai:llama@{url}"), make_agent(), meter)
    with pytest.raises(ModelError, match="HTTP 400"):
        await gateway.complete(Task.RATE, PROMPT, output=Rating)
    assert (await gateway.complete(Task.RATE, PROMPT, output=Rating)).output == Rating(score=5)
    await gateway.aclose()
    assert server.requests[-1]["response_format"]["type"] == "json_schema"


async def test_the_local_server_gets_json_objects_with_the_schema_and_the_local_bound(
    tmp_path: Path, api: tuple[ScriptedAPI, str], meter: Meter
) -> None:
    server, url = api
    server.then(openai_text('{"score": 2}')).then(openai_text("Hi."))
    settings = Settings(home=tmp_path, models=ModelsConfig(default="local:", local_max_output_tokens=99))

    def local(spec: ModelSpec) -> Model:
        return build_local_model("gemma.gguf", url, 10.0, settings.models.local_max_output_tokens)

    gateway = ModelGateway(settings, make_agent(), meter, local_factory=local)
    rated = await gateway.complete(Task.RATE, PROMPT, output=Rating)
    said = await gateway.complete(Task.RESPOND, PROMPT)
    await gateway.aclose()
    assert (rated.output, said.text) == (Rating(score=2), "Hi.")
    structured, plain = server.requests
    response_format = structured["response_format"]
    assert response_format["type"] == "json_object"
    assert response_format["schema"]["properties"] == {"score": {"type": "integer"}}
    assert "response_format" not in plain
    assert (structured["max_tokens"], plain["max_tokens"]) == (99, 99)
