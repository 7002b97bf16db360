"""Fixtures of the Spark tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

#: What a table write fails with under :func:`failing`.
OUTAGE = "storage unavailable"


@pytest.fixture
def batches(spark: Any, tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    """Batches (tests/spark/batches.py) written as the job writes them by default (small
    tables: by the driver); ``@BOTH_WRITERS`` runs a test once more with Spark writing every
    table (and test_lane_batches with the task lane taking every batch it may: by default only
    batches of more than 50,000 records)."""
    from tests.spark.batches import Batches

    return Batches(spark, tmp_path, getattr(request, "param", "driver"))


@pytest.fixture
def failing(monkeypatch: pytest.MonkeyPatch) -> Iterator[set[str]]:
    """The topics whose table writes fail (with :data:`OUTAGE`: the engine's failure, not the
    data's) while in the set: ``BatchApplier._apply_table`` raises for them."""
    from bridge.spark.applier import BatchApplier

    topics: set[str] = set()
    apply_table = BatchApplier._apply_table

    def failing_apply_table(self: BatchApplier, spark: Any, table: Any, *args: Any) -> None:
        if table.topic in topics:
            raise RuntimeError(OUTAGE)
        apply_table(self, spark, table, *args)

    monkeypatch.setattr(BatchApplier, "_apply_table", failing_apply_table)
    yield topics
