"""What the apply job may take from Spark's memory, and what it tells the user when Spark ran out.

A micro-batch of Spark's Kafka source is every record between the last batch's end and the
topics' ends, unless ``maxOffsetsPerTrigger`` bounds it: a job started on a topic of millions of
records would otherwise read them all into one batch and die of ``OutOfMemoryError`` on the
default 1 GiB heap (measured: a 3,000,000-record batch). So unless the user gives a bound, the
job sizes one from the memory its session has (:func:`default_batch_records`).

When the JVM dies anyway (a heap exhausted, the kernel's OOM killer), PySpark only sees its
connection to the JVM refused; :func:`jvm_failure` turns that into an error that says what ran
out and which setting to change.
"""

from __future__ import annotations

import re
from typing import Any

from bridge.spark.errors import ApplyError

#: Spark's unified (execution and storage) memory a batch's record may take. Spark's memory
#: manager gives tasks ``(heap - 300 MiB) * spark.memory.fraction``; sizing by the heap alone
#: left small heaps short: on -Xmx512m a batch sized at 2 KiB of heap per record (233,216
#: records) failed with UNABLE_TO_ACQUIRE_MEMORY under the parallel collector, whose usable heap
#: is 455 MiB (93 MiB of unified memory), and passed under G1 (512 MiB, 127 MiB) only by a
#: margin. Measured on the default 1 GiB heap: batches of 500,000 small records (one 3M-row
#: table, 60 bytes per record) were applied, one of 3,000,000 died of OutOfMemoryError; 1 KiB
#: of unified memory per record is 444,000 records there (434 MiB).
RECORD_BUDGET_BYTES = 1024
#: What Spark's memory manager keeps for itself before the fraction (``RESERVED_SYSTEM_MEMORY``).
SPARK_RESERVED_BYTES = 300 << 20
#: ``spark.memory.fraction``'s default.
DEFAULT_MEMORY_FRACTION = 0.6
#: Bounds of the sized default: below, per-batch overhead dominates; above, one batch takes
#: minutes and a failure repeats all of it.
MIN_BATCH_RECORDS = 10_000
MAX_BATCH_RECORDS = 2_000_000

#: Spark's exit code for an uncaught OutOfMemoryError (``SparkExitCode.OOM``).
SPARK_OOM_EXIT_CODE = 52

_SIZE = re.compile(r"^\s*(\d+)\s*([kmgt]?)b?\s*$", re.IGNORECASE)
_UNITS = {"": 1 << 20, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}  # Spark: MiB


class SparkResourceError(ApplyError):
    """Spark's JVM ran out of memory or is gone; the message says which setting to change."""


def parse_memory(value: str) -> int:
    """Bytes of a Spark memory setting (``512m``, ``2g``; a bare number is MiB, as Spark's)."""
    match = _SIZE.match(value)
    if not match:
        raise ValueError(f"{value!r} is not a Spark memory size")
    return int(match.group(1)) * _UNITS[match.group(2).lower()]


def batch_records_for(memory_bytes: int, fraction: float = DEFAULT_MEMORY_FRACTION) -> int:
    """The records per batch that a JVM heap of ``memory_bytes`` holds: one per
    :data:`RECORD_BUDGET_BYTES` of the unified memory Spark carves out of it."""
    unified = max(0, int((memory_bytes - SPARK_RESERVED_BYTES) * fraction))
    return max(MIN_BATCH_RECORDS, min(MAX_BATCH_RECORDS, unified // RECORD_BUDGET_BYTES))


def batch_memory(spark: Any) -> tuple[int, str]:
    """The memory one batch's records live in, and where that figure comes from.

    Local mode: the driver's JVM heap (executors are threads of it). On a cluster: one
    executor's ``spark.executor.memory``; a batch's records are spread over the executors, so
    one executor's memory is the conservative bound (the number of executors may still grow).
    """
    master = str(spark.sparkContext.master)
    if master.startswith("local"):
        runtime = spark.sparkContext._jvm.java.lang.Runtime.getRuntime()
        return int(runtime.maxMemory()), "the driver's heap"
    setting = spark.sparkContext.getConf().get("spark.executor.memory", "1g")
    return parse_memory(setting), f"spark.executor.memory={setting}"


def default_batch_records(spark: Any) -> tuple[int, str]:
    """``maxOffsetsPerTrigger`` when the user gives none, and a sentence saying why."""
    memory, source = batch_memory(spark)
    fraction = float(
        spark.sparkContext.getConf().get("spark.memory.fraction", str(DEFAULT_MEMORY_FRACTION))
    )
    records = batch_records_for(memory, fraction)
    return records, f"at most {records:,} Kafka records, sized from {source} ({memory >> 20} MiB)"


def jvm_failure(spark: Any, error: BaseException, max_records: int | None) -> ApplyError | None:
    """A :class:`SparkResourceError` if ``error`` means the JVM ran out of memory or is gone.

    ``max_records``: the batch bound in force, quoted so the user knows what to lower.
    """
    text = f"{type(error).__name__}: {error}"
    exit_code = _jvm_exit_code(spark)
    advice = (
        f"batches of up to {max_records:,} records" if max_records else "unbounded batches"
    ) + (
        "; lower --max-offsets-per-trigger or give Spark more memory "
        "(--spark-conf spark.driver.memory=4g locally, spark.executor.memory on a cluster)"
    )
    oom = _OUT_OF_MEMORY.search(text)
    if oom is not None:
        return SparkResourceError(f"Spark ran out of memory ({oom.group(0).strip()}) with {advice}")
    if exit_code == SPARK_OOM_EXIT_CODE:
        return SparkResourceError(
            f"the Spark JVM exited with code {exit_code} (OutOfMemoryError) with {advice}"
        )
    if exit_code is not None:
        how = f"was killed by signal {-exit_code}" if exit_code < 0 else f"exited ({exit_code})"
        hint = " (SIGKILL: often the kernel's OOM killer)" if exit_code == -9 else ""
        return SparkResourceError(
            f"the Spark JVM {how}{hint} while applying {advice}; its log is above"
        )
    if isinstance(error, ConnectionError) or type(error).__name__ == "Py4JNetworkError":
        return SparkResourceError(f"lost the connection to the Spark JVM ({text}) with {advice}")
    return None


#: The JVM's heap exhausted, or Spark's memory manager unable to give a task what it needs.
_OUT_OF_MEMORY = re.compile(
    r"(java\.lang\.OutOfMemoryError|SparkOutOfMemoryError|UNABLE_TO_ACQUIRE_MEMORY)[^\n]*"
)


def is_resource_failure(error: BaseException) -> bool:
    """Whether ``error`` (of one table's apply, say) is Spark running out of memory or losing
    its JVM rather than anything about the data: such an error must fail the batch (to be
    retried from the checkpoint with the user's fix), never set the records aside."""
    text = f"{type(error).__name__}: {error}"
    return (
        _OUT_OF_MEMORY.search(text) is not None
        or isinstance(error, ConnectionError)
        or type(error).__name__ == "Py4JNetworkError"
    )


def _jvm_exit_code(spark: Any) -> int | None:
    """The local JVM's exit code if PySpark started it and it has exited, else None."""
    try:
        proc = spark.sparkContext._gateway.proc
    except AttributeError:
        return None
    if proc is None:
        return None
    code = proc.poll()
    return None if code is None else int(code)
