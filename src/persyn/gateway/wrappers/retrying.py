"""Retries of transient failures, with backoff; `ModelError` after the last."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncGenerator
from contextlib import AsyncExitStack, asynccontextmanager

import httpx
from pydantic_ai import exceptions as ai_errors
from pydantic_ai.models import Model

from persyn.core.errors import ModelError, ModelUnavailableError
from persyn.gateway.wrappers.base import Call, Reply, RoundTripModel

__all__ = ["RetryingModel"]

log = logging.getLogger(__name__)

_MAX_RETRY_AFTER_SECONDS = 30.0


class RetryingModel(RoundTripModel):
    """Retries transient failures with exponential backoff and jitter, honouring Retry-After;
    anything else, or the last failure, becomes a `ModelError` naming the model.

    A stream is handed to the caller only once it has produced its first text (`primed`):
    a stream that fails before that — while it opens, or accepted and then failing before
    any text, as a provider reporting an overload as its first event does — has shown
    nobody anything, so it is retried like a request (and, failing for good, moves on in a
    fallback chain). A stream that breaks off after its first text is not repeated: that text
    may already be on someone's screen and cannot be taken back, and a second answer would
    say it twice. Its failure is raised, as a `ModelError` saying the reply broke off; the
    gateway closes the sink's draft (an `end` event), and the turn reports that it could not
    produce a reply instead of sending half of one."""

    def __init__(
        self, wrapped: Model, *, label: str, max_retries: int, base_delay: float, max_delay: float
    ) -> None:
        super().__init__(wrapped)
        self._label = label
        self._max_retries = max_retries
        self._base_delay = base_delay
        self._max_delay = max_delay

    @asynccontextmanager
    async def _round_trip(self, call: Call[Reply]) -> AsyncGenerator[Reply]:
        attempt = 0
        while True:
            failed: Exception | None = None
            async with AsyncExitStack() as stack:
                try:
                    reply = await stack.enter_async_context(call.to(self.wrapped))
                    await call.primed(reply)
                except ModelError:
                    raise
                except Exception as exc:
                    failed = exc
                else:
                    try:
                        yield reply
                    except ModelError:
                        raise
                    except Exception as exc:  # only a stream's caller reads while the trip is open
                        raise _broke_off(self._label, exc) from exc
                    return
            await self._after_failure(failed, attempt)  # the failed stream is closed first
            attempt += 1

    async def _after_failure(self, exc: Exception, attempt: int) -> None:
        """Wait before the next try, or raise when there is none."""
        if not _retryable(exc) or attempt >= self._max_retries:
            raise _failure(self._label, exc, attempt + 1) from exc
        delay = self._backoff(attempt, exc)
        log.info("model %s failed (%s); retry %d in %.2fs", self._label, _describe(exc), attempt + 1, delay)
        await asyncio.sleep(delay)

    def _backoff(self, attempt: int, exc: BaseException) -> float:
        """Exponential backoff with jitter (half fixed, half random), honouring Retry-After."""
        ceiling = min(self._max_delay, self._base_delay * (2**attempt))
        delay = ceiling / 2 + random.uniform(0, ceiling / 2)
        retry_after = getattr(exc, "retry_after", None)
        if isinstance(retry_after, int | float) and retry_after > 0:
            delay = max(delay, min(float(retry_after), _MAX_RETRY_AFTER_SECONDS))
        return delay


def _retryable(exc: BaseException) -> bool:
    """429, 5xx, connection failures and timeouts are worth another try; other 4xx are not."""
    if isinstance(exc, ai_errors.ModelHTTPError):
        return exc.status_code == 429 or exc.status_code >= 500
    return isinstance(
        exc,
        ai_errors.ModelRateLimitError
        | ai_errors.ModelUnavailableError
        | ai_errors.ModelServerError
        | ai_errors.ModelConnectionError
        | ai_errors.ModelRequestTimeout
        | httpx.TransportError
        | ConnectionError
        | TimeoutError,
    )


def _describe(exc: BaseException) -> str:
    status = getattr(exc, "status_code", None)
    prefix = f"HTTP {status} " if isinstance(status, int) else ""
    return f"{prefix}{type(exc).__name__}: {exc}"


def _broke_off(label: str, exc: Exception) -> ModelError:
    return ModelError(
        f"model {label!r} broke off its streamed reply after it had begun: {_describe(exc)} "
        "(not repeated: what it had streamed was already shown)"
    )


def _failure(label: str, exc: Exception, attempts: int) -> ModelError:
    message = f"model {label!r} failed after {attempts} attempt(s): {_describe(exc)}"
    if isinstance(exc, ai_errors.ModelConnectionError | httpx.TransportError | ConnectionError):
        return ModelUnavailableError(message)
    return ModelError(message)
