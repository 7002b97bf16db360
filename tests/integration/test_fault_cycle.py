"""Every fault of the suite once, in one cycle under a steady writer, with the table of
fault x recovered / time to recover / duplicates / lost (printed at the end of the run).

What users rely on: ``pgbridge run`` recovers by itself from each transient fault (the one
SIGKILL aside, where the restart is the recovery), every counter value committed in
PostgreSQL is in Kafka, and duplicates appear only around a fault (the at-least-once resend of
what was not yet acknowledged), never in steady streaming.
"""

from __future__ import annotations

import pytest

from bridge.devstack.stack import StackInfo
from tests.integration.soak import CYCLE_OUTAGES, report, run_cycle

pytestmark = pytest.mark.integration


# make test: each fault on its own (test_faults.py, test_pipeline_e2e.py kill -9,
# source/test_source_replication.py walsender termination); here all of them in one run.
@pytest.mark.long
def test_fault_cycle_each_fault_once_under_a_writer_loses_nothing(
    local_stack: StackInfo, record_property: pytest.RecordProperty
) -> None:
    results, rig = run_cycle(local_stack, list(CYCLE_OUTAGES.items()), pause=8)
    table = report(results, rig)
    record_property("fault_table", table)  # printed at the end of the run (tests/conftest.py)
    print(table)
    assert [r.fault for r in results] == list(CYCLE_OUTAGES)
    assert all(r.recovered for r in results), table
    assert sum(r.lost for r in results) == 0 and rig.unattributed["lost"] == 0, table
    assert rig.unattributed["duplicates"] == 0, table  # no resend without a fault
    assert rig.committed > 1000, table
    assert "streaming again from the slot's confirmed position" in rig.final_log
