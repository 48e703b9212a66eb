"""The deterministic doubles of `persyn.testing`, driven through the real gateway."""

from __future__ import annotations

import json
import time
from datetime import datetime
from enum import Enum
from pathlib import Path
from typing import Literal

import pytest
from gateway_fakes import RecordingAdapter, make_agent, make_settings
from pydantic import BaseModel, Field

from persyn.core.config import Task
from persyn.core.errors import ModelError
from persyn.gateway.base import Prompt, SinkEvent, TokenUsage, ToolCall, UserTurn
from persyn.gateway.gateway import ModelGateway
from persyn.gateway.registry import ModelSpec
from persyn.testing import (
    build_double,
    minimal_instance,
    register_double,
    registered_double,
    unregister_double,
)
from persyn.usage.meter import Meter


def prompt(text: str, *, name: str | None = None, system: str = "You are Ada.") -> Prompt:
    return Prompt(system=system, items=(UserTurn(text=text, name=name),), stable_prefix_chars=len(system))


class Mood(Enum):
    CALM = "calm"
    CURIOUS = "curious"


class Objection(BaseModel):
    claim: str = Field(min_length=3)
    severity: int = Field(ge=1, le=5)


class Critique(BaseModel):
    objections: list[Objection] = Field(min_length=1)
    mood: Mood
    confidence: float = Field(gt=0.5)
    speak: bool
    note: str | None
    kind: Literal["adversarial", "provenance"]
    when: datetime
    optional: int = 3


async def complete(
    tmp_path: Path, model: str, request: Prompt, **kwargs: object
) -> tuple[object, list[object]]:
    recorder = RecordingAdapter()
    meter = Meter([recorder])
    gateway = ModelGateway(make_settings(tmp_path, model), make_agent(), meter)
    try:
        completion = await gateway.complete(Task.RESPOND, request, **kwargs)  # type: ignore[arg-type]
    finally:
        await gateway.aclose()
        meter.close()
    return completion, list(recorder.records)


