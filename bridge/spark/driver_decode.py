"""A small table's records decoded in the driver, with no Spark plan of its own.

Why: with the commits of small tables made by delta-rs (:mod:`bridge.spark.driver_merge`),
what a changed table still cost was Spark planning its frames: its decode, its summary, the
last change per key and its dead-letter check, about 0.25 s of py4j and analyser latency per
table and batch on 2 cores, so a batch over 200 busy tables took a minute and a half whatever
it held. Here the records of such tables are collected in one Spark job for all of them and
decoded by fastavro in the driver; :mod:`bridge.spark.driver_changes` does the rest in Python.

Only what this module decodes exactly as Spark's ``from_avro`` and the job's conversions
(:mod:`bridge.spark.columns`) do is taken: a topic whose batch has one value schema version,
pgbridge's envelope, keyed records, and columns of plain types (no arrays, maps, records but
Debezium's VariableScaleDecimal, no time of day), whose Delta table this job already wrote with
these columns. Anything else, and any record that does not decode or holds a value this module
does not convert with certainty (a decimal that does not fit, an instant Spark clamps, an op
the job does not apply), raises :class:`NotForDriver` and the whole topic takes Spark's path in
the same batch, where dead letters are made: this path never sets a record aside.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Context, Decimal
from typing import Any

from pyspark.sql import types as T

from bridge.spark.columns import (
    ZONED_TIMESTAMP,
    RowShape,
    is_variable_decimal,
    named_types,
    resolve,
)
from bridge.spark.transforms import APPLY_OPS

__all__ = ["DriverColumn", "DriverDecoder", "NotForDriver", "RawChange", "driver_columns"]

_INT64_MAX = 2**63 - 1
_MAX_DIGITS = 38
#: Decimal arithmetic without rounding for any value Delta's decimal(38, s) holds (the default
#: context rounds to 28 digits).
_EXACT = Context(prec=2 * _MAX_DIGITS + 2)
#: Ops whose records become changes (``m``, a logical message, is skipped as Spark's path does).
_CHANGE_OPS = frozenset(APPLY_OPS)
_SKIPPED_OPS = frozenset({"m"})


class NotForDriver(Exception):
    """This topic's batch needs Spark's decode: a type, value or envelope this module does not
    decode exactly as Spark does."""


Convert = Callable[[Any], Any]


@dataclass(frozen=True, slots=True)
class DriverColumn:
    """One row column: its Avro field, PostgreSQL name, Spark type (what ``from_avro`` and the
    job's conversion give) and how a raw fastavro value (logical types not applied) becomes the
    value Arrow holds for that type."""

    field: str
    name: str
    spark_type: T.DataType
    convert: Convert | None  # None: the raw value as it is


def _same(value: Any) -> Any:
    return value


def _millis_to_micros(value: Any) -> Any:
    return None if value is None else int(value) * 1000


def _decimal(scale: int) -> Convert:
    def convert(value: Any) -> Any:
        if value is None:
            return None
        return Decimal(int.from_bytes(value, "big", signed=True)).scaleb(-scale, _EXACT)

    return convert


def _variable_decimal(precision: int, scale: int) -> Convert:
    """VariableScaleDecimal ``{scale, value}`` -> ``Decimal`` of ``decimal(precision, scale)``,
    exactly as :func:`bridge.spark.columns.variable_decimal`; a value that would be null there
    (does not fit, more than 38 digits, a negative scale, no bytes) is :class:`NotForDriver`."""

    def convert(value: Any) -> Any:
        if value is None:
            return None
        raw, value_scale = value["value"], value["scale"]
        if not raw or value_scale is None or value_scale < 0:
            raise NotForDriver("a VariableScaleDecimal Spark's path reads as null")
        unscaled = int.from_bytes(raw, "big", signed=True)
        digits = str(abs(unscaled))
        if len(digits) > _MAX_DIGITS:
            raise NotForDriver("a VariableScaleDecimal of more than 38 digits")
        padded = digits.rjust(value_scale + 1, "0")
        integer, fraction = padded[: len(padded) - value_scale], padded[len(padded) - value_scale :]
        if len(integer.lstrip("0")) > precision - scale or len(fraction.rstrip("0")) > scale:
            raise NotForDriver(
                f"a VariableScaleDecimal that does not fit decimal({precision},{scale})"
            )
        exact = Decimal(unscaled).scaleb(-value_scale, _EXACT)
        return exact.quantize(Decimal(1).scaleb(-scale, _EXACT), context=_EXACT)

    return convert


_ZONED = re.compile(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?Z")
_EPOCH_ORDINAL = dt.date(1970, 1, 1).toordinal()


def zoned_timestamp(value: Any) -> Any:
    """A ZonedTimestamp's text -> microseconds since the epoch, as
    :func:`bridge.spark.columns.zoned_timestamp` reads it (``infinity`` as its int64 extremes);
    any other form (years past 9999, BC, offsets other than ``Z``) is Spark's to read."""
    if value is None:
        return None
    if value == "infinity":
        return _INT64_MAX
    if value == "-infinity":
        return -_INT64_MAX - 1
    match = _ZONED.fullmatch(value)
    if match is None:
        raise NotForDriver(f"a ZonedTimestamp in a form Spark's path reads: {value!r}")
    year, month, day, hour, minute, second, fraction = match.groups()
    try:
        days = dt.date(int(year), int(month), int(day)).toordinal() - _EPOCH_ORDINAL
    except ValueError as exc:
        raise NotForDriver(f"a ZonedTimestamp that is no date: {value!r}") from exc
    if int(hour) > 23 or int(minute) > 59 or int(second) > 59:
        raise NotForDriver(f"a ZonedTimestamp that is no time: {value!r}")
    seconds = days * 86_400 + int(hour) * 3600 + int(minute) * 60 + int(second)
    return seconds * 1_000_000 + int((fraction or "0").ljust(6, "0"))


_PRIMITIVES: dict[str, T.DataType] = {
    "boolean": T.BooleanType(),
    "int": T.IntegerType(),
    "long": T.LongType(),
    "float": T.FloatType(),
    "double": T.DoubleType(),
    "string": T.StringType(),
    "bytes": T.BinaryType(),
}

#: Logical types whose value Spark reads as the primitive's (or ignores): the raw value serves.
_PLAIN_LOGICAL = {("string", "uuid")}


def _column_type(avro: Any, shape: RowShape) -> tuple[T.DataType, Convert | None] | None:
    """(Spark type, conversion) of a column of resolved Avro type ``avro``; None where this
    module does not decode the type exactly as Spark's path does."""
    precision, scale = shape.decimal
    if isinstance(avro, str):
        spark_type = _PRIMITIVES.get(avro)
        return (spark_type, None) if spark_type is not None else None
    if not isinstance(avro, dict):
        return None  # a union of several types
    kind, logical = avro.get("type"), avro.get("logicalType")
    if kind == "record":
        if is_variable_decimal(avro):
            return T.DecimalType(precision, scale), _variable_decimal(precision, scale)
        return None
    if kind == "enum":
        return T.StringType(), None
    if kind in ("bytes", "fixed") and logical == "decimal":
        digits, places = int(avro.get("precision", 0)), int(avro.get("scale", 0))
        if not 0 < digits <= _MAX_DIGITS or not 0 <= places <= digits:
            return None
        return T.DecimalType(digits, places), _decimal(places)
    if kind == "fixed":
        return (T.BinaryType(), None) if logical is None else None
    if not isinstance(kind, str) or kind not in _PRIMITIVES:
        return None
    if kind == "string" and avro.get("connect.name") == ZONED_TIMESTAMP and logical is None:
        return T.TimestampType(), zoned_timestamp
    if logical is None or (kind, logical) in _PLAIN_LOGICAL:
        return _PRIMITIVES[kind], None
    typed: dict[tuple[str, str], tuple[T.DataType, Convert | None]] = {
        ("int", "date"): (T.DateType(), None),
        ("long", "timestamp-micros"): (T.TimestampType(), None),
        ("long", "timestamp-millis"): (T.TimestampType(), _millis_to_micros),
        ("long", "local-timestamp-micros"): (T.TimestampNTZType(), None),
        ("long", "local-timestamp-millis"): (T.TimestampNTZType(), _millis_to_micros),
    }
    return typed.get((kind, str(logical)))


def driver_columns(shape: RowShape) -> tuple[DriverColumn, ...] | None:
    """The row's columns as this module decodes them, or None if one cannot be."""
    columns: list[DriverColumn] = []
    for column in shape.columns:
        if column.avro is None:
            return None
        typed = _column_type(resolve(column.avro, shape.named), shape)
        if typed is None:
            return None
        columns.append(DriverColumn(column.field, column.name, typed[0], typed[1]))
    return tuple(columns)


def _without_logical_types(node: Any) -> Any:
    """The writer schema with every ``logicalType`` removed: fastavro then returns the raw
    values (ints, bytes), which this module converts itself (its own conversions fail on
    PostgreSQL's extremes, such as ``infinity`` as int64's)."""
    if isinstance(node, list):
        return [_without_logical_types(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {k: _without_logical_types(v) for k, v in node.items() if k != "logicalType"}
    return out


@dataclass(slots=True)
class RawChange:
    """One change row as Spark's path builds it (bridge.spark.transforms.envelope_to_changes):
    values in column order, op, position, commit time (ms), source identity, the columns it
    carries as unchanged TOAST (PostgreSQL names), Kafka partition and offset; ``before``: the
    old row's values, for a table without key columns (decoded ``with_before``), else None."""

    values: list[Any]
    op: str
    commit_lsn: int
    seq: int
    ts_ms: int
    schema: str
    table: str
    unchanged: tuple[str, ...]
    partition: int
    offset: int
    before: list[Any] | None = None


@dataclass(frozen=True, slots=True)
class _Prepared:
    parsed: Any  # fastavro's parsed writer schema
    columns: tuple[DriverColumn, ...]
    renamed: dict[str, str]  # Avro field -> PostgreSQL name, where they differ
    shape: RowShape


def _is_pgbridge_envelope(envelope: Any) -> bool:
    """A change envelope with pgbridge's position in its source block."""
    if not isinstance(envelope, dict) or envelope.get("type") != "record":
        return False
    named: dict[str, Any] = {}
    named_types(envelope, None, named)
    fields = {f["name"]: f for f in envelope.get("fields", [])}
    if "op" not in fields or "source" not in fields or not ({"before", "after"} & set(fields)):
        return False
    source = resolve(fields["source"]["type"], named)
    if not isinstance(source, dict) or source.get("type") != "record":
        return False
    names = {f["name"] for f in source.get("fields", [])}
    return {"commit_lsn", "seq", "ts_ms", "schema", "table"} <= names


class DriverDecoder:
    """Decodes one (topic, schema id) group's payloads in the driver; schemas prepared once
    per id (an id never changes meaning)."""

    def __init__(self) -> None:
        self._prepared: dict[int, _Prepared | None] = {}

    def prepare(
        self, schema_id: int, schema_json: str, decimal: tuple[int, int]
    ) -> _Prepared | None:
        """The schema's columns as decoded here, or None when Spark must decode it."""
        if schema_id not in self._prepared:
            self._prepared[schema_id] = self._prepare(schema_json, decimal)
        return self._prepared[schema_id]

    def columns(self, schema_id: int) -> tuple[DriverColumn, ...]:
        prepared = self._prepared.get(schema_id)
        assert prepared is not None, "prepare() first"
        return prepared.columns

    @staticmethod
    def _prepare(schema_json: str, decimal: tuple[int, int]) -> _Prepared | None:
        import fastavro

        envelope = json.loads(schema_json)
        if not _is_pgbridge_envelope(envelope):
            return None
        shape = RowShape.from_schema(schema_json, decimal)
        columns = driver_columns(shape) if shape.columns else None
        if columns is None:
            return None
        try:
            parsed = fastavro.parse_schema(_without_logical_types(envelope))
        except Exception:  # a schema fastavro does not take: Spark's path decides
            return None
        renamed = {c.field: c.name for c in shape.columns if c.field != c.name}
        return _Prepared(parsed, columns, renamed, shape)

    def decode(
        self,
        schema_id: int,
        values: Sequence[bytes],
        partitions: Sequence[int],
        offsets: Sequence[int],
        with_before: bool = False,
    ) -> list[RawChange]:
        """The change rows of Confluent-framed payloads of schema ``schema_id``, in order
        (logical messages skipped); :class:`NotForDriver` at the first record that is not
        decoded here exactly as Spark's path would. ``with_before``: each change's old row
        too (a table without key columns matches rows by it)."""
        import fastavro

        prepared = self._prepared.get(schema_id)
        if prepared is None:
            raise NotForDriver(f"schema id {schema_id} is not decoded in the driver")
        columns, renamed = prepared.columns, prepared.renamed
        changes: list[RawChange] = []
        for value, partition, offset in zip(values, partitions, offsets, strict=True):
            try:
                envelope: Any = fastavro.schemaless_reader(
                    io.BytesIO(value[5:]), prepared.parsed, None
                )
            except Exception as exc:
                raise NotForDriver(f"a payload fastavro does not decode: {exc}") from exc
            op = envelope.get("op")
            if op in _SKIPPED_OPS:
                continue
            if op not in _CHANGE_OPS:
                raise NotForDriver(f"op {op!r}")
            source = envelope["source"]
            commit_lsn, seq, ts_ms = source["commit_lsn"], source["seq"], source["ts_ms"]
            if commit_lsn is None or seq is None or ts_ms is None:
                raise NotForDriver("a change without its position")
            image = envelope.get("before") if op == "d" else envelope.get("after")
            row = _row(image, columns)
            before = None
            if with_before:  # a row without a key is matched by its images: both must be there
                old, new = envelope.get("before"), envelope.get("after")
                if (op in ("u", "d") and old is None) or (op in ("c", "r", "u") and new is None):
                    raise NotForDriver(f"a {op!r} change without its row image")  # dead letter
                before = _row(old, columns) if old is not None else None
            listed = envelope.get("unchanged_toast_columns") or ()
            changes.append(
                RawChange(
                    row,
                    op,
                    int(commit_lsn),
                    int(seq),
                    int(ts_ms),
                    source["schema"],
                    source["table"],
                    tuple(renamed.get(name, name) for name in listed),
                    int(partition),
                    int(offset),
                    before,
                )
            )
        return changes


def _row(image: dict[str, Any] | None, columns: Sequence[DriverColumn]) -> list[Any]:
    """An envelope's row image in column order, converted as Spark's path reads it."""
    return [
        None
        if image is None
        else (c.convert(image[c.field]) if c.convert is not None else image[c.field])
        for c in columns
    ]
