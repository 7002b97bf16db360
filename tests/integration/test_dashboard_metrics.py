"""The Grafana dashboard (dev-stack/grafana/pgbridge-dashboard.json) against a running
``pgbridge run``: every capture and snapshot metric its queries read is on the process's
/metrics endpoint, with samples where the run made some (the apply job's side is scraped by
test_spark_faults.py while its query runs)."""

from __future__ import annotations

import uuid
from pathlib import Path

import psycopg
import pytest

from bridge.devstack.stack import StackInfo
from tests.dashboard import exported_families, of_run, queried_families
from tests.integration.bridge_harness import (
    BridgeProcess,
    bridge_settings,
    free_port,
    mark,
    scrape_metrics,
    scratch_database,
    wait_for,
    wait_slot_confirmed,
)

pytestmark = pytest.mark.integration


def test_every_metric_the_dashboard_reads_is_exported_by_a_running_bridge(
    local_stack: StackInfo, tmp_path: Path
) -> None:
    prefix = f"dash{uuid.uuid4().hex[:8]}"
    port = free_port()
    with scratch_database(local_stack) as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE items (id int PRIMARY KEY, v text)")
            conn.execute("INSERT INTO items SELECT i, 'v' FROM generate_series(1, 100) i")
        settings = bridge_settings(
            local_stack,
            dsn,
            prefix,
            **{"metrics.port": str(port), "metrics.host": "127.0.0.1", "state.dir": str(tmp_path)},
        )
        process = BridgeProcess(settings, str(tmp_path / "bridge.log"))
        try:
            wait_for(lambda: "to topics" in process.log(), process, "streaming")
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("UPDATE items SET v = 'w' WHERE id <= 10")
            wait_slot_confirmed(dsn, settings["slot.name"], mark(dsn), process)
            scrape = scrape_metrics(port, 'pgbridge_events_total{op="u",table="public.items"} 10.0')
            assert process.terminate() == 0, process.log()[-3000:]
        finally:
            if process.proc.poll() is None:
                process.kill()
    missing = of_run(queried_families()) - exported_families(scrape)
    assert not missing, f"the dashboard reads metrics pgbridge run does not export: {missing}"
    # The queries are not vacuous: the run's own figures are there.
    assert 'pgbridge_events_total{op="u",table="public.items"} 10.0' in scrape
    assert 'pgbridge_snapshot_rows{table="public.items"} 100.0' in scrape
    assert "pgbridge_exactly_once 1.0" in scrape  # the default, granted by the local stack