async def test_echo_repeats_the_last_user_message(tmp_path: Path) -> None:
    completion, records = await complete(tmp_path, "test:echo", prompt("Is it raining?", name="Bob"))
    assert completion.text == "You said: Is it raining?"  # type: ignore[attr-defined]
    # usage is deterministic: 4 characters a token over the instruction and the dialog
    expected_input = -(-len("You are Ada." + "[Bob] Is it raining?") // 4)
    assert completion.usage == TokenUsage(  # type: ignore[attr-defined]
        input_tokens=expected_input, output_tokens=-(-len("You said: Is it raining?") // 4)
    )
    assert len(records) == 1


async def test_echo_streams_the_same_text(tmp_path: Path) -> None:
    seen: list[SinkEvent] = []
    completion, _ = await complete(tmp_path, "test:echo", prompt("one two three"), sink=seen.append)
    assert "".join(event.text for event in seen) == completion.text == "You said: one two three"  # type: ignore[attr-defined]


async def test_echo_fills_structured_output_with_minimal_valid_values(tmp_path: Path) -> None:
    completion, _ = await complete(tmp_path, "test:echo", prompt("judge this"), output=Critique)
    critique = completion.output  # type: ignore[attr-defined]
    assert isinstance(critique, Critique)
    assert critique.speak is True
    assert critique.objections == [Objection(claim="xxx", severity=1)]
    assert critique.mood is Mood.CALM
    assert critique.kind == "adversarial"


async def test_instant_is_fixed_and_cheap(tmp_path: Path) -> None:
    completion, records = await complete(tmp_path, "test:instant", prompt("a long question " * 50))
    assert completion.text == "OK."  # type: ignore[attr-defined]
    assert completion.usage == TokenUsage(input_tokens=1, output_tokens=1)  # type: ignore[attr-defined]
    assert records[0].tier == "strong"  # type: ignore[attr-defined]  # unnamed: strong


def test_minimal_instance_validates_against_its_schema() -> None:
    schema = Critique.model_json_schema()
    Critique.model_validate(minimal_instance(schema))


def write_rules(path: Path, rules: list[dict[str, object]]) -> str:
    path.write_text(json.dumps(rules), encoding="utf-8")
    return f"test:script@{path}"


async def test_script_first_matching_rule_wins(tmp_path: Path) -> None:
    model = write_rules(
        tmp_path / "rules.json",
        [
            {"task": "summarize", "reply": "not this one"},
            {
                "match": "(?i)weather",
                "reply": "Let me look.",
                "tool_calls": [{"name": "lookup", "args": {"q": "sky"}}],
            },
            {
                "match": "hello",
                "reply": "Hi!",
                "times": 1,
                "usage": {"input_tokens": 50, "cache_read_tokens": 40},
            },
        ],
    )
    weather, _ = await complete(tmp_path, model, prompt("How is the Weather?"))
    assert weather.text == "Let me look."  # type: ignore[attr-defined]
    assert weather.tool_calls == (ToolCall(id="call_1", name="lookup", args={"q": "sky"}),)  # type: ignore[attr-defined]

    hello, records = await complete(tmp_path, model, prompt("hello"))
    assert hello.text == "Hi!"  # type: ignore[attr-defined]
    assert records[0].cache_read_tokens == 40  # type: ignore[attr-defined]
    assert hello.usage == TokenUsage(input_tokens=50, cache_read_tokens=40)  # type: ignore[attr-defined]


async def test_script_times_limits_a_rule_then_falls_back_to_echo(tmp_path: Path) -> None:
    model = write_rules(tmp_path / "rules.json", [{"reply": "once", "times": 1}])
    spec = ModelSpec(provider="test", name="script", script=str(tmp_path / "rules.json"))
    double = build_double(spec)
    recorder = RecordingAdapter()
    meter = Meter([recorder])
    gateway = ModelGateway(make_settings(tmp_path, model), make_agent(), meter)
    first = await gateway.complete(Task.RESPOND, prompt("ping"))
    second = await gateway.complete(Task.RESPOND, prompt("ping"))
    await gateway.aclose()
    meter.close()
    assert (first.text, second.text) == ("once", "You said: ping")
    assert double.model_name == "test:script"


async def test_script_structured_output_and_sleep(tmp_path: Path) -> None:
    class Verdict(BaseModel):
        speak: bool
        reason: str

    model = write_rules(
        tmp_path / "rules.json",
        [{"task": "respond", "output": {"speak": False, "reason": "nothing to add"}, "sleep_ms": 50}],
    )
    started = time.monotonic()
    completion, _ = await complete(tmp_path, model, prompt("hm"), output=Verdict)
    assert time.monotonic() - started >= 0.05
    assert completion.output == Verdict(speak=False, reason="nothing to add")  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json", "invalid test:script rules file"),
        ('[{"reply": "x", "unknown": 1}]', "invalid test:script rules file"),
        ('[{"match": "("}]', "invalid regex"),
    ],
)
def test_script_file_errors_are_model_errors(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "rules.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ModelError, match=message):
        build_double(ModelSpec(provider="test", name="script", script=str(path)))


def test_missing_script_file_is_a_model_error(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="cannot read"):
        build_double(ModelSpec(provider="test", name="script", script=str(tmp_path / "absent.json")))


def test_unknown_double_lists_the_available_ones() -> None:
    with pytest.raises(
        ModelError, match=r"no test double named 'nope'; available: echo, instant, script, unreachable"
    ):
        build_double(ModelSpec(provider="test", name="nope"))


def test_register_double_guards_names() -> None:
    with pytest.raises(ValueError, match="built-in"):
        register_double("echo", lambda *_: "x")
    register_double("mine", lambda *_: "x")
    try:
        with pytest.raises(ValueError, match="already registered"):
            register_double("mine", lambda *_: "y")
    finally:
        unregister_double("mine")


async def test_registered_double_may_be_async(tmp_path: Path) -> None:
    async def fn(task: str | None, messages: object, info: object) -> str:
        return f"async for {task}"

    with registered_double("later", fn):
        completion, _ = await complete(tmp_path, "test:later", prompt("x"))
    assert completion.text == "async for respond"  # type: ignore[attr-defined]
