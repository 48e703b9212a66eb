"""Counter metering adapter: Prometheus counters for burn-rate dashboards (SPEC App. C).

Labels are only the low-cardinality dimensions — agent, stage, tier, surface (and the token
direction on the token counter). Conversation, reasoning thread and record id would explode
the metric space and, since a counter never forgets a label set, leak memory for the life of
the process; they belong to the event log. Each adapter owns its `CollectorRegistry`, so
several agents or tests in one process never collide on the global registry.
"""

from __future__ import annotations

import logging
import threading
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, start_http_server

from persyn.usage.records import UsageRecord

__all__ = ["COUNTER_LABELS", "PrometheusAdapter"]

log = logging.getLogger(__name__)

COUNTER_LABELS = ("agent", "stage", "tier", "surface")
_UNKNOWN = "unknown"


class PrometheusAdapter:
    """Accumulates usage into counters and, once `start`ed, serves them for scraping."""

    def __init__(self, namespace: str = "persyn") -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.calls = Counter(
            "model_calls",
            "Model calls completed",
            COUNTER_LABELS,
            namespace=namespace,
            registry=self.registry,
        )
        self.tokens = Counter(
            "model_tokens",
            "Tokens consumed by model calls, by direction (input includes cached input)",
            (*COUNTER_LABELS, "direction"),
            namespace=namespace,
            registry=self.registry,
        )
        self.cost = Counter(
            "model_cost_usd",
            "Derived cost of priced model calls in US dollars",
            COUNTER_LABELS,
            namespace=namespace,
            registry=self.registry,
        )
        self.unpriced = Counter(
            "model_unpriced_calls",
            "Model calls with no price in the price table (counted, not costed)",
            COUNTER_LABELS,
            namespace=namespace,
            registry=self.registry,
        )
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int | None:
        """The port being served on, or None when not serving."""
        return None if self._server is None else int(self._server.server_address[1])

    def start(self, port: int, host: str = "127.0.0.1") -> bool:
        """Serve `/metrics` on `host:port`; port 0 means disabled (nothing is served).

        Fail-soft like all metering (SPEC §7): a port that cannot be bound is logged and the
        counters simply go unserved; returns whether the endpoint is up.
        """
        if port == 0:
            return False
        if self._server is None:
            try:
                self._server, self._thread = start_http_server(port, addr=host, registry=self.registry)
            except OSError as exc:
                log.warning("cannot serve usage counters on %s:%d: %s", host, port, exc)
                return False
        return True

    def stop(self) -> None:
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join(timeout=5)

    def handle(self, record: UsageRecord) -> None:
        labels = (
            record.agent_id or _UNKNOWN,
            record.stage,
            record.tier,
            record.surface or _UNKNOWN,
        )
        self.calls.labels(*labels).inc()
        for direction, count in (
            ("input", record.input_tokens),
            ("output", record.output_tokens),
            ("cache_read", record.cache_read_tokens),
            ("cache_write", record.cache_write_tokens),
        ):
            if count:
                self.tokens.labels(*labels, direction).inc(count)
        if record.cost_usd is None:
            self.unpriced.labels(*labels).inc()
        else:
            self.cost.labels(*labels).inc(record.cost_usd)

    def close(self) -> None:
        """Counters stay readable after close; serving is stopped by `stop` (the owner's call)."""
