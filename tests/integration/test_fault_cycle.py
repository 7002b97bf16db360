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
from tests.integration.soak import (
    AT_LEAST_ONCE,
    CYCLE_OUTAGES,
    EXACTLY_ONCE,
    EXACTLY_ONCE_CYCLE,
    SHORT_EXACTLY_ONCE_CYCLE,
    Capture,
    FaultResult,
    FaultRig,
    report,
    run_cycle,
)

pytestmark = pytest.mark.integration


# make test: each fault on its own (test_faults.py, test_pipeline_e2e.py kill -9,
# source/test_source_replication.py walsender termination); here all of them in one run.
@pytest.mark.long
def test_fault_cycle_each_fault_once_under_a_writer_loses_nothing(
    local_stack: StackInfo, record_property: pytest.RecordProperty
) -> None:
    rig = run_cycle(local_stack, list(CYCLE_OUTAGES.items()), pause=8)
    table = report(rig)
    record_property("fault_table", table)  # printed at the end of the run (tests/conftest.py)
    print(table)
    capture = rig.captures[0]
    assert [r.fault for r in capture.results] == list(CYCLE_OUTAGES)
    assert all(r.recovered for r in capture.results), table
    assert sum(r.lost for r in capture.results) == 0 and capture.unattributed["lost"] == 0, table
    assert capture.unattributed["duplicates"] == 0, table  # no resend without a fault
    assert rig.committed > 1000, table
    assert "streaming again from the slot's confirmed position" in capture.final_log


def _check_side_by_side(
    rig: FaultRig, schedule: list[tuple[str, float]], record_property: pytest.RecordProperty
) -> None:
    """Both bridges recovered from every fault by themselves and lost nothing; the
    exactly-once one repeated nothing (read_committed), the other's repeats printed beside."""
    table = report(rig)
    record_property("fault_table", table)  # printed at the end of the run (tests/conftest.py)
    print(table)
    for capture in rig.captures:
        assert [r.fault for r in capture.results] == [f for f, _ in schedule]
        failed = [r for r in capture.results if not r.recovered]
        # The bridge's log is gone with the rig's directory: what it did after the fault.
        assert not failed, f"{table}\n{capture.mode}:\n{capture.log_after(failed[0].injected_at)}"
        losing = [r for r in capture.results if r.lost]
        # Where a loss shows: the bridge's log from the fault before the lost values' commits.
        assert not losing, f"{table}\n{capture.mode}:\n{_log_before(rig, capture, losing[0])}"
        assert capture.unattributed["lost"] == 0, table
    assert rig.committed > 1000, table
    exactly_once = next(c for c in rig.captures if c.mode == EXACTLY_ONCE)
    repeated = sum(r.duplicates for r in exactly_once.results)
    assert repeated + exactly_once.unattributed["duplicates"] == 0, table


def _log_before(rig: FaultRig, capture: Capture, charged: FaultResult) -> str:
    """The bridge's log from the fault before ``charged`` (a value is charged to the first
    fault injected after its commit) to the end of ``charged``'s recovery, and PostgreSQL's
    log of the slot's decoding sessions meanwhile."""
    index = capture.results.index(charged)
    start = capture.results[index - 1].injected_at if index else charged.injected_at - 30
    seconds = charged.injected_at - start + 40
    return (
        f"{capture.log_after(start, seconds)}\n== PostgreSQL, decoding sessions:\n"
        f"{rig.decoding_starts(capture, start, seconds)}"
    )


# make test-long only (3 brokers, 2 bridges and a writer through 7 faults: 135 CPU-s of make
# test's ~1,700): make test keeps exactly once through SIGKILLs, fencing and a refusing broker
# (test_exactly_once.py) and a single broker's faults at least once (test_faults.py).
@pytest.mark.long
def test_exactly_once_on_three_brokers_through_each_kind_of_fault_repeats_nothing(
    local_stack: StackInfo, record_property: pytest.RecordProperty
) -> None:
    """#36, the short cycle: on 3 brokers (replication factor 3, min.insync.replicas 2) the
    walsenders terminated, the bridges SIGKILLed twice, the registry down while a table is
    created, the hot partition's leader SIGKILLed past the delivery timeout, PostgreSQL
    restarted, under one writer: an exactly-once bridge and an at-least-once one side by side
    on the same database. The whole cycle (a stalled leader, a rolling restart, more kills) is
    make test-long's."""
    rig = run_cycle(
        local_stack,
        SHORT_EXACTLY_ONCE_CYCLE,
        pause=2,
        brokers=3,
        modes=(AT_LEAST_ONCE, EXACTLY_ONCE),
        write_interval=0.02,  # a lighter writer: make test runs a second test beside it
    )
    _check_side_by_side(rig, SHORT_EXACTLY_ONCE_CYCLE, record_property)


@pytest.mark.long
def test_exactly_once_fault_cycle_on_three_brokers_repeats_and_loses_nothing(
    local_stack: StackInfo, record_property: pytest.RecordProperty
) -> None:
    """#36: walsender terminated, the bridge SIGKILLed three times, the registry down while a
    table is created, the hot partition's leader SIGKILLed, then frozen (SIGSTOP: a stalled
    disk), a rolling restart of the three brokers, PostgreSQL restarted, on 3 brokers
    (replication factor 3, min.insync.replicas 2): a read_committed consumer sees each value
    once; an at-least-once bridge on the same database under the same faults is printed
    beside it."""
    rig = run_cycle(
        local_stack, EXACTLY_ONCE_CYCLE, pause=6, brokers=3, modes=(AT_LEAST_ONCE, EXACTLY_ONCE)
    )
    _check_side_by_side(rig, EXACTLY_ONCE_CYCLE, record_property)
