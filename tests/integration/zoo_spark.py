"""Spark's leg of the type zoo: Avro-encoded change envelopes decoded by ``from_avro``, and the
normalisations that make Spark's Python values comparable with fastavro's and psycopg's.

Spark (4.0, spark-avro) maps pgbridge's Avro types as follows; :func:`avro_as_spark` turns a
fastavro (or psycopg) value into what PySpark's ``collect()`` gives, :func:`spark_plain` turns
PySpark's containers into plain Python ones. Avro type -> Spark type: normalisation.

- ``decimal`` (bytes) -> ``DecimalType(p, s)``: none, ``Decimal`` on both sides (fastavro
  without logical types gives the unscaled two's-complement bytes: scaled exactly here).
- ``uuid`` (string) -> ``StringType``: ``uuid.UUID`` -> ``str``.
- ``date`` -> ``DateType``: none, ``datetime.date``.
- ``time-micros`` -> ``LongType``: Spark 4.0 has no time type and keeps the microseconds;
  ``datetime.time`` -> int.
- ``timestamp-micros`` -> ``TimestampType``: PySpark builds a *naive* datetime in the Python
  process's local zone (``datetime.fromtimestamp``), whatever the session zone; made aware with
  ``.astimezone(UTC)`` and compared as instants.
- ``local-timestamp-micros`` -> ``TimestampNTZType``: none, naive ``datetime`` on both sides.
- ``bytes`` -> ``BinaryType``: ``bytearray`` -> ``bytes``.
- record -> ``StructType``: ``Row`` -> ``dict``; map -> ``MapType``: none (``dict``); array ->
  ``ArrayType``: none (``list``).
- ``float`` / ``double`` -> ``FloatType`` / ``DoubleType``: NaN -> :data:`NAN` on both sides,
  because NaN != NaN.

Values Python cannot hold (``infinity`` dates and timestamps, which pgbridge sends as the int32 /
int64 extremes, and BC timestamps) make PySpark's ``collect()`` raise; :func:`read` also
projects dates and timestamps to the integers on the wire (``unix_date``, ``unix_micros``),
which Spark computes exactly, so those rows are compared too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, time
from decimal import Decimal
from typing import Any, Final

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.avro.functions import from_avro


class _NaN:
    """NaN that equals itself, so rows holding NaN compare with ``==``."""

    def __repr__(self) -> str:
        return "nan"  # as repr(float("nan"))


NAN: Final = _NaN()


def local_frame(spark: SparkSession, payloads: Mapping[int, bytes]) -> DataFrame:
    """``k`` (the caller's key of each payload) and ``payload``: schemaless Avro records."""
    return spark.createDataFrame(
        [(k, bytearray(p)) for k, p in payloads.items()], "k int, payload binary"
    )


def kafka_frame(spark: SparkSession, bootstrap_servers: str, topic: str) -> DataFrame:
    """``k`` (the record key, an integer as text), the Confluent framing (``magic`` as hex,
    ``schema_id``) and ``payload`` of every record of ``topic``, read by Spark's Kafka source."""
    raw = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap_servers)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
    )
    return raw.select(
        F.col("key").cast("string").cast("int").alias("k"),
        F.hex(F.substring("value", 1, 1)).alias("magic"),
        F.conv(F.hex(F.substring("value", 2, 4)), 16, 10).cast("long").alias("schema_id"),
        F.expr("substring(value, 6, length(value) - 5)").alias("payload"),
    )


def decode(frame: DataFrame, schema_json: str) -> DataFrame:
    """``k``, ``op`` and ``after`` decoded by ``from_avro`` from ``frame``'s ``payload`` with
    the writer schema as the JSON text Spark receives.

    FAILFAST: a payload Spark cannot decode fails the query instead of becoming a null row.
    """
    envelope = from_avro(F.col("payload"), schema_json, {"mode": "FAILFAST"})
    return frame.select("k", envelope.alias("e")).select("k", "e.op", "e.after")


def after_of(decoded: DataFrame, key: int) -> DataFrame:
    """The ``after`` columns of the row ``key``, still as Spark values (not collected)."""
    return decoded.where(F.col("k") == key).select("after.*")


_TEMPORAL: Final = (T.DateType, T.TimestampType, T.TimestampNTZType)


@dataclass(frozen=True)
class SparkRead:
    """What Spark made of the payloads, collected in one query."""

    decoded: DataFrame  # k, op, after
    after: T.StructType  # the row's Spark type
    ops: dict[int, str]
    natural: dict[int, dict[str, Any]]  # the rows asked for, as collected (spark_plain)
    integral: dict[int, dict[str, Any]]  # every row, dates / timestamps as wire integers
    shown: dict[int, dict[str, str]]  # every row's dates / timestamps as Spark prints them


