"""The round trip every wrapper is written over, once for a plain request and a stream.

A pydantic-ai model answers a request two ways: `request` returns the response, and
`request_stream` opens a stream the caller drains inside its context. A wrapper that wrote
both would write its logic twice, and the stream half is where the care is (what may still be
retried, when the usage is final). Here a wrapper writes one async context manager,
`RoundTripModel._round_trip`, over a `Call` that hides which of the two was asked:
`call.to(model)` opens the round trip on a model and yields its reply (the response, or the
open stream); after the context closes the reply is final (a stream drained and closed), so
what a wrapper does after its `async with` sees the whole response.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Generic, TypeVar

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ModelResponseStreamEvent,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
)
from pydantic_ai.models import CompletedStreamedResponse, Model, ModelRequestParameters, StreamedResponse
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings

from persyn.gateway.base import STAGE_METADATA_KEY, TASK_METADATA_KEY

__all__ = ["Call", "PlainCall", "Reply", "RoundTripModel", "StreamedCall", "delta_text", "primed", "stage_of"]

Reply = TypeVar("Reply", ModelResponse, StreamedResponse)
"""What a round trip yields: the response of a plain request, or the open stream."""


class Call(ABC, Generic[Reply]):
    """One round trip asked of a wrapper: what to send, and how the caller wants the answer."""

    def __init__(
        self,
        messages: list[ModelMessage],
        settings: ModelSettings | None,
        params: ModelRequestParameters,
    ) -> None:
        self.messages = messages
        self.settings = settings
        self.params = params

    @abstractmethod
    def to(
        self, model: Model, params: ModelRequestParameters | None = None
    ) -> AbstractAsyncContextManager[Reply]:
        """The round trip on `model` (with `params` instead of the call's own, if given)."""

    @abstractmethod
    def answered(self, response: ModelResponse) -> Reply:
        """`response`, given without calling a model, in the form the caller asked for."""

    @abstractmethod
    async def primed(self, reply: Reply) -> None:
        """Read a stream up to its first text (see `primed`); a plain response already is."""

    @abstractmethod
    def response(self, reply: Reply) -> ModelResponse:
        """The whole response of a reply whose round trip has closed."""


class PlainCall(Call[ModelResponse]):
    """`request`: the round trip ends when the response is returned."""

    def to(
        self, model: Model, params: ModelRequestParameters | None = None
    ) -> AbstractAsyncContextManager[ModelResponse]:
        return _Returned(self, model, self.params if params is None else params)

    def answered(self, response: ModelResponse) -> ModelResponse:
        return response

    async def primed(self, reply: ModelResponse) -> None:
        return None

    def response(self, reply: ModelResponse) -> ModelResponse:
        return reply


class _Returned(AbstractAsyncContextManager[ModelResponse]):
    """A plain request as a round trip: entered, it makes the request; nothing to close. A
    class rather than `asynccontextmanager`, which costs a generator per wrapper per call."""

    def __init__(self, call: PlainCall, model: Model, params: ModelRequestParameters) -> None:
        self._call = call
        self._model = model
        self._params = params

    async def __aenter__(self) -> ModelResponse:
        return await self._model.request(self._call.messages, self._call.settings, self._params)

    async def __aexit__(self, *exc_info: object) -> None:
        return None


class StreamedCall(Call[StreamedResponse]):
    """`request_stream`: the round trip ends when the caller has drained and closed the stream."""

    def __init__(
        self,
        messages: list[ModelMessage],
        settings: ModelSettings | None,
        params: ModelRequestParameters,
        run_context: Any,
    ) -> None:
        super().__init__(messages, settings, params)
        self.run_context = run_context

    def to(
        self, model: Model, params: ModelRequestParameters | None = None
    ) -> AbstractAsyncContextManager[StreamedResponse]:
        return model.request_stream(
            self.messages, self.settings, self.params if params is None else params, self.run_context
        )

    def answered(self, response: ModelResponse) -> StreamedResponse:
        """As one piece: the stream replays the response's parts as events."""
        return CompletedStreamedResponse(response, model_request_parameters=self.params, replay_events=True)

    async def primed(self, reply: StreamedResponse) -> None:
        await primed(reply)

    def response(self, reply: StreamedResponse) -> ModelResponse:
        return reply.get()


class RoundTripModel(WrapperModel, ABC):
    """A wrapper written once for both forms of a request: `_round_trip` is an async context
    manager over a `Call` that yields the reply the caller gets; `request` and `request_stream`
    only say which call it is."""

    @abstractmethod
    def _round_trip(self, call: Call[Reply]) -> AbstractAsyncContextManager[Reply]: ...

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        async with self._round_trip(
            PlainCall(messages, model_settings, model_request_parameters)
        ) as response:
            pass
        return response

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: Any = None,
    ) -> AsyncGenerator[StreamedResponse]:
        call = StreamedCall(messages, model_settings, model_request_parameters, run_context)
        async with self._round_trip(call) as stream:
            yield stream


def delta_text(event: object) -> str:
    """The text a stream event adds to the reply (what a token sink is shown), if any."""
    if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
        return event.part.content
    if isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
        return event.delta.content_delta
    return ""


async def primed(stream: StreamedResponse) -> None:
    """Read `stream` up to its first event with text (or to its end), and keep what was read
    for the caller, who then iterates the stream as if nothing had been read.

    A failure before any text is raised here, while the request can still be retried or
    fall back. This sets the stream's `_event_iterator`, which `StreamedResponse.__aiter__`
    hands out once set (pydantic-ai 2.68; its own fallback primes a stream the same way):
    `test_stream_breaks.py` notices if that changes, since the caller would then miss the
    events read here."""
    events = aiter(stream)
    read: list[ModelResponseStreamEvent] = []
    async for event in events:
        read.append(event)
        if delta_text(event):
            break

    async def replay() -> AsyncIterator[ModelResponseStreamEvent]:
        for event in read:
            yield event
        async for event in events:
            yield event

    stream._event_iterator = replay()  # pyright: ignore[reportPrivateUsage]


def stage_of(messages: Sequence[ModelMessage]) -> str:
    """The usage label the gateway stamped on the latest request (its task by default)."""
    for message in reversed(messages):
        if isinstance(message, ModelRequest) and message.metadata:
            stage = message.metadata.get(STAGE_METADATA_KEY) or message.metadata.get(TASK_METADATA_KEY)
            if stage:
                return str(stage)
    return "unknown"
