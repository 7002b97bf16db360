"""What a Delta column needs when its PostgreSQL column's type changed (``type_change``)."""

from __future__ import annotations

import pytest
from pyspark.sql import types as T

from bridge.spark.merge import type_change


@pytest.mark.parametrize(
    ("old", "new", "verdict"),
    [
        (T.IntegerType(), T.IntegerType(), "none"),
        (T.IntegerType(), T.LongType(), "widen"),  # int4 -> int8: the classic id overflow fix
        (T.ShortType(), T.IntegerType(), "widen"),
        (T.LongType(), T.IntegerType(), "none"),  # bigint holds every int
        (T.FloatType(), T.DoubleType(), "widen"),
        (T.DoubleType(), T.FloatType(), "none"),
        (T.IntegerType(), T.DoubleType(), "widen"),
        (T.LongType(), T.DoubleType(), "refuse"),  # not every long is a double
        (T.DecimalType(10, 2), T.DecimalType(12, 2), "widen"),
        (T.DecimalType(10, 2), T.DecimalType(12, 4), "widen"),
        (T.DecimalType(12, 4), T.DecimalType(10, 2), "none"),
        (T.DecimalType(10, 2), T.DecimalType(10, 4), "refuse"),  # fewer integer digits
        (T.IntegerType(), T.DecimalType(38, 18), "widen"),  # int -> unconstrained numeric
        (T.LongType(), T.DecimalType(12, 2), "refuse"),
        (T.DecimalType(38, 18), T.IntegerType(), "none"),
        (T.DateType(), T.TimestampNTZType(), "widen"),
        (T.IntegerType(), T.StringType(), "refuse"),
        (T.StringType(), T.IntegerType(), "refuse"),
        (T.TimestampType(), T.TimestampNTZType(), "refuse"),
    ],
)
def test_type_change_verdicts(old: T.DataType, new: T.DataType, verdict: str) -> None:
    assert type_change(old, new) == verdict
