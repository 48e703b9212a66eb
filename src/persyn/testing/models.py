"""Deterministic model doubles (ARCHITECTURE §5: tests never call a paid model).

Doubles are pydantic-ai `FunctionModel`s selected from configuration as `test:NAME`, so the
real CLI and runtime run them through the real gateway — no monkeypatching:

- `test:echo` — "You said: …" from the last user message; structured output is filled with
  minimal valid values; usage is computed from the text (4 characters a token).
- `test:instant` — a fixed short reply and 1/1 tokens: the cheapest possible call.
- `test:script@/abs/rules.json` — rules from a JSON file, first match wins (see `ScriptRule`);
  for subprocess end-to-end tests. Unmatched requests fall back to the echo reply.
- `test:unreachable` — every request fails like an unreachable server (for fallback chains).
- `test:vision` — the only double whose profile can see images: it captions one from its
  pixels (`testing/vision.py`) for the `caption` task and echoes otherwise.
- anything added with `register_double(name, fn)` — in-process, for unit tests.

The gateway builds them like any provider's models: `build_test_model` is the `test` entry of
the `persyn.model_providers` entry points (pyproject.toml), so the gateway never imports this
module; configuring a `test:` model is what loads it.

**How a double learns its task:** the gateway stamps every `ModelRequest` it sends with
`metadata[TASK_METADATA_KEY] = task.value` (metadata is kept in the history pydantic-ai hands
the model, never sent to a provider); `task_of(messages)` reads it back.

Minimal structured values are the schema's smallest valid instance, except that booleans are
`true`: a double should let a "should I speak?" gate through rather than silence the agent.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import (
    BinaryContent,
    InstructionPart,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ModelResponsePart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestParameters, StreamedResponse
from pydantic_ai.models.function import (
    AgentInfo,
    DeltaToolCall,
    DeltaToolCalls,
    FunctionModel,
    FunctionStreamedResponse,
)
from pydantic_ai.profiles import ModelProfile
from pydantic_ai.settings import ModelSettings
from pydantic_ai.usage import RequestUsage

from persyn.core.errors import ModelError
from persyn.gateway.base import TASK_METADATA_KEY, TokenUsage
from persyn.gateway.providers import BuildContext
from persyn.gateway.registry import ModelSpec
from persyn.testing.vision import describe_image

__all__ = [
    "BUILTIN_DOUBLES",
    "DoubleFunction",
    "DoubleModel",
    "DoubleReply",
    "DoubleResult",
    "ScriptResponder",
    "ScriptRule",
    "build_double",
    "build_test_model",
    "echo_text",
    "estimate_tokens",
    "feelings",
    "last_user_images",
    "last_user_text",
    "minimal_instance",
    "output_schema",
    "register_double",
    "registered_double",
    "task_of",
    "unregister_double",
]

BUILTIN_DOUBLES = frozenset({"unreachable", "echo", "instant", "script", "vision"})
INSTANT_REPLY = "OK."
_SPEAKER_TAG = re.compile(r"^\[[^\]\n]{1,80}\]\s*")


@dataclass(frozen=True)
class DoubleReply:
    """What a double answers, in plain terms; turned into a `ModelResponse` for it.

    `output` is the structured result (sent as the output tool's arguments, or as JSON text
    for native output); `tool_calls` are `{"name": ..., "args": {...}}`; `usage` overrides
    the computed token counts (e.g. to report cache reads).

    `breaks_after` makes the reply fail like a provider that drops the connection with a 503:
    streamed, after that many chunks (0: accepted, then failing before any text); not
    streamed, before anything is returned. What a retry or a fallback does about it is the
    wrappers' business (`gateway/wrappers/`).

    `hold` = (n, gate) makes a streamed reply stop after its first n chunks until `gate` is set:
    a test sees what the platform did with the start of a reply while the rest is unwritten.
    """

    text: str = ""
    output: Mapping[str, Any] | BaseModel | None = None
    tool_calls: Sequence[Mapping[str, Any]] = ()
    usage: TokenUsage | None = None
    sleep_ms: int = 0
    breaks_after: int | None = None
    hold: tuple[int, asyncio.Event] | None = None


DoubleResult = ModelResponse | DoubleReply | str | BaseModel | Mapping[str, Any] | None
DoubleFunction = Callable[[str | None, list[ModelMessage], AgentInfo], DoubleResult | Awaitable[DoubleResult]]
"""`fn(task, messages, info)`: task is the `Task` value the gateway is serving (or None)."""

_registry: dict[str, DoubleFunction] = {}
_seeing: set[str] = set()  # registered doubles whose profile takes images


# registry -----------------------------------------------------------------------------------
def register_double(name: str, fn: DoubleFunction, *, replace: bool = False, sees: bool = False) -> None:
    """Make `test:NAME` answer with `fn` in this process; with `sees`, its profile takes images
    (`ModelGateway.can_see`)."""
    if name in BUILTIN_DOUBLES:
        raise ValueError(f"{name!r} is a built-in double; choose another name")
    if name in _registry and not replace:
        raise ValueError(f"a double named {name!r} is already registered (pass replace=True)")
    _registry[name] = fn
    if sees:
        _seeing.add(name)
    else:
        _seeing.discard(name)


def unregister_double(name: str) -> None:
    _registry.pop(name, None)
    _seeing.discard(name)


@contextmanager
def registered_double(name: str, fn: DoubleFunction, *, sees: bool = False) -> Iterator[None]:
    """`register_double` for the duration of a `with` block (unit tests)."""
    register_double(name, fn, replace=True, sees=sees)
    try:
        yield
    finally:
        unregister_double(name)


def build_test_model(spec: ModelSpec, context: BuildContext) -> DoubleModel:
    """The `test` provider's builder (registered through the entry points)."""
    return build_double(spec)


