"""Prometheus metrics: values, lag arithmetic and the HTTP exposition."""

from __future__ import annotations

import datetime as dt
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from bridge.ops.metrics import BridgeMetrics

NOW = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)


@pytest.fixture
def metrics() -> Iterator[BridgeMetrics]:
    m = BridgeMetrics(clock=lambda: NOW)
    yield m
    m.close()


def _value(metrics: BridgeMetrics, name: str, **labels: str) -> float | None:
    value = metrics.registry.get_sample_value(name, labels)
    return value


def test_bridge_metrics_counts_events_per_table_and_op(metrics: BridgeMetrics) -> None:
    metrics.event("public.orders", "c")
    metrics.event("public.orders", "c", 4)
    metrics.event("public.orders", "d")
    metrics.event("public.users", "u")
    assert _value(metrics, "pgbridge_events_total", table="public.orders", op="c") == 5
    assert _value(metrics, "pgbridge_events_total", table="public.orders", op="d") == 1
    assert _value(metrics, "pgbridge_events_total", table="public.users", op="u") == 1


def test_bridge_metrics_lag_bytes_is_wal_end_minus_acknowledged(metrics: BridgeMetrics) -> None:
    metrics.received(0x1000, server_wal_end=0x5000)
    assert _value(metrics, "pgbridge_lag_bytes") == 0  # nothing acknowledged yet: not computed
    metrics.acknowledged(0x3000)
    assert _value(metrics, "pgbridge_lag_bytes") == 0x2000
    metrics.received(0x6000, server_wal_end=0x8000)
    assert _value(metrics, "pgbridge_lag_bytes") == 0x5000
    assert _value(metrics, "pgbridge_last_received_lsn") == 0x6000
    assert _value(metrics, "pgbridge_last_acknowledged_lsn") == 0x3000
    assert _value(metrics, "pgbridge_server_wal_end_lsn") == 0x8000


def test_bridge_metrics_lag_milliseconds_from_commit_time(metrics: BridgeMetrics) -> None:
    metrics.transaction(NOW - dt.timedelta(seconds=2, milliseconds=500))
    assert _value(metrics, "pgbridge_lag_milliseconds") == 2500
    metrics.transaction(NOW + dt.timedelta(seconds=1))  # clock skew: not negative
    assert _value(metrics, "pgbridge_lag_milliseconds") == 0
    metrics.transaction()
    assert _value(metrics, "pgbridge_transactions_total") == 3


def test_bridge_metrics_instances_are_independent() -> None:
    a, b = BridgeMetrics(), BridgeMetrics()
    a.error("delivery")
    a.in_flight(7)
    assert _value(a, "pgbridge_errors_total", kind="delivery") == 1
    assert _value(b, "pgbridge_errors_total", kind="delivery") is None
    assert _value(a, "pgbridge_in_flight_records") == 7
    assert _value(b, "pgbridge_in_flight_records") == 0


def test_bridge_metrics_serve_exposes_values_over_http(metrics: BridgeMetrics) -> None:
    port = metrics.serve(0, "127.0.0.1")
    assert port > 0
    metrics.event("public.orders", "c", 3)
    metrics.error("decode")
    metrics.in_flight(12)
    metrics.acknowledged(0x16B3748)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert response.status == 200
        body = response.read().decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
    }
    assert samples[("pgbridge_events_total", (("op", "c"), ("table", "public.orders")))] == 3
    assert samples[("pgbridge_errors_total", (("kind", "decode"),))] == 1
    assert samples[("pgbridge_in_flight_records", ())] == 12
    assert samples[("pgbridge_last_acknowledged_lsn", ())] == 0x16B3748
    assert any(name == "pgbridge_build_info" for name, _ in samples)


def test_bridge_metrics_close_stops_the_endpoint(metrics: BridgeMetrics) -> None:
    port = metrics.serve(0, "127.0.0.1")
    metrics.close()
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)


def test_bridge_metrics_exports_lossy_values_counted_by_converters(metrics: BridgeMetrics) -> None:
    from bridge.types.lossy import record_lossy

    name = "pgbridge_lossy_values_total"
    before = _value(metrics, name, type="test-type", reason="clamped") or 0
    record_lossy("test-type", "clamped")
    record_lossy("test-type", "clamped")
    assert _value(metrics, name, type="test-type", reason="clamped") == before + 2


def test_bridge_metrics_say_which_dependency_is_waited_for(metrics: BridgeMetrics) -> None:
    from bridge.retry import WAITED_SECONDS, WAITING_FOR

    saved = dict(WAITING_FOR), dict(WAITED_SECONDS)
    waiting = "pgbridge_waiting_for_dependency"
    waited = "pgbridge_retry_wait_seconds_total"
    try:
        WAITING_FOR.clear()
        WAITED_SECONDS.clear()
        for dependency in ("kafka", "postgres", "schema registry"):
            assert _value(metrics, waiting, dependency=dependency) == 0.0
            assert _value(metrics, waited, dependency=dependency) == 0.0
        WAITING_FOR["kafka"] = "delivering records"
        WAITED_SECONDS["kafka"] = 12.5
        assert _value(metrics, waiting, dependency="kafka") == 1.0
        assert _value(metrics, waiting, dependency="postgres") == 0.0
        assert _value(metrics, waited, dependency="kafka") == 12.5
    finally:
        WAITING_FOR.clear()
        WAITED_SECONDS.clear()
        WAITING_FOR.update(saved[0])
        WAITED_SECONDS.update(saved[1])
