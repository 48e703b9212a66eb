"""The tool registry (SPEC §4.6): tools the model may call, and the one place they run.

A `Tool` is a name, a natural-language description, an input and an output schema (pydantic
models) and an async handler. The registry

- advertises its tools to the model as `ToolSpec`s (what `Gateway.complete(tools=...)` takes)
  or pydantic-ai `ToolDefinition`s, rendered deterministically: sorted by name, schemas with
  sorted keys, so the same tools always give the same bytes and the prompt prefix that holds
  them stays cacheable (ARCHITECTURE §7);
- runs a call: validates its arguments against the input schema, runs the handler under a
  timeout — or, for a tool marked `isolated` (CPU-bound work the event loop could not
  interrupt), runs its work in a child interpreter killed at `[tools] cpu_seconds` —
  validates what it returns against the output schema, and turns *every* failure —
  unknown tool, invalid arguments, an exception, a timeout, bad output, a tripped loop
  breaker — into a `ToolOutcome` whose text the model can read. `call` never raises (only
  cancellation propagates): no tool failure crashes the response.

Every definition is paid for in tokens on every model call, so the registry keeps them small:
a pydantic-generated schema is advertised compacted (`compact_schema`: no generated titles,
optional fields without their `null` alternative — omitting the field is how to leave it
out), and the tools `[tools] deferred` names are not defined at all: one `call_tool` tool
lists them by name and summary, shows a tool's description and arguments when called with
its name alone, and runs it when called with arguments (progressive disclosure; the
definitions stay the same bytes from call to call, so the prefix stays cacheable).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from fnmatch import fnmatchcase
from typing import Any, Generic, TypeVar, cast

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_ai.tools import ToolDefinition

from persyn.core.config import ToolsConfig
from persyn.core.errors import ConfigError, InputError, ToolError
from persyn.gateway.base import ToolCall, ToolResult, ToolSpec
from persyn.tools._isolated import IsolatedWork
from persyn.tools.breaker import BreakerTrip, LoopBreaker, canonical_arguments

__all__ = [
    "CALL_TOOL",
    "Tool",
    "ToolOutcome",
    "ToolRegistry",
    "ToolStatus",
    "compact_schema",
    "validation_summary",
]

log = logging.getLogger(__name__)

In = TypeVar("In", bound=BaseModel)
Out = TypeVar("Out", bound=BaseModel)

# What every provider accepts as a function name (Anthropic and OpenAI: [a-zA-Z0-9_-]{1,64}).
_TOOL_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")
CALL_TOOL = "call_tool"  # the one tool that stands for the deferred ones
_SUMMARY_CHARS = 40
# Schema keywords a model needs no telling (the arguments are still validated against them; a
# call that breaks one gets an error that says so): generated titles and length bounds.
_UNSHOWN = frozenset({"title", "maxLength", "minLength", "maxItems"})


@dataclass(frozen=True)
class Tool(Generic[In, Out]):
    """One callable tool. `handler` gets the validated input and returns the output model;
    raising `ToolError` or `InputError` reports its message to the model as a failure;
    anything else is reported too, with its type.

    A tool whose work is CPU-bound gives `isolated` instead of `handler`: a function of a
    standard-library-only module that takes the input as JSON data and returns the output's
    fields. The registry runs it in a child interpreter and kills it at `[tools] cpu_seconds`
    (`tools/_isolated.py`), so no input can hold the event loop."""

    name: str
    description: str
    input_model: type[In]
    output_model: type[Out]
    handler: Callable[[In], Awaitable[Out]] | None = None
    isolated: IsolatedWork | None = None
    # A tool whose work has limits of its own (a delegated task: `tools/sandbox/agent.py`)
    # waits this long instead of `[tools] call_timeout_seconds`.
    timeout_seconds: float | None = None
    verbatim_schema: bool = False  # advertise the input schema as it is (an MCP server's own)

    def __post_init__(self) -> None:
        if (self.handler is None) == (self.isolated is None):
            raise ConfigError(f"tool {self.name!r} needs exactly one of a handler or isolated work")
        if not _TOOL_NAME.fullmatch(self.name):
            raise ConfigError(
                f"invalid tool name {self.name!r}: use 1 to 64 letters, digits, '_' or '-', "
                "starting with a letter"
            )
        if not self.description.strip():
            raise ConfigError(f"tool {self.name!r} needs a description: the model chooses tools by it")

    def input_schema(self) -> dict[str, Any]:
        schema = self.input_model.model_json_schema()
        return _canonical_schema(schema if self.verbatim_schema else compact_schema(schema))

    def output_schema(self) -> dict[str, Any]:
        return _canonical_schema(self.output_model.model_json_schema(mode="serialization"))

    def spec(self) -> ToolSpec:
        return ToolSpec(name=self.name, description=self.description.strip(), parameters=self.input_schema())

    def summary(self) -> str:
        """The description's first sentence, short: how a deferred tool is listed."""
        text = " ".join(self.description.split())
        first = re.split(r"(?<=[.!?])\s|[:;]\s|\s[—(]", text, maxsplit=1)[0].rstrip(".")
        if len(first) <= _SUMMARY_CHARS:
            return first
        return first[:_SUMMARY_CHARS].rsplit(" ", 1)[0] + "..."


class CallToolInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="The tool's name, from the list.")
    arguments: dict[str, Any] | None = Field(
        default=None, description="Leave out to see the tool's description first."
    )


class _NoOutput(BaseModel):
    pass


async def _never(_: CallToolInput) -> _NoOutput:  # `ToolRegistry.call` answers call_tool itself
    raise ToolError("call_tool is answered by the registry")


class ToolStatus(StrEnum):
    OK = "ok"
    UNKNOWN_TOOL = "unknown_tool"
    INVALID_ARGUMENTS = "invalid_arguments"
    FAILED = "failed"  # the handler raised, timed out or returned output that does not fit
    BREAKER_TRIPPED = "breaker_tripped"


class ToolOutcome(BaseModel):
    """How one tool call ended: what the model is shown (`content`) and what a trace or
    the activity log records (status, canonical arguments, output, error, duration)."""

    model_config = ConfigDict(frozen=True)

    call_id: str
    name: str
    arguments: str  # canonical JSON of the arguments the model sent
    status: ToolStatus
    content: str
    output: dict[str, Any] | None = None  # the validated output, as JSON-compatible data
    error: str | None = None
    trip: BreakerTrip | None = None
    duration_ms: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status is ToolStatus.OK

    def as_result(self) -> ToolResult:
        """The gateway's tool-result item that feeds this outcome back to the model."""
        return ToolResult(call_id=self.call_id, name=self.name, content=self.content, is_error=not self.ok)


