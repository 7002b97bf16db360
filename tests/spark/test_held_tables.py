"""When a running job tries its held tables again, and what a failed try leaves
(bridge.spark.set_aside.HeldTables; the replay itself: test_set_aside.py)."""

from __future__ import annotations

from typing import Any

import pytest

from bridge.spark.set_aside import HeldTables

NO_SPARK: Any = None  # every read is assumed: none reaches Spark


def _held(replay: Any, retry_seconds: float = 0.0) -> HeldTables:
    tables = HeldTables("/unused/dead-letter", retry_seconds, replay)
    tables.assume({"p.public.a": 3, "p.public.b": 5})
    return tables


def test_a_try_releases_what_the_replay_applied_and_keeps_the_rest() -> None:
    tables = _held(lambda spark: {"p.public.b": 5})
    assert tables.retry(NO_SPARK) == {"p.public.a"}
    assert tables.current(NO_SPARK) == {"p.public.b": 5}


def test_no_try_before_the_interval_has_passed() -> None:
    calls: list[Any] = []
    tables = _held(lambda spark: calls.append(spark) or {}, retry_seconds=300)
    assert tables.retry(NO_SPARK) == set() and calls == []
    assert tables.current(NO_SPARK).keys() == {"p.public.a", "p.public.b"}


def test_a_try_that_fails_keeps_every_table_held_and_is_not_repeated_at_once() -> None:
    calls: list[Any] = []

    def unreadable(spark: Any) -> dict[str, int]:
        calls.append(spark)
        raise OSError("the dead-letter table's storage is unreachable")

    tables = _held(unreadable, retry_seconds=300)
    tables._retry_at = 0.0  # due now; the next try 300 s after this one
    assert tables.retry(NO_SPARK) == set()
    assert tables.retry(NO_SPARK) == set()
    assert len(calls) == 1
    assert tables.current(NO_SPARK).keys() == {"p.public.a", "p.public.b"}


def test_running_out_of_memory_in_a_try_fails_the_batch() -> None:
    def out_of_memory(spark: Any) -> dict[str, int]:
        raise RuntimeError("java.lang.OutOfMemoryError: Java heap space")

    with pytest.raises(RuntimeError, match="OutOfMemoryError"):
        _held(out_of_memory).retry(NO_SPARK)


def test_a_table_held_again_keeps_the_batch_that_first_set_it_aside() -> None:
    tables = _held(None)
    tables.hold("p.public.a", 9)
    tables.hold("p.public.c", 9)
    assert tables.current(NO_SPARK) == {"p.public.a": 3, "p.public.b": 5, "p.public.c": 9}
