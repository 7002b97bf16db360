"""The integration run's scheduler keeps modules that use Spark off the worker without a
Spark session (tests/scheduling.py)."""

from __future__ import annotations

from collections import OrderedDict
from types import SimpleNamespace
from typing import Any

from tests.scheduling import SparkAwareScheduling


def _scheduler(queue: list[str], spark: set[str]) -> SparkAwareScheduling:
    scheduler = SparkAwareScheduling.__new__(SparkAwareScheduling)  # no xdist session needed
    scheduler.spark_modules = frozenset(spark)
    scheduler.workqueue = OrderedDict((unit, {f"{unit}::t": False}) for unit in queue)
    return scheduler


def _worker(number: int) -> Any:
    return SimpleNamespace(gateway=SimpleNamespace(id=f"gw{number}"))


def test_spark_workers_take_spark_modules_first_then_the_rest() -> None:
    scheduler = _scheduler(["plain_a", "spark_a", "plain_b"], {"spark_a"})
    assert scheduler._next_unit_for(_worker(0)) == "spark_a"
    assert scheduler._next_unit_for(_worker(1)) == "spark_a"
    del scheduler.workqueue["spark_a"]
    assert scheduler._next_unit_for(_worker(1)) == "plain_a"


def test_the_third_worker_never_takes_a_spark_module() -> None:
    scheduler = _scheduler(["spark_a", "plain_a"], {"spark_a"})
    assert scheduler._next_unit_for(_worker(2)) == "plain_a"
    del scheduler.workqueue["plain_a"]
    assert scheduler._next_unit_for(_worker(2)) is None
    assert scheduler._next_unit_for(_worker(0)) == "spark_a"