class ToolRegistry:
    """The tools advertised to one agent, keyed by name."""

    def __init__(self, tools: Iterable[Tool[Any, Any]] = (), *, config: ToolsConfig | None = None) -> None:
        self._config = config or ToolsConfig()
        self._tools: dict[str, Tool[Any, Any]] = {}
        self._provider: dict[str, ToolSpec] = {}
        for tool in tools:
            self.register(tool)

    @property
    def config(self) -> ToolsConfig:
        return self._config

    def register(self, tool: Tool[Any, Any]) -> None:
        if tool.name in self._tools:
            raise ConfigError(f"a tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool

    def add_provider_tools(self, specs: Iterable[ToolSpec]) -> None:
        """Tools the model provider runs inside its reply (`gateway/provider_tools.py`): offered
        with the others, never run here. One may share its name with a local tool, which then
        serves the models that do not run the provider's."""
        for spec in specs:
            if not spec.provider:
                raise ConfigError(f"{spec.name!r} is not a provider tool")
            self._provider[spec.name] = spec

    @property
    def provider_names(self) -> tuple[str, ...]:
        return tuple(sorted(self._provider))

    def get(self, name: str) -> Tool[Any, Any] | None:
        return self._tools.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self._tools))

    def deferred(self, name: str) -> bool:
        """Whether `name` is offered through `call_tool` rather than defined in full."""
        return name != CALL_TOOL and any(fnmatchcase(name, p) for p in self._config.deferred)

    def _offered(self) -> list[Tool[Any, Any]]:
        """The tools whose definitions the model is sent, sorted by name: the ones not deferred,
        and `call_tool` listing the others (unless a tool of that name is registered)."""
        hidden = [name for name in self.names if self.deferred(name)]
        offered = [self._tools[name] for name in self.names if name not in hidden]
        if hidden and CALL_TOOL not in self._tools:
            catalogue = "\n".join(f"- {name}: {self._tools[name].summary()}" for name in hidden)
            offered.append(
                Tool(
                    name=CALL_TOOL,
                    description=(
                        "More tools: call with a name alone to see what it does and its arguments, "
                        f"then with arguments to run it.\n{catalogue}"
                    ),
                    input_model=CallToolInput,
                    output_model=_NoOutput,
                    handler=_never,
                )
            )
        return sorted(offered, key=lambda tool: tool.name)

    def breaker(self) -> LoopBreaker:
        """A fresh loop breaker for one activation, with this registry's limits."""
        return LoopBreaker.from_config(self._config)

    # advertising -------------------------------------------------------------------------
    def specs(self) -> tuple[ToolSpec, ...]:
        """Every tool offered as the gateway takes it, sorted by name (a provider tool after a
        local one of the same name)."""
        offered = [tool.spec() for tool in self._offered()]
        offered += self._provider.values()
        return tuple(sorted(offered, key=lambda spec: (spec.name, spec.provider)))

    def tool_definitions(self) -> list[ToolDefinition]:
        """Every tool as pydantic-ai describes it, sorted by name, with its return schema."""
        return [
            ToolDefinition(
                name=tool.name,
                description=tool.description.strip(),
                parameters_json_schema=tool.input_schema(),
                return_schema=tool.output_schema(),
            )
            for tool in self._offered()
        ]

    def render(self) -> str:
        """The tool definitions as one canonical JSON text: the same tools give the same
        bytes, whatever order they were registered in (a cache key; a prompt section)."""
        definitions = [
            {
                "name": tool.name,
                "description": tool.description.strip(),
                "input_schema": tool.input_schema(),
                "output_schema": tool.output_schema(),
            }
            for tool in self._offered()
        ]
        return json.dumps(definitions, sort_keys=True, ensure_ascii=False, separators=(",", ":"))

    # running -----------------------------------------------------------------------------
    async def call(self, call: ToolCall, breaker: LoopBreaker | None = None) -> ToolOutcome:
        """Run one call and report how it went. Never raises, except on cancellation."""
        arguments = canonical_arguments(call.args)
        started = time.perf_counter()

        def outcome(status: ToolStatus, content: str, **fields: Any) -> ToolOutcome:
            return ToolOutcome(
                call_id=call.id,
                name=call.name,
                arguments=arguments,
                status=status,
                content=self._cut(content),
                duration_ms=round((time.perf_counter() - started) * 1000, 3),
                **fields,
            )

        tool = self._tools.get(call.name)
        if tool is None and call.name == CALL_TOOL and any(self.deferred(n) for n in self.names):
            return await self._call_deferred(call, breaker, outcome)
        if tool is None and call.name in self._provider:
            message = (
                f"{call.name!r} is run by the model provider inside its reply; there is nothing to run "
                "here (a model that runs it calls it itself)."
            )
            return outcome(ToolStatus.UNKNOWN_TOOL, message, error=message)
        if tool is None:
            known = ", ".join(self.names) or "none"
            message = f"There is no tool named {call.name!r}. Available tools: {known}."
            return outcome(ToolStatus.UNKNOWN_TOOL, message, error=message)
        if breaker is not None:
            trip = breaker.admit(call)
            if trip is not None:
                return outcome(ToolStatus.BREAKER_TRIPPED, trip.message, error=trip.message, trip=trip)
        try:
            validated = tool.input_model.model_validate(call.args)
        except ValidationError as exc:
            message = f"Invalid arguments for tool {call.name!r}: {validation_summary(exc)}"
            return outcome(ToolStatus.INVALID_ARGUMENTS, message, error=message)
        limit = tool.timeout_seconds or self._config.call_timeout_seconds
        if tool.isolated is not None:
            limit = min(limit, self._config.cpu_seconds)
        try:
            async with asyncio.timeout(limit):
                if tool.isolated is not None:  # cancelled at the limit, the child is killed
                    raw = await tool.isolated(validated.model_dump(mode="json"))
                else:
                    assert tool.handler is not None  # __post_init__: one of the two
                    raw = await tool.handler(validated)
        except TimeoutError:
            message = f"Tool {call.name!r} did not finish within {limit:g} seconds and was stopped."
            return outcome(ToolStatus.FAILED, message, error=message)
        except (ToolError, InputError) as exc:  # the tool's own, readable refusal
            message = f"Tool {call.name!r} failed: {exc}"
            return outcome(ToolStatus.FAILED, message, error=message)
        except Exception as exc:
            log.warning("tool %r raised", call.name, exc_info=True)
            message = f"Tool {call.name!r} failed: {type(exc).__name__}: {exc}"
            return outcome(ToolStatus.FAILED, message, error=message)
        try:
            result = tool.output_model.model_validate(raw)
        except ValidationError as exc:
            log.warning("tool %r returned output that does not fit its schema: %s", call.name, exc)
            message = f"Tool {call.name!r} failed: it returned malformed output ({validation_summary(exc)})"
            return outcome(ToolStatus.FAILED, message, error=message)
        data = result.model_dump(mode="json")
        return outcome(ToolStatus.OK, result.model_dump_json(), output=data)

    async def _call_deferred(
        self, call: ToolCall, breaker: LoopBreaker | None, outcome: Callable[..., ToolOutcome]
    ) -> ToolOutcome:
        """`call_tool`: a deferred tool's definition, or the tool run under this call's id."""
        try:
            meta = CallToolInput.model_validate(call.args)
        except ValidationError as exc:
            message = f"Invalid arguments for tool {CALL_TOOL!r}: {validation_summary(exc)}"
            return outcome(ToolStatus.INVALID_ARGUMENTS, message, error=message)
        tool = self._tools.get(meta.name)
        if tool is None or not self.deferred(meta.name):
            listed = ", ".join(n for n in self.names if self.deferred(n))
            message = (
                f"{meta.name!r} is not one of the tools call_tool runs ({listed}); call others directly."
            )
            return outcome(ToolStatus.UNKNOWN_TOOL, message, error=message)
        if meta.arguments is None:
            definition = {
                "name": tool.name,
                "description": tool.description.strip(),
                "arguments": tool.input_schema(),
            }
            text = json.dumps(definition, sort_keys=True, ensure_ascii=False)
            return outcome(ToolStatus.OK, text, output=definition)
        inner = await self.call(ToolCall(id=call.id, name=meta.name, args=meta.arguments), breaker)
        return inner.model_copy(update={"name": call.name, "arguments": canonical_arguments(call.args)})

    def refuse(self, calls: Sequence[ToolCall], trip: BreakerTrip) -> list[ToolOutcome]:
        """Outcomes for calls that are not run because `trip` stopped the loop (the model
        is still owed a result for each call it made)."""
        return [
            ToolOutcome(
                call_id=call.id,
                name=call.name,
                arguments=canonical_arguments(call.args),
                status=ToolStatus.BREAKER_TRIPPED,
                content=trip.message,
                error=trip.message,
                trip=trip,
            )
            for call in calls
        ]

    def _cut(self, content: str) -> str:
        limit = self._config.max_result_chars
        if len(content) <= limit:
            return content
        return content[:limit] + f"\n[… {len(content) - limit} more characters cut]"


