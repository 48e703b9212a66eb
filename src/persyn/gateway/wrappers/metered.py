"""One usage record per round trip that returned (SPEC App. C), and the usage helpers."""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import AsyncGenerator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic_ai.models import Model
from pydantic_ai.usage import RequestUsage

from persyn.core.clock import Clock
from persyn.core.config import Price
from persyn.core.errors import ModelError
from persyn.core.ids import derived_id, id_time, is_id, new_id
from persyn.gateway.base import MODEL_METADATA_KEY, USAGE_ID_METADATA_KEY, TokenUsage
from persyn.gateway.registry import ModelSpec, Tier, model_tier
from persyn.gateway.wrappers.base import Call, Reply, RoundTripModel, stage_of
from persyn.usage import context as usage_context
from persyn.usage.meter import Meter
from persyn.usage.pricing import cost_usd, price_for
from persyn.usage.records import UsageRecord

__all__ = ["CallMeter", "MeteredModel", "provider_tool_requests", "token_usage"]

log = logging.getLogger(__name__)

_ROUND_COUNTERS = 4096  # step executions remembered for usage-id rounds
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass
class CallMeter:
    """Turns a round-trip into a usage record for one agent's gateway; never raises (metering
    is fail-soft, SPEC §7). Shared by every model the gateway builds, because call ids count
    the rounds of a durable step whichever model serves them."""

    meter: Meter
    clock: Clock
    agent_id: str
    prices: dict[str, Price]
    tiers: Mapping[str, Tier] = field(default_factory=dict[str, Tier])
    _rounds: OrderedDict[int, tuple[usage_context.Attribution, int]] = field(
        default_factory=OrderedDict[int, tuple[usage_context.Attribution, int]]
    )

    def record(self, spec: ModelSpec, configured: str, stage: str, usage: RequestUsage) -> str | None:
        """Emit one usage record; its id, or None when it could not be metered."""

        def fields() -> dict[str, Any]:
            tokens = token_usage(usage)
            requests = provider_tool_requests(usage)
            counts: dict[str, Any] = {
                "input_tokens": tokens.input_tokens,
                "output_tokens": tokens.output_tokens,
                "cache_read_tokens": tokens.cache_read_tokens,
                "cache_write_tokens": tokens.cache_write_tokens,
                "tool_requests": requests,
            }
            price = price_for(self.prices, str(spec), configured)
            return {"tier": model_tier(spec, self.tiers), **counts, "cost_usd": cost_usd(price, **counts)}

        return self._emit(str(spec), stage, fields)

    def record_units(self, model: str, stage: str, units: int, cost: float | None) -> str | None:
        """Emit one usage record of a call counted in units, not tokens (seconds of audio
        transcribed); its id, or None when it could not be metered."""
        return self._emit(
            model, stage, lambda: {"tier": self.tiers.get(model, "cheap"), "units": units, "cost_usd": cost}
        )

    def _emit(self, model: str, stage: str, fields: Callable[[], dict[str, Any]]) -> str | None:
        """One record: who, where and why from the bound attribution, the counts from
        `fields`; metering never fails a call (a failure is logged and yields None)."""
        try:
            attribution = usage_context.current()
            now = self.clock.now()
            record = UsageRecord(
                id=new_id(now),
                call_id=self._call_id(attribution),
                at=now,
                agent_id=attribution.agent_id or self.agent_id,
                stage=stage,
                model=model,
                surface=attribution.surface,
                channel=attribution.channel,
                thread_id=attribution.thread_id,
                conversation_id=attribution.conversation_id,
                trigger=attribution.trigger,
                **fields(),
            )
            self.meter.emit(record)
        except Exception:
            log.warning("could not meter a call to %s", model, exc_info=True)
            return None
        return record.id

    def _call_id(self, attribution: usage_context.Attribution) -> str | None:
        """Inside a durable step, the logical call: derived from the step and the round.

        Every physical call gets a fresh record id (two calls are two bills, and the ledger
        counts each); this one is what a step run again shares with its first run. A re-run
        step re-binds its attribution (a new object), so its rounds count from zero again and
        its calls get the same call ids, which is how the ledger shows a repeated call. The
        id's time part is the workflow's start (its id is a ULID), not the wall clock, which
        differs on a re-run.
        """
        step_key = attribution.step_key
        if step_key is None:
            return None
        key = id(attribution)
        entry = self._rounds.get(key)
        round_no = entry[1] if entry is not None and entry[0] is attribution else 0
        self._rounds[key] = (attribution, round_no + 1)
        self._rounds.move_to_end(key)
        while len(self._rounds) > _ROUND_COUNTERS:
            self._rounds.popitem(last=False)
        workflow = step_key.split(":", 1)[0]
        anchor = id_time(workflow) if is_id(workflow) else _EPOCH
        return derived_id(anchor, step_key, str(round_no))


class MeteredModel(RoundTripModel):
    """Emits a usage record for every round-trip that returned, labelled with the stage the
    gateway stamped on the request, and stamps the response with the record's id and the
    model string, so the gateway (and a chain's caller) knows which model answered.

    With `record_failures` (a member of a fallback chain), an attempt that failed is recorded
    too, with the tokens it is known to have used (none), so the ledger shows the failover.
    A stream that broke off after it began is recorded with what it streamed (billed)."""

    def __init__(
        self, wrapped: Model, *, spec: ModelSpec, configured: str, meter: CallMeter, record_failures: bool
    ) -> None:
        super().__init__(wrapped)
        self._spec = spec
        self._configured = configured
        self._meter = meter
        self._record_failures = record_failures

    @asynccontextmanager
    async def _round_trip(self, call: Call[Reply]) -> AsyncGenerator[Reply]:
        stage = stage_of(call.messages)
        opened: Reply | None = None
        try:
            async with call.to(self.wrapped) as reply:
                opened = reply
                yield reply
        except ModelError:
            if opened is not None:  # it broke off after it began: what it streamed is spent, and billed
                self._record(stage, opened.usage)
            elif self._record_failures:
                self._record(stage, RequestUsage())
            raise
        reply.metadata = {
            **(reply.metadata or {}),
            MODEL_METADATA_KEY: str(self._spec),
            USAGE_ID_METADATA_KEY: self._record(stage, reply.usage),
        }

    def _record(self, stage: str, usage: RequestUsage) -> str | None:
        return self._meter.record(self._spec, self._configured, stage, usage)


_REQUESTS_SUFFIX = "_requests"


def provider_tool_requests(usage: RequestUsage) -> dict[str, int]:
    """Requests of provider-run tools in one round-trip, by tool: pydantic-ai keeps Anthropic's
    `usage.server_tool_use.web_search_requests` as the usage detail `web_search_requests`."""
    return {
        key.removesuffix(_REQUESTS_SUFFIX): count
        for key, count in (usage.details or {}).items()
        if key.endswith(_REQUESTS_SUFFIX) and count > 0
    }


def token_usage(usage: RequestUsage) -> TokenUsage:
    return TokenUsage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
    )
