"""Fixtures of the Spark tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def batches(spark: Any, tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    """Batches (tests/spark/batches.py) written as the job writes them by default (small
    tables: by the driver); ``@BOTH_WRITERS`` runs a test once more with Spark writing every
    table (and test_lane_batches with the task lane taking every batch it may: by default only
    batches of more than 50,000 records)."""
    from tests.spark.batches import Batches

    return Batches(spark, tmp_path, getattr(request, "param", "driver"))