def validation_summary(error: ValidationError, limit: int = 5) -> str:
    """A pydantic validation error in one line the model can act on."""
    parts: list[str] = []
    for issue in error.errors()[:limit]:
        where = ".".join(str(p) for p in issue["loc"]) or "arguments"
        parts.append(f"{where}: {issue['msg']}")
    more = len(error.errors()) - limit
    if more > 0:
        parts.append(f"and {more} more")
    return "; ".join(parts)


def compact_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A pydantic-generated JSON schema without what costs tokens and tells the model little:
    generated titles, length bounds, `additionalProperties: false`, and on an optional field
    its `null` alternative and `null` default (a field left out of `required` may simply be
    omitted). Validation still uses the whole model."""

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(item) for item in cast(list[Any], node)]
        if not isinstance(node, dict):
            return node
        source = cast(dict[str, Any], node)
        out: dict[str, Any] = {}
        for key, value in source.items():
            if key in _UNSHOWN and not isinstance(value, dict):
                continue
            if key == "additionalProperties" and value is False:
                continue
            if key in ("properties", "$defs") and isinstance(value, dict):
                out[key] = {k: walk(v) for k, v in cast(dict[str, Any], value).items()}
            else:
                out[key] = walk(value)
        options = out.get("anyOf")
        if "default" in out and out["default"] is None and isinstance(options, list):
            kept = [o for o in cast(list[Any], options) if o != {"type": "null"}]
            if len(kept) == 1 and isinstance(kept[0], dict):
                del out["anyOf"], out["default"]
                out = {**cast(dict[str, Any], kept[0]), **out}
        return out

    return cast(dict[str, Any], walk(schema))


def _canonical_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A JSON schema with every mapping's keys sorted (lists keep their order: it matters)."""
    canonical: dict[str, Any] = json.loads(json.dumps(schema, sort_keys=True))
    return canonical