def build_double(spec: ModelSpec) -> DoubleModel:
    """The double a `test:` spec names."""
    if spec.name == "unreachable":
        return DoubleModel("unreachable", _unreachable)
    if spec.name == "echo":
        return DoubleModel("echo", _echo)
    if spec.name == "instant":
        return DoubleModel("instant", _instant)
    if spec.name == "vision":
        return DoubleModel("vision", _vision, sees=True)
    if spec.name == "script":
        if spec.script is None:
            raise ModelError("test:script needs a rules file: test:script@/abs/path.json")
        return DoubleModel("script", ScriptResponder(Path(spec.script)))
    fn = _registry.get(spec.name)
    if fn is None:
        known = ", ".join(sorted(BUILTIN_DOUBLES | set(_registry)))
        raise ModelError(f"no test double named {spec.name!r}; available: {known}")
    return DoubleModel(spec.name, fn, sees=spec.name in _seeing)


# the model ----------------------------------------------------------------------------------
class DoubleModel(FunctionModel):
    """A `FunctionModel` driven by a `DoubleFunction`, streamed or not.

    Streaming replays the same reply as text and tool-call deltas (through pydantic-ai's
    `FunctionStreamedResponse`) and then reports the reply's usage, so cache-read tokens set
    by a double survive streaming too.
    """

    def __init__(self, name: str, responder: DoubleFunction, *, sees: bool = False) -> None:
        self._responder = responder
        # Structured output as an output tool, like Claude's (the profile is what picks it).
        profile = ModelProfile(
            default_structured_output_mode="tool",
            supports_json_schema_output=True,
            supports_json_object_output=True,
            supports_image_input=sees,
        )
        super().__init__(
            self._respond, stream_function=self._stream, model_name=f"test:{name}", profile=profile
        )

    async def _answer(
        self, messages: list[ModelMessage], info: AgentInfo
    ) -> tuple[ModelResponse, int | None, tuple[int, asyncio.Event] | None]:
        """The reply, after how many streamed chunks it breaks (None: it does not) and where
        its stream is held (`DoubleReply.hold`)."""
        result = self._responder(task_of(messages), messages, info)
        if isinstance(result, Awaitable):
            result = await cast(Awaitable[DoubleResult], result)
        breaks_after = result.breaks_after if isinstance(result, DoubleReply) else None
        hold = result.hold if isinstance(result, DoubleReply) else None
        return await _to_response(result, messages, info), breaks_after, hold

    async def _respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        response, breaks_after, _ = await self._answer(messages, info)
        if breaks_after is not None:
            raise _dropped(self.model_name)
        return response

    async def _stream(
        self, messages: list[ModelMessage], info: AgentInfo
    ) -> AsyncIterator[str | DeltaToolCalls]:
        response, breaks_after, hold = await self._answer(messages, info)
        async for chunk in _aiter(_chunks(response), breaks_after, self.model_name, hold):
            yield chunk

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: Any = None,
    ) -> AsyncIterator[StreamedResponse]:
        model_settings, params = self.prepare_request(model_settings, model_request_parameters)
        info = AgentInfo(
            function_tools=params.declared_function_tools,
            allow_text_output=params.allow_text_output,
            output_tools=params.output_tools,
            model_settings=model_settings,
            model_request_parameters=params,
            instructions=InstructionPart.join(params.instruction_parts or []),
        )
        response, breaks_after, hold = await self._answer(messages, info)
        yield _ReplayStream(
            model_request_parameters=params,
            _model_name=self.model_name,
            _iter=_aiter(_chunks(response), breaks_after, self.model_name, hold),
            _final_usage=response.usage,
        )


