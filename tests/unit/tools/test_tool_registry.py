"""The tool registry (SPEC §4.6): no tool failure escapes as an exception, definitions render
deterministically, and the loop breakers stop runaway tool use and record why."""

from __future__ import annotations

import asyncio
import json

import pytest
from pydantic import BaseModel, ConfigDict, Field

from persyn.core.config import ToolsConfig, parse_settings
from persyn.core.errors import ConfigError, ToolError
from persyn.gateway.base import ToolCall, ToolResult
from persyn.tools import LoopBreaker, Tool, ToolRegistry, ToolStatus, canonical_arguments
from persyn.tools.builtin.arithmetic import calculator_tool


class EchoIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(description="What to echo.")
    times: int = Field(default=1, ge=1, le=3)


class EchoOut(BaseModel):
    echoed: str


async def _echo(arguments: EchoIn) -> EchoOut:
    return EchoOut(echoed=" ".join([arguments.text] * arguments.times))


async def _explode(arguments: EchoIn) -> EchoOut:
    raise RuntimeError(f"disk on fire while echoing {arguments.text!r}")


async def _refuse(arguments: EchoIn) -> EchoOut:
    raise ToolError("the echo chamber is closed today")


async def _hang(arguments: EchoIn) -> EchoOut:
    await asyncio.sleep(60)
    raise AssertionError("unreachable")


async def _malformed(arguments: EchoIn) -> EchoOut:
    return {"wrong": 1}  # type: ignore[return-value]  # a handler that breaks its own contract


def _tool(name: str, handler=_echo, description: str = "Echo text back.") -> Tool[EchoIn, EchoOut]:  # type: ignore[no-untyped-def]
    return Tool(name=name, description=description, input_model=EchoIn, output_model=EchoOut, handler=handler)


def _call(name: str, call_id: str = "c1", **args: object) -> ToolCall:
    return ToolCall(id=call_id, name=name, args=dict(args))


async def test_a_call_validates_runs_and_returns_the_output_as_json() -> None:
    registry = ToolRegistry([_tool("echo")])
    outcome = await registry.call(_call("echo", text="hi", times=2))
    assert outcome.status is ToolStatus.OK and outcome.ok
    assert outcome.output == {"echoed": "hi hi"}
    assert json.loads(outcome.content) == {"echoed": "hi hi"}
    assert outcome.arguments == '{"text":"hi","times":2}'
    assert outcome.as_result() == ToolResult(
        call_id="c1", name="echo", content=outcome.content, is_error=False
    )


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({}, "text: Field required"),
        ({"text": "hi", "times": 9}, "times: Input should be less than or equal to 3"),
        ({"text": "hi", "colour": "red"}, "colour: Extra inputs are not permitted"),
        ({"text": ["not", "a", "string"]}, "text: Input should be a valid string"),
    ],
)
async def test_invalid_arguments_become_a_result_naming_the_field(
    args: dict[str, object], expected: str
) -> None:
    registry = ToolRegistry([_tool("echo")])
    outcome = await registry.call(ToolCall(id="c1", name="echo", args=args))
    assert outcome.status is ToolStatus.INVALID_ARGUMENTS
    assert outcome.content.startswith("Invalid arguments for tool 'echo': ")
    assert expected in outcome.content
    assert outcome.as_result().is_error


async def test_an_unknown_tool_becomes_a_result_listing_the_known_ones() -> None:
    registry = ToolRegistry([_tool("echo"), calculator_tool()])
    outcome = await registry.call(_call("search_web", query="x"))
    assert outcome.status is ToolStatus.UNKNOWN_TOOL
    assert outcome.content == "There is no tool named 'search_web'. Available tools: calculate, echo."


@pytest.mark.parametrize(
    ("handler", "expected"),
    [
        (_explode, "Tool 'boom' failed: RuntimeError: disk on fire while echoing 'hi'"),
        (_refuse, "Tool 'boom' failed: the echo chamber is closed today"),
        (_malformed, "Tool 'boom' failed: it returned malformed output"),
    ],
)
async def test_handler_failures_become_error_results(handler, expected: str) -> None:  # type: ignore[no-untyped-def]
    registry = ToolRegistry([_tool("boom", handler)])
    outcome = await registry.call(_call("boom", text="hi"))
    assert outcome.status is ToolStatus.FAILED
    assert outcome.content.startswith(expected)
    assert outcome.error == outcome.content
    assert outcome.as_result().is_error


async def test_a_hanging_tool_is_stopped_at_the_timeout() -> None:
    registry = ToolRegistry([_tool("slow", _hang)], config=ToolsConfig(call_timeout_seconds=0.05))
    outcome = await registry.call(_call("slow", text="hi"))
    assert outcome.status is ToolStatus.FAILED
    assert outcome.content == "Tool 'slow' did not finish within 0.05 seconds and was stopped."


async def test_a_long_result_is_cut_and_says_so() -> None:
    registry = ToolRegistry([_tool("echo")], config=ToolsConfig(max_result_chars=200))
    outcome = await registry.call(_call("echo", text="x" * 300))
    assert outcome.content.startswith('{"echoed":"' + "x" * 189)
    assert outcome.content.endswith("\n[… 113 more characters cut]")
    assert outcome.output == {"echoed": "x" * 300}  # the record keeps it whole


