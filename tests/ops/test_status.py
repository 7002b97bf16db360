"""``pgbridge status`` says what a running bridge is waiting for (from its metrics endpoint)."""

from __future__ import annotations

from bridge.config import BridgeConfig, load_config
from bridge.ops.metrics import BridgeMetrics
from bridge.ops.status import BridgeStatus, SlotStatus, waiting_for
from bridge.retry import WAITING_FOR


def _config(port: int) -> BridgeConfig:
    return load_config(
        None,
        {},
        {
            "database.dbname": "shop",
            "topic.prefix": "shop",
            "kafka.bootstrap.servers": "k:9092",
            "schema.registry.url": "http://r",
            "metrics.port": str(port),
        },
    )


def test_status_waiting_for_reads_the_running_bridges_metrics() -> None:
    metrics = BridgeMetrics()
    port = metrics.serve(0, "127.0.0.1")
    saved = dict(WAITING_FOR)
    try:
        WAITING_FOR.clear()
        assert waiting_for(_config(port)) == []
        WAITING_FOR["kafka"] = "delivering records"
        assert waiting_for(_config(port)) == ["kafka"]
        status = BridgeStatus(SlotStatus("s", False), "p", False, waiting_for=["kafka"])
        assert "waiting for: kafka (a transient fault)" in status.render()
    finally:
        WAITING_FOR.clear()
        WAITING_FOR.update(saved)
        metrics.close()
    # Nothing listens any more: unknown, not an error.
    assert waiting_for(_config(port), timeout=0.5) is None


def test_status_waiting_for_is_unknown_without_a_metrics_port() -> None:
    assert waiting_for(_config(0)) is None