@dataclass
class _ReplayStream(FunctionStreamedResponse):
    """A function stream whose usage, once drained, is the reply's own (not an estimate)."""

    _final_usage: RequestUsage = field(default_factory=RequestUsage)

    async def _get_event_iterator(self) -> AsyncIterator[Any]:
        async for event in super()._get_event_iterator():
            yield event
        self._usage = self._final_usage


async def _aiter(
    items: Sequence[str | DeltaToolCalls],
    breaks_after: int | None = None,
    model_name: str = "",
    hold: tuple[int, asyncio.Event] | None = None,
) -> AsyncIterator[str | DeltaToolCalls]:
    for index, item in enumerate(items):
        if hold is not None and index == hold[0]:
            await hold[1].wait()
        if index == breaks_after:
            raise _dropped(model_name)
        yield item
    if breaks_after is not None and breaks_after >= len(items):
        raise _dropped(model_name)


def _dropped(model_name: str) -> ModelHTTPError:
    """What a provider's dropped stream looks like to pydantic-ai: a transient 503."""
    return ModelHTTPError(status_code=503, model_name=model_name, body="the double dropped the stream")


def _chunks(response: ModelResponse) -> list[str | DeltaToolCalls]:
    chunks: list[str | DeltaToolCalls] = []
    for index, part in enumerate(response.parts):
        if isinstance(part, TextPart):
            chunks.extend(re.findall(r"\S+\s*|\s+", part.content))
        elif isinstance(part, ToolCallPart):
            chunks.append(
                {
                    index: DeltaToolCall(
                        part.tool_name, part.args_as_json_str(), tool_call_id=part.tool_call_id
                    )
                }
            )
    return chunks


# turning results into responses -------------------------------------------------------------
async def _to_response(result: DoubleResult, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    if isinstance(result, ModelResponse):
        if not result.usage.has_values():
            result.usage = _estimate(messages, info, result.parts)
        return result
    reply = _as_reply(result)
    if reply.sleep_ms:
        await asyncio.sleep(reply.sleep_ms / 1000)
    parts: list[ModelResponsePart] = []
    output = reply.output.model_dump(mode="json") if isinstance(reply.output, BaseModel) else reply.output
    native = output is not None and not info.output_tools
    if reply.text and not native:
        parts.append(TextPart(content=reply.text))
    if output is not None:
        if info.output_tools:
            parts.append(ToolCallPart(info.output_tools[0].name, dict(output), tool_call_id="call_output"))
        else:
            parts.append(TextPart(content=json.dumps(output)))
    for number, call in enumerate(reply.tool_calls, start=1):
        args = dict(cast(Mapping[str, Any], call.get("args") or {}))
        parts.append(ToolCallPart(str(call["name"]), args, tool_call_id=f"call_{number}"))
    usage = _request_usage(reply.usage) if reply.usage is not None else _estimate(messages, info, parts)
    return ModelResponse(parts=parts, usage=usage)


def _as_reply(result: DoubleResult) -> DoubleReply:
    if isinstance(result, DoubleReply):
        return result
    if result is None:
        return DoubleReply()
    if isinstance(result, str):
        return DoubleReply(text=result)
    if isinstance(result, BaseModel):
        return DoubleReply(output=result)
    if isinstance(result, Mapping):
        return DoubleReply(output=result)
    raise TypeError(f"a double returned {type(result).__name__}; expected a DoubleResult")  # pragma: no cover


def _request_usage(usage: TokenUsage) -> RequestUsage:
    return RequestUsage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
    )