def test_definitions_render_identically_whatever_the_registration_order() -> None:
    tools = [_tool("echo"), _tool("alpha", description="First alphabetically."), calculator_tool()]
    forward, backward = ToolRegistry(tools), ToolRegistry(reversed(tools))
    assert forward.render() == backward.render()
    assert forward.specs() == backward.specs()
    assert [spec.name for spec in forward.specs()] == ["alpha", "calculate", "echo"]
    rendered = json.loads(forward.render())
    assert [entry["name"] for entry in rendered] == ["alpha", "calculate", "echo"]
    assert rendered[2]["input_schema"]["required"] == ["text"]
    assert rendered[2]["output_schema"]["properties"] == {"echoed": {"title": "Echoed", "type": "string"}}
    # Keys are sorted at every level, so the bytes never depend on dict order.
    spec_json = json.dumps(forward.specs()[2].parameters)
    assert spec_json == json.dumps(forward.specs()[2].parameters, sort_keys=True)


def test_pydantic_ai_definitions_carry_both_schemas() -> None:
    (definition,) = ToolRegistry([calculator_tool()]).tool_definitions()
    assert definition.name == "calculate"
    assert definition.parameters_json_schema["required"] == ["expression"]
    assert definition.return_schema is not None
    assert set(definition.return_schema["properties"]) == {"expression", "value", "exact", "decimal"}


def test_bad_tools_are_refused_at_registration() -> None:
    with pytest.raises(ConfigError, match="invalid tool name 'two words'"):
        _tool("two words")
    with pytest.raises(ConfigError, match="needs a description"):
        _tool("quiet", description="  ")
    registry = ToolRegistry([_tool("echo")])
    with pytest.raises(ConfigError, match="already registered"):
        registry.register(_tool("echo"))


def test_canonical_arguments_ignore_key_order() -> None:
    assert canonical_arguments({"b": 1, "a": {"y": 2, "x": "é"}}) == '{"a":{"x":"é","y":2},"b":1}'


async def test_identical_calls_past_the_limit_are_refused_without_running() -> None:
    runs: list[str] = []

    async def counting(arguments: EchoIn) -> EchoOut:
        runs.append(arguments.text)
        return EchoOut(echoed=arguments.text)

    registry = ToolRegistry([_tool("echo", counting)], config=ToolsConfig(max_identical_calls=2))
    breaker = registry.breaker()
    outcomes = [
        await registry.call(ToolCall(id=f"c{i}", name="echo", args=args), breaker)
        for i, args in enumerate(
            [{"text": "a"}, {"text": "b"}, {"text": "a"}, {"text": "a"}, {"text": "a", "times": 1}]
        )
    ]
    assert [o.status for o in outcomes] == [
        ToolStatus.OK,
        ToolStatus.OK,
        ToolStatus.OK,
        ToolStatus.BREAKER_TRIPPED,
        ToolStatus.OK,  # different arguments (times given): a different call
    ]
    assert runs == ["a", "b", "a", "a"]
    refused = outcomes[3]
    assert refused.content.startswith("Not run: 'echo' was already called 2 times with exactly these")
    assert refused.as_result().is_error
    (trip,) = breaker.trips
    assert trip == refused.trip
    assert (trip.reason, trip.tool, trip.arguments, trip.count, trip.limit) == (
        "repeated_call",
        "echo",
        '{"text":"a"}',
        3,
        2,
    )


async def test_round_trips_past_the_limit_trip_and_their_calls_are_refused() -> None:
    registry = ToolRegistry([_tool("echo")], config=ToolsConfig(max_round_trips=2, max_identical_calls=5))
    breaker = registry.breaker()
    assert breaker.begin_round_trip() is None
    assert breaker.begin_round_trip() is None
    assert breaker.exhausted and not breaker.tripped
    trip = breaker.begin_round_trip()
    assert trip is not None and trip.reason == "max_round_trips" and (trip.count, trip.limit) == (3, 2)
    calls = [_call("echo", "c7", text="x"), _call("echo", "c8", text="y")]
    refused = registry.refuse(calls, trip)
    assert [(o.call_id, o.status) for o in refused] == [
        ("c7", ToolStatus.BREAKER_TRIPPED),
        ("c8", ToolStatus.BREAKER_TRIPPED),
    ]
    assert refused[0].content.startswith("Tool use stopped: this turn already used 2 rounds")
    assert breaker.trips == (trip,) and breaker.round_trips == 2


def test_breaker_limits_are_validated() -> None:
    with pytest.raises(ConfigError, match="max_round_trips must be at least 1, got 0"):
        LoopBreaker(max_round_trips=0, max_identical_calls=2)
    with pytest.raises(ConfigError, match="max_identical_calls must be at least 1, got -1"):
        LoopBreaker(max_round_trips=3, max_identical_calls=-1)


def test_the_tools_config_section(tmp_path) -> None:  # type: ignore[no-untyped-def]
    settings = parse_settings({"tools": {"max_round_trips": 3}}, tmp_path, environ={})
    assert (settings.tools.max_round_trips, settings.tools.max_identical_calls) == (3, 2)
    from_env = parse_settings({}, tmp_path, environ={"PERSYN_TOOLS__MAX_IDENTICAL_CALLS": "4"})
    assert from_env.tools.max_identical_calls == 4
    with pytest.raises(
        ConfigError, match=r"tools\.max_round_trips: Input should be greater than or equal to 1 \(got 0\)"
    ):
        parse_settings({"tools": {"max_round_trips": 0}}, tmp_path, environ={})
    with pytest.raises(ConfigError, match=r"tools\.max_loops: unknown key"):
        parse_settings({"tools": {"max_loops": 3}}, tmp_path, environ={})