def read(frame: DataFrame, schema_json: str, natural_keys: set[int]) -> SparkRead:
    """Decode ``frame`` (see :func:`decode`) and collect, in one Spark job:

    - ``natural``: the ``after`` rows of ``natural_keys`` as PySpark collects them (only rows
      whose values Python can hold: not the infinity sentinels or BC timestamps);
    - ``integral``: every row with its date / timestamp columns (and array elements) projected
      to days / microseconds since 1970, the Avro wire values (``unix_date``, ``unix_micros``; a
      TIMESTAMP_NTZ is cast to TIMESTAMP first, exact because the session zone is UTC);
    - ``shown``: every row's date / timestamp columns cast to string, as a Spark SQL user sees
      them.
    """
    session_zone = frame.sparkSession.conf.get("spark.sql.session.timeZone")
    assert session_zone == "UTC", session_zone
    decoded = decode(frame, schema_json)
    after = decoded.schema["after"].dataType
    assert isinstance(after, T.StructType)
    row = F.col("after")
    integral, shown = [], []
    for f in after.fields:
        integral.append(_integral(row.getField(f.name), f.dataType).alias(f.name))
        if isinstance(f.dataType, _TEMPORAL):
            shown.append(row.getField(f.name).cast("string").alias(f.name))
    present = row.isNotNull()
    query = decoded.select(
        "k",
        "op",
        F.when(F.col("k").isin(sorted(natural_keys)), row).alias("natural"),
        F.when(present, F.struct(*integral)).alias("integral"),
        F.when(present, F.struct(*shown) if shown else F.lit(None)).alias("shown"),
    )
    rows = query.collect()
    return SparkRead(
        decoded,
        after,
        {r["k"]: r["op"] for r in rows},
        {r["k"]: spark_plain(after, r["natural"]) for r in rows if r["k"] in natural_keys},
        {r["k"]: spark_plain(query.schema["integral"].dataType, r["integral"]) for r in rows},
        {r["k"]: (r["shown"].asDict() if r["shown"] else {}) for r in rows},
    )


def scaled(unscaled: int, scale: int) -> Decimal:
    """``unscaled`` * 10**-``scale``, exactly (``Decimal.scaleb`` rounds to 28 digits)."""
    return Decimal(f"{unscaled}E-{scale}")


def _integral(col: Column, dtype: T.DataType) -> Column:
    """``col`` with dates / timestamps (also as array elements) as days / microseconds."""
    if isinstance(dtype, T.DateType):
        return F.unix_date(col)
    if isinstance(dtype, T.TimestampType):
        return F.unix_micros(col)
    if isinstance(dtype, T.TimestampNTZType):
        return F.unix_micros(col.cast("timestamp"))
    if isinstance(dtype, T.ArrayType) and _has_temporal(dtype.elementType):
        element = dtype.elementType
        return F.transform(col, lambda x: _integral(x, element))
    return col


def _has_temporal(dtype: T.DataType) -> bool:
    if isinstance(dtype, T.ArrayType):
        return _has_temporal(dtype.elementType)
    return isinstance(dtype, _TEMPORAL)


def spark_plain(dtype: T.DataType, value: Any) -> Any:
    """A value PySpark collected, in plain Python: dicts, lists, bytes, aware UTC datetimes."""
    if value is None:
        return None
    if isinstance(dtype, T.StructType):
        return {f.name: spark_plain(f.dataType, value[f.name]) for f in dtype.fields}
    if isinstance(dtype, T.ArrayType):
        return [spark_plain(dtype.elementType, v) for v in value]
    if isinstance(dtype, T.MapType):
        return {k: spark_plain(dtype.valueType, v) for k, v in value.items()}
    if isinstance(dtype, T.BinaryType):
        return bytes(value)
    if isinstance(dtype, T.TimestampType):
        assert isinstance(value, datetime) and value.tzinfo is None
        return value.astimezone(UTC)  # naive local time -> the instant
    if isinstance(value, float) and math.isnan(value):
        return NAN
    return value


def avro_as_spark(schema: Any, value: Any, *, logical: bool = True) -> Any:
    """The value Spark gives for ``value`` of the Avro ``schema``, in :func:`spark_plain`'s form.

    ``value`` is what fastavro decoded (with logical types, or without when ``logical`` is false)
    or what psycopg read (``logical=True``). ``schema`` must be expanded (no named references).
    """
    if value is None:
        return None
    if isinstance(schema, list):
        (branch,) = (s for s in schema if s != "null")  # pgbridge only writes [null, X] unions
        return avro_as_spark(branch, value, logical=logical)
    if isinstance(schema, str):
        if isinstance(value, float) and math.isnan(value):
            return NAN
        return value
    kind, logical_type = schema["type"], schema.get("logicalType")
    if kind == "record":
        return {
            f["name"]: avro_as_spark(f["type"], value[f["name"]], logical=logical)
            for f in schema["fields"]
        }
    if kind == "array":
        return [avro_as_spark(schema["items"], v, logical=logical) for v in value]
    if kind == "map":
        return {k: avro_as_spark(schema["values"], v, logical=logical) for k, v in value.items()}
    if logical_type == "decimal" and not logical:
        unscaled = int.from_bytes(value, "big", signed=True)
        return scaled(unscaled, int(schema["scale"]))
    if logical_type == "uuid":
        return str(value)
    if logical_type == "time-micros" and isinstance(value, time):
        return (
            (value.hour * 60 + value.minute) * 60 + value.second
        ) * 1_000_000 + value.microsecond
    return avro_as_spark(kind, value, logical=logical)