def estimate_tokens(text: str) -> int:
    """Deterministic token count: a token per 4 characters, at least 1 for any text."""
    return math.ceil(len(text) / 4) if text else 0


def _estimate(
    messages: list[ModelMessage], info: AgentInfo, parts: Sequence[ModelResponsePart]
) -> RequestUsage:
    prompt = [info.instructions or ""]
    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                    prompt.append(part.content)
                elif isinstance(part, ToolReturnPart):
                    prompt.append(part.model_response_str())
        else:
            prompt.extend(_part_text(part) for part in message.parts)
    reply = "".join(_part_text(part) for part in parts)
    return RequestUsage(
        input_tokens=max(1, estimate_tokens("".join(prompt))), output_tokens=max(1, estimate_tokens(reply))
    )


def _part_text(part: ModelResponsePart) -> str:
    if isinstance(part, TextPart):
        return part.content
    if isinstance(part, ToolCallPart):
        return part.tool_name + part.args_as_json_str()
    return ""


# reading requests ---------------------------------------------------------------------------
def task_of(messages: Sequence[ModelMessage]) -> str | None:
    """The task the gateway stamped on the latest request (None outside the gateway)."""
    for message in reversed(messages):
        if isinstance(message, ModelRequest) and message.metadata and TASK_METADATA_KEY in message.metadata:
            return str(message.metadata[TASK_METADATA_KEY])
    return None


def last_user_text(messages: Sequence[ModelMessage]) -> str:
    """The text of the latest user prompt, without a leading "[speaker]" tag."""
    for message in reversed(messages):
        if isinstance(message, ModelRequest):
            for part in reversed(message.parts):
                if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                    return _SPEAKER_TAG.sub("", part.content.strip(), count=1)
    return ""


def _latest_tool_returns(messages: Sequence[ModelMessage]) -> list[ToolReturnPart]:
    if not messages or not isinstance(messages[-1], ModelRequest):
        return []
    return [part for part in messages[-1].parts if isinstance(part, ToolReturnPart)]


def echo_text(messages: Sequence[ModelMessage]) -> str:
    """The echo double's sentence for these messages."""
    returns = _latest_tool_returns(messages)
    if returns:
        return " ".join(f"Tool {part.tool_name} returned: {part.model_response_str()}" for part in returns)
    said = last_user_text(messages)
    return f"You said: {said}" if said else "You said nothing."


def feelings(info: AgentInfo, strongest: float = 0.6) -> dict[str, float]:
    """A valid answer to the emotion classifier (`cognition.emotion`, task `classify`): a
    distribution over the categories its output schema names, the first at `strongest`, the
    rest sharing what is left. A double that answers the reading with anything else (text, or
    every state 0) leaves the bench or test measuring a turn whose reading failed."""
    categories = sorted((output_schema(info) or {}).get("properties", {}))
    if not categories:
        raise ValueError("not the emotion classifier's call: no categories in its output schema")
    rest = (1.0 - strongest) / max(1, len(categories) - 1)
    return {category: strongest if i == 0 else rest for i, category in enumerate(categories)}


