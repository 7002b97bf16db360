"""The Grafana dashboard's queries read metrics pgbridge declares (running processes are
scraped by tests/integration/test_dashboard_metrics.py and test_spark_faults.py)."""

from __future__ import annotations

import json

from prometheus_client import generate_latest

from bridge.ops.metrics import BridgeMetrics
from tests.dashboard import DASHBOARD, exported_families, of_apply, of_run, queried_families


def test_dashboard_is_grafana_json_with_a_prometheus_datasource() -> None:
    document = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert document["uid"] == "pgbridge"
    targets = [t for p in document["panels"] for t in p.get("targets", [])]
    assert len(targets) >= 20
    assert {t["datasource"]["uid"] for t in targets} == {"${datasource}"}
    assert document["templating"]["list"][0]["query"] == "prometheus"


def test_every_capture_metric_the_dashboard_reads_is_declared_by_pgbridge_run() -> None:
    queried = of_run(queried_families())
    assert {"pgbridge_events", "pgbridge_lag_bytes", "pgbridge_snapshot_rows"} <= queried
    declared = exported_families(generate_latest(BridgeMetrics().registry).decode())
    assert queried - declared == set()


def test_every_apply_metric_the_dashboard_reads_is_declared_by_the_apply_job() -> None:
    from prometheus_client import REGISTRY

    import bridge.spark.applier
    import bridge.spark.changelog
    import bridge.spark.job  # noqa: F401 - their metrics register on import

    queried = of_apply(queried_families())
    assert {"pgbridge_apply_freshness_seconds", "pgbridge_apply_topic_lag_records"} <= queried
    assert queried - exported_families(generate_latest(REGISTRY).decode()) == set()
