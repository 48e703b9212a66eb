"""What every model call goes through, as pydantic-ai model wrappers (ARCHITECTURE §5).

Cross-cutting concerns wrap a model; they are not branches inside the gateway. The gateway
composes them once per model when it builds it (`ModelGateway._member`), innermost first:

    ConcurrencyLimitedModel  at most `[models] max_concurrent_requests` in flight (0: no limit)
    RetryingModel            backoff on 429, 5xx, connection errors and timeouts; `ModelError` after
    MeteredModel             one usage record per round-trip that returned (SPEC App. C)
    TracedModel              one model-call span per round-trip, with [tracing] on (SPEC App. D)
    FallbackModel            the next model of a task's chain when one failed after its retries

and then any wrappers the composition root adds around the whole chain (the autonomy budget,
the checkpoints, the provider tools: `HookedModel`s). Each is a `WrapperModel`, so it forwards
everything it does not change (profile, settings, message preparation) to the model it wraps:
output mode and token limits stay the provider model's own (`gateway/providers.py`). Each of
ours is one module over `RoundTripModel` (`base.py`), which writes the round trip once for a
plain request and a stream, so a wrapper says only what it adds.

The limit sits inside the retries, so a request waiting out a backoff holds no slot; metering
sits outside them, so a request retried three times before it returned is one record; the
chain is outside metering, so each attempt is recorded with the model that made it. Tracing
sits just outside metering, beside it: a span covers what the usage record covers (retries
included, in its latency) and carries the record's id, so a span and a ledger line can be
matched; like metering, it is absent when off rather than a branch in every call.
"""

from persyn.gateway.wrappers.base import Call, RoundTripModel, delta_text, primed, stage_of
from persyn.gateway.wrappers.fallback import FallbackModel
from persyn.gateway.wrappers.hooked import CallHooks, HookedModel
from persyn.gateway.wrappers.metered import CallMeter, MeteredModel, provider_tool_requests, token_usage
from persyn.gateway.wrappers.retrying import RetryingModel
from persyn.gateway.wrappers.traced import TracedModel

__all__ = [
    "Call",
    "CallHooks",
    "CallMeter",
    "FallbackModel",
    "HookedModel",
    "MeteredModel",
    "RetryingModel",
    "RoundTripModel",
    "TracedModel",
    "delta_text",
    "primed",
    "provider_tool_requests",
    "stage_of",
    "token_usage",
]