def output_schema(info: AgentInfo) -> dict[str, Any] | None:
    """The JSON schema of the structured output requested, if any (tool or native mode)."""
    if info.output_tools:
        return info.output_tools[0].parameters_json_schema
    output_object = info.model_request_parameters.output_object
    return output_object.json_schema if output_object is not None else None


# built-in doubles ---------------------------------------------------------------------------
def _echo(task: str | None, messages: list[ModelMessage], info: AgentInfo) -> DoubleResult:
    schema = output_schema(info)
    if schema is not None:
        return DoubleReply(output=minimal_instance(schema))
    return DoubleReply(text=echo_text(messages))


def _vision(task: str | None, messages: list[ModelMessage], info: AgentInfo) -> DoubleResult:
    images = last_user_images(messages)
    if task != "caption" or not images:
        return _echo(task, messages, info)
    return DoubleReply(text="; ".join(describe_image(image.data) for image in images))


def last_user_images(messages: Sequence[ModelMessage]) -> list[BinaryContent]:
    """The images of the latest user prompt."""
    for message in reversed(messages):
        if isinstance(message, ModelRequest):
            for part in reversed(message.parts):
                if isinstance(part, UserPromptPart) and not isinstance(part.content, str):
                    return [
                        item for item in part.content if isinstance(item, BinaryContent) and item.is_image
                    ]
    return []


def _unreachable(task: str | None, messages: list[ModelMessage], info: AgentInfo) -> DoubleResult:
    raise ConnectionError("test:unreachable: the model is unreachable (by design)")


def _instant(task: str | None, messages: list[ModelMessage], info: AgentInfo) -> DoubleResult:
    schema = output_schema(info)
    usage = TokenUsage(input_tokens=1, output_tokens=1)
    if schema is not None:
        return DoubleReply(output=minimal_instance(schema), usage=usage)
    return DoubleReply(text=INSTANT_REPLY, usage=usage)


