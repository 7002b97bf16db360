"""The apply job's batch bound sized from Spark's memory, and the errors of a JVM that died."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from bridge.spark.resources import (
    MAX_BATCH_RECORDS,
    MIN_BATCH_RECORDS,
    SparkResourceError,
    batch_memory,
    batch_records_for,
    default_batch_records,
    jvm_failure,
    parse_memory,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("512m", 512 << 20), ("2g", 2 << 30), ("2G", 2 << 30), ("1024", 1 << 30), ("64k", 64 << 10)],
)
def test_spark_memory_sizes_parse_as_spark_reads_them(text: str, expected: int) -> None:
    assert parse_memory(text) == expected


def test_a_memory_size_spark_would_refuse_is_an_error() -> None:
    with pytest.raises(ValueError, match="'lots'"):
        parse_memory("lots")


def test_batches_grow_with_the_heap_within_bounds() -> None:
    one_gib = batch_records_for(1 << 30)
    assert 400_000 <= one_gib <= 500_000  # the measured safe size on 1 GiB (see the module)
    # Sized from Spark's unified memory, (heap - 300 MiB) * fraction: a heap twice as large
    # holds more than twice the records, a small one far fewer (its 300 MiB are Spark's).
    assert batch_records_for(2 << 30) > 2 * one_gib
    assert batch_records_for(512 << 20) < one_gib // 3
    assert batch_records_for(1 << 30, fraction=0.3) == one_gib // 2
    assert batch_records_for(16 << 20) == MIN_BATCH_RECORDS
    assert batch_records_for(1 << 40) == MAX_BATCH_RECORDS


class _Proc:
    def __init__(self, code: int | None) -> None:
        self.code = code

    def poll(self) -> int | None:
        return self.code


def _spark(master: str = "local[2]", heap: int = 1 << 30, exit_code: int | None = None,
           conf: dict[str, str] | None = None) -> Any:  # fmt: skip
    runtime = SimpleNamespace(maxMemory=lambda: heap)
    jvm = SimpleNamespace(java=SimpleNamespace(lang=SimpleNamespace(
        Runtime=SimpleNamespace(getRuntime=lambda: runtime))))  # fmt: skip
    context = SimpleNamespace(
        master=master,
        _jvm=jvm,
        _gateway=SimpleNamespace(proc=_Proc(exit_code)),
        getConf=lambda: SimpleNamespace(get=lambda k, d=None: (conf or {}).get(k, d)),
    )
    return SimpleNamespace(sparkContext=context)


def test_local_mode_sizes_batches_from_the_driver_heap() -> None:
    records, why = default_batch_records(_spark(heap=1 << 30))
    assert records == batch_records_for(1 << 30)
    assert "driver's heap (1024 MiB)" in why
    # spark.memory.fraction as the user set it: what Spark's memory manager will give tasks.
    halved, _ = default_batch_records(_spark(heap=1 << 30, conf={"spark.memory.fraction": "0.3"}))
    assert halved == records // 2


def test_a_cluster_sizes_batches_from_one_executors_memory() -> None:
    spark = _spark(master="spark://m:7077", conf={"spark.executor.memory": "4g"})
    assert batch_memory(spark) == (4 << 30, "spark.executor.memory=4g")
    assert batch_memory(_spark(master="spark://m:7077"))[0] == 1 << 30  # Spark's default


def test_an_out_of_memory_error_says_what_ran_out_and_what_to_change() -> None:
    error = RuntimeError("Job aborted ... java.lang.OutOfMemoryError: Java heap space\n\tat x")
    failure = jvm_failure(_spark(), error, 480_000)
    assert isinstance(failure, SparkResourceError)
    message = str(failure)
    assert "java.lang.OutOfMemoryError: Java heap space" in message
    assert "480,000 records" in message
    assert "--max-offsets-per-trigger" in message and "spark.driver.memory" in message


def test_a_jvm_gone_with_sparks_oom_exit_code_is_an_out_of_memory_error() -> None:
    # What PySpark sees is only a refused connection; the JVM's exit code says why.
    failure = jvm_failure(
        _spark(exit_code=52), ConnectionRefusedError(111, "Connection refused"), None
    )
    assert failure is not None
    assert "exited with code 52 (OutOfMemoryError)" in str(failure)
    assert "unbounded batches" in str(failure)


def test_a_killed_jvm_names_the_signal() -> None:
    failure = jvm_failure(_spark(exit_code=-9), ConnectionRefusedError(111, "refused"), 10_000)
    assert failure is not None
    assert "killed by signal 9" in str(failure) and "OOM killer" in str(failure)


def test_a_lost_connection_to_a_live_jvm_is_still_typed() -> None:
    failure = jvm_failure(_spark(), ConnectionResetError(104, "reset"), 10_000)
    assert isinstance(failure, SparkResourceError)
    assert "lost the connection to the Spark JVM" in str(failure)


def test_an_ordinary_query_failure_is_not_a_resource_error() -> None:
    assert jvm_failure(_spark(), RuntimeError("AnalysisException: no such column"), 10) is None


#: What one table's apply raised when Spark's memory manager had nothing left for a task
#: (measured: a 233,216-record batch under a 512 MiB heap on a busy machine).
UNABLE_TO_ACQUIRE = RuntimeError(
    "An error occurred while calling o991.collectToPython.\n: org.apache.spark.SparkException: "
    "Job aborted due to stage failure: ...\nCaused by: org.apache.spark.memory."
    "SparkOutOfMemoryError: [UNABLE_TO_ACQUIRE_MEMORY] Unable to acquire 65536 bytes of memory, "
    "got 0. SQLSTATE: 53200"
)


def test_sparks_memory_manager_out_of_memory_is_typed_with_the_fix() -> None:
    failure = jvm_failure(_spark(), UNABLE_TO_ACQUIRE, 233_216)
    assert isinstance(failure, SparkResourceError)
    assert "SparkOutOfMemoryError: [UNABLE_TO_ACQUIRE_MEMORY]" in str(failure)
    assert "233,216 records" in str(failure) and "--max-offsets-per-trigger" in str(failure)


@pytest.mark.parametrize(
    ("error", "resource"),
    [
        (UNABLE_TO_ACQUIRE, True),
        (RuntimeError("... java.lang.OutOfMemoryError: Java heap space"), True),
        (ConnectionRefusedError(111, "Connection refused"), True),
        (RuntimeError("[CAST_INVALID_INPUT] The value 'x' cannot be cast to INT"), False),
    ],
    ids=["memory manager", "heap", "jvm gone", "data"],
)
def test_a_tables_failure_for_want_of_memory_fails_the_batch_instead_of_dead_lettering(
    error: Exception, resource: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One table's apply failing for want of memory must fail the batch (retried from the
    checkpoint once the user gives Spark more memory), not set that table's records aside as
    dead letters: they are good records, and Delta would never get them. A failure of the
    data itself is still set aside, so the other tables go on."""
    from bridge.spark.applier import BatchApplier, _BatchState
    from bridge.spark.config import ApplyConfig

    class Failing(BatchApplier):
        def _apply_table(self, *args: Any, **kwargs: Any) -> None:
            raise error

    config = ApplyConfig(
        topic_prefix="p", bootstrap_servers="b:9092", registry_url="http://r",
        delta_base="/d", checkpoint_location="/c", dead_letter_location="/dl",
    )  # fmt: skip
    applier = Failing(config, schemas=SimpleNamespace())  # type: ignore[arg-type]
    table = SimpleNamespace(topic="p.public.t", name="p.public.t", raw=None)
    batch = _BatchState()
    if resource:
        with pytest.raises(type(error)):
            applier._apply_or_set_aside(None, table, 7, batch)  # type: ignore[arg-type]
        assert batch.dead_letters == [] and applier.stats.failed_tables == {}
    else:
        from bridge.spark import transforms

        set_aside: list[str] = []
        monkeypatch.setattr(
            transforms, "dead_letters", lambda raw, reason, batch_id: set_aside.append(reason)
        )
        applier._apply_or_set_aside(None, table, 7, batch)  # type: ignore[arg-type]
        assert set_aside and "CAST_INVALID_INPUT" in set_aside[0]
