"""The counter adapter: low-cardinality labels only, served on a loopback port."""

from __future__ import annotations

import socket

import httpx
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from usage_fakes import make_record

from persyn.usage.prometheus import COUNTER_LABELS, PrometheusAdapter


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_counters_carry_only_low_cardinality_labels() -> None:
    adapter = PrometheusAdapter()
    record = make_record(input_tokens=100, output_tokens=10, cache_read_tokens=60, cost_usd=0.5)
    adapter.handle(record)
    adapter.handle(make_record(stage="rate", cost_usd=None))
    exposition = generate_latest(adapter.registry).decode()
    for high_cardinality in (record.id, record.conversation_id, record.thread_id, record.channel):
        assert high_cardinality is not None
        assert high_cardinality not in exposition
    assert set(COUNTER_LABELS) == {"agent", "stage", "tier", "surface"}
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(exposition)
        for sample in family.samples
        if sample.name.endswith("_total")
    }
    for _, labels in samples:
        assert {name for name, _ in labels} <= {*COUNTER_LABELS, "direction"}
    respond = {
        "agent": "01J9Z3K4W5X6Y7Z8A9B0C1D2E3",
        "stage": "respond",
        "tier": "test",
        "surface": "terminal",
    }

    def value(name: str, **labels: str) -> float:
        return samples[(name, tuple(sorted({**respond, **labels}.items())))]

    assert value("persyn_model_calls_total") == 1
    assert value("persyn_model_tokens_total", direction="input") == 100
    assert value("persyn_model_tokens_total", direction="cache_read") == 60
    assert value("persyn_model_cost_usd_total") == 0.5
    assert value("persyn_model_unpriced_calls_total", stage="rate") == 1


def test_each_adapter_has_its_own_registry() -> None:
    first, second = PrometheusAdapter(), PrometheusAdapter()
    first.handle(make_record())
    assert "persyn_model_calls_total{" in generate_latest(first.registry).decode()
    assert "persyn_model_calls_total{" not in generate_latest(second.registry).decode()


def test_the_endpoint_serves_on_loopback() -> None:
    adapter = PrometheusAdapter()
    adapter.handle(make_record())
    port = free_port()
    assert adapter.start(port, "127.0.0.1")
    try:
        assert adapter.port == port
        response = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
        assert response.status_code == 200
        assert "persyn_model_calls_total" in response.text
    finally:
        adapter.stop()
    assert adapter.port is None


def test_port_zero_means_disabled() -> None:
    adapter = PrometheusAdapter()
    assert not adapter.start(0)
    assert adapter.port is None
    adapter.stop()


def test_a_busy_port_degrades_to_unserved_counters(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        adapter = PrometheusAdapter()
        assert not adapter.start(int(busy.getsockname()[1]), "127.0.0.1")
    assert adapter.port is None
    assert "cannot serve usage counters" in caplog.text
    adapter.handle(make_record())  # counting still works
