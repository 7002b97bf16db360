"""Compaction of the tables the job writes: a table written every second by the default
trigger keeps a bounded number of files, its rows unchanged, and a restarted job still finds
its fences, whichever writer wrote its batches."""

from __future__ import annotations

from typing import Any

import pytest

from bridge.spark import merge
from tests.spark.batches import BOTH_WRITERS, KEYED, Batches, _ids

pytestmark = pytest.mark.integration


@BOTH_WRITERS
def test_a_table_written_every_batch_is_compacted_and_stays_exact(
    batches: Batches, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the file bound the job compacts the table (delta-rs's writes: the applier, with
    Spark's OPTIMIZE; Spark's: Delta's auto compaction, which the job switches on); the rows
    are unchanged, a change to a compacted row applies, and a restarted job still finds the
    fences: a replayed batch writes nothing."""
    from delta.tables import DeltaTable

    from bridge.spark import applier as applier_module

    monkeypatch.setattr(merge, "COMPACT_AT_FILES", 2)
    # The job's settings on its session, as bridge.spark.job sets them (a DataFrame's write
    # runs in the session of the batch it came from), with Delta's bound lowered likewise.
    conf = {**applier_module.job_conf(2), "spark.databricks.delta.autoCompact.minNumFiles": "2"}
    before = {key: spark.conf.get(key, None) for key in conf}
    for key, value in conf.items():
        spark.conf.set(key, value)
    expected: dict[int, str] = {}
    try:
        for batch_id in range(3):  # inserts: each batch adds a file (an update rewrites its own)
            batches.add(KEYED, "c", (10 + batch_id, 0), after={"id": batch_id, "v": "new"})
            expected[batch_id] = "new"
            last = batches.frame().localCheckpoint()
            batches.apply(batch_id, last)
    finally:
        for key, value in before.items():
            spark.conf.unset(key) if value is None else spark.conf.set(key, value)
    assert _ids(batches) == expected
    path = batches.config.table_path("public", "keyed")
    history = DeltaTable.forPath(spark, path).history().orderBy("version").collect()
    assert "OPTIMIZE" in [r["operation"] for r in history], history
    assert len(spark.read.format("delta").load(path).inputFiles()) < 2
    applier = batches.apply(2, last, restarted=True)
    assert applier.stats.last_write["public.keyed"] == ("replay", "")
    batches.add(KEYED, "u", (20, 0), after={"id": 0, "v": "changed"})
    batches.apply(3)
    assert _ids(batches) == {**expected, 0: "changed"}