class ScriptToolCall(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    args: dict[str, Any] = Field(default_factory=dict[str, Any])


class ScriptUsage(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    input_tokens: int = Field(default=0, ge=0)
    output_tokens: int = Field(default=0, ge=0)
    cache_read_tokens: int = Field(default=0, ge=0)
    cache_write_tokens: int = Field(default=0, ge=0)


class ScriptRule(BaseModel):
    """One rule of a `test:script` file. Every given condition must hold for it to match."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task: str | None = None  # the Task value, e.g. "respond"
    match: str | None = None  # regex searched in the last user text
    reply: str | None = None
    output: dict[str, Any] | None = None
    tool_calls: list[ScriptToolCall] = Field(default_factory=list[ScriptToolCall])
    sleep_ms: int = Field(default=0, ge=0)
    usage: ScriptUsage | None = None
    times: int | None = Field(default=None, ge=1)  # how often the rule may match (per process)

    @field_validator("match")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"invalid regex {value!r}: {exc}") from exc
        return value


class _ScriptFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    rules: list[ScriptRule]


class ScriptResponder:
    """Answers from a JSON rules file: a list of rules, or `{"rules": [...]}`.

    The file is re-read when it changes, so a test can rewrite it between steps; rule use
    counts (`times`) restart then.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp: tuple[int, int] | None = None
        self._rules: list[ScriptRule] = []
        self._used: list[int] = []
        self._load()

    def _load(self) -> None:
        try:
            stat = self.path.stat()
            stamp = (stat.st_mtime_ns, stat.st_size)
            if stamp == self._stamp:
                return
            data = json.loads(self.path.read_text(encoding="utf-8"))
            rules = _ScriptFile.model_validate({"rules": data} if isinstance(data, list) else data).rules
        except OSError as exc:
            raise ModelError(f"cannot read the test:script rules file {str(self.path)!r}: {exc}") from exc
        except (ValueError, ValidationError) as exc:
            raise ModelError(f"invalid test:script rules file {str(self.path)!r}: {exc}") from exc
        self._stamp, self._rules, self._used = stamp, rules, [0] * len(rules)

    def __call__(self, task: str | None, messages: list[ModelMessage], info: AgentInfo) -> DoubleResult:
        self._load()
        said = last_user_text(messages)
        schema = output_schema(info)
        for index, rule in enumerate(self._rules):
            if rule.task is not None and rule.task != task:
                continue
            if rule.match is not None and re.search(rule.match, said) is None:
                continue
            if rule.times is not None and self._used[index] >= rule.times:
                continue
            self._used[index] += 1
            return self._reply(rule, messages, schema)
        return _echo(task, messages, info)

    def _reply(
        self, rule: ScriptRule, messages: list[ModelMessage], schema: dict[str, Any] | None
    ) -> DoubleReply:
        output: Mapping[str, Any] | None = rule.output
        if output is None and schema is not None and rule.reply is None:
            output = minimal_instance(schema)
        text = rule.reply
        if text is None:
            text = "" if (output is not None or rule.tool_calls) else echo_text(messages)
        usage = TokenUsage(**rule.usage.model_dump()) if rule.usage is not None else None
        return DoubleReply(
            text=text,
            output=output,
            tool_calls=[call.model_dump() for call in rule.tool_calls],
            usage=usage,
            sleep_ms=rule.sleep_ms,
        )


# minimal values -----------------------------------------------------------------------------
def minimal_instance(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The smallest valid object for a JSON schema (required properties only)."""
    value = _minimal(schema, schema.get("$defs") or schema.get("definitions") or {}, depth=0)
    return cast(dict[str, Any], value) if isinstance(value, dict) else {}


def _minimal(schema: Mapping[str, Any], defs: Mapping[str, Any], depth: int) -> Any:
    if depth > 32:
        return None
    if "$ref" in schema:
        name = str(schema["$ref"]).rsplit("/", 1)[-1]
        return _minimal(defs.get(name, {}), defs, depth + 1)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    if "default" in schema:
        return schema["default"]
    for key in ("anyOf", "oneOf"):
        options = cast(list[Mapping[str, Any]], schema.get(key) or [])
        if options:
            usable = [option for option in options if option.get("type") != "null"] or options
            return _minimal(usable[0], defs, depth + 1)
    if schema.get("allOf"):
        return _minimal(schema["allOf"][0], defs, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in cast(list[str], kind) if k != "null"), "null")
    if kind == "object" or (kind is None and "properties" in schema):
        properties = cast(Mapping[str, Mapping[str, Any]], schema.get("properties") or {})
        return {
            name: _minimal(properties.get(name, {}), defs, depth + 1)
            for name in cast(list[str], schema.get("required") or [])
        }
    if kind == "array":
        count = int(schema.get("minItems", 0))
        items = cast(Mapping[str, Any], schema.get("items") or {})
        return [_minimal(items, defs, depth + 1) for _ in range(count)]
    if kind == "string":
        return _minimal_string(schema)
    if kind in ("integer", "number"):
        return _minimal_number(schema, integer=kind == "integer")
    if kind == "boolean":
        return True
    return None


def _minimal_string(schema: Mapping[str, Any]) -> str:
    formats = {
        "date-time": "1970-01-01T00:00:00Z",
        "date": "1970-01-01",
        "time": "00:00:00",
        "email": "a@example.com",
        "uri": "http://example.com",
        "uuid": "00000000-0000-0000-0000-000000000000",
    }
    text = formats.get(str(schema.get("format", "")), "")
    return text.ljust(int(schema.get("minLength", 0)), "x")


def _minimal_number(schema: Mapping[str, Any], *, integer: bool) -> int | float:
    """Zero when allowed, else the nearest bound (ge/gt/le/lt → minimum/exclusive…)."""
    step = 1.0 if integer else 1e-6
    value = 0.0
    if "minimum" in schema:
        value = max(value, float(schema["minimum"]))
    if "exclusiveMinimum" in schema:
        value = max(value, float(schema["exclusiveMinimum"]) + step)
    if "maximum" in schema:
        value = min(value, float(schema["maximum"]))
    if "exclusiveMaximum" in schema:
        value = min(value, float(schema["exclusiveMaximum"]) - step)
    return math.ceil(value) if integer else value
