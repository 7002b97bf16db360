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
from tests.integration.soak import CYCLE_OUTAGES, EXACTLY_ONCE_CYCLE, report, run_cycle

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


# make test: exactly once through three SIGKILLs (test_exactly_once.py); here the whole cycle
# on a 3-broker cluster, beside the same cycle at-least-once (a cluster and two cycles: ~7 min).
@pytest.mark.long
def test_exactly_once_fault_cycle_on_three_brokers_repeats_and_loses_nothing(
    local_stack: StackInfo, record_property: pytest.RecordProperty
) -> None:
    """#36: walsender terminated, the bridge SIGKILLed three times, the registry down while a
    table is created, the hot partition's leader SIGKILLed, then frozen (SIGSTOP: a stalled
    disk), a rolling restart of the three brokers, PostgreSQL restarted, on 3 brokers
    (replication factor 3, min.insync.replicas 2): a read_committed consumer sees each value
    once; the same cycle at-least-once is printed beside it."""
    tables = []
    for exactly_once in (False, True):
        results, rig = run_cycle(
            local_stack, EXACTLY_ONCE_CYCLE, pause=6, brokers=3, exactly_once=exactly_once
        )
        table = report(results, rig)
        mode = "exactly once" if exactly_once else "at-least-once"
        tables.append(f"{mode}, 3 brokers:\n{table}")
        assert [r.fault for r in results] == [f for f, _ in EXACTLY_ONCE_CYCLE]
        # The bridge's log is gone with the rig's directory: its tail says why.
        assert all(r.recovered for r in results), f"{table}\n{rig.final_log[-6000:]}"
        assert sum(r.lost for r in results) == 0 and rig.unattributed["lost"] == 0, table
        assert rig.committed > 1000, table
    record_property("fault_table", "\n\n".join(tables))  # printed at the end of the run
    print("\n\n".join(tables))
    duplicates = sum(r.duplicates for r in results) + rig.unattributed["duplicates"]
    assert duplicates == 0, tables[-1]  # the exactly-once run
