"""A value schema's row columns: their PostgreSQL names and the Spark conversions they need.

Pure: Avro schema JSON in, names and Spark ``Column`` expressions out; no I/O, no Spark job.

Names. Avro field names are sanitised by the producer (``"Id Part"`` -> ``Id_Part``, ``naïve``
-> ``na_ve``, collisions get a unique suffix); a field whose name differs from the column's
carries the property ``pgbridge.column`` with the original. :func:`row_columns` reads it, so the
Delta tables get PostgreSQL's names (the tables use Delta column mapping, which allows any
character).

Numbers. An unconstrained ``numeric`` arrives as Debezium's
``io.debezium.data.VariableScaleDecimal`` record ``{scale: int, value: bytes}`` (the unscaled
value, big-endian two's complement), which ``from_avro`` gives as a struct nobody can query as a
number. :func:`convert` turns it into a Spark ``decimal(p, s)`` (the job's
``variable_decimal``, default ``decimal(38,18)``) with SQL expressions only (executors run no
Python), exactly: a value with more integer digits than ``p - s``, or with non-zero digits
beyond ``s`` decimals, or more than 38 significant digits, is *not rounded*: it becomes null and
:func:`convert` reports it, so the job also dead-letters the record (whose raw bytes keep the
exact value). Inside arrays, maps and composite types too. NaN and ±Infinity already arrive as
null (the producer's precise mode).

Instants. A ``timestamptz`` sent as Debezium sends it (``timestamptz.handling.mode=string``:
``io.debezium.time.ZonedTimestamp``, ISO-8601 in UTC with ``Z``) becomes a Delta ``timestamp``,
as the ``instant`` mode's microseconds do: ``infinity`` / ``-infinity`` the same int64 extremes,
an instant after Spark's last one clamped as that mode clamps it (2^63 - 2 µs; the exact text
stays in Kafka); text that is no instant is null and reported, like a decimal that does not
fit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

__all__ = [
    "MISSING_PROPERTY",
    "ORIGINAL_NAME_PROPERTY",
    "RENAMED_FROM_PROPERTY",
    "VARIABLE_SCALE_DECIMAL",
    "ZONED_TIMESTAMP",
    "RowColumn",
    "RowShape",
    "convert",
    "missing_literal",
    "row_columns",
    "variable_decimal",
]

ORIGINAL_NAME_PROPERTY = "pgbridge.column"
#: Set on a field of a column added with ``ADD COLUMN ... DEFAULT``: the value rows written
#: before hold (its PostgreSQL text; the field's Avro default, where Avro can carry it).
MISSING_PROPERTY = "pgbridge.missing"
RENAMED_FROM_PROPERTY = "pgbridge.renamed_from"
VARIABLE_SCALE_DECIMAL = "io.debezium.data.VariableScaleDecimal"
ZONED_TIMESTAMP = "io.debezium.time.ZonedTimestamp"
_INT64_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class RowColumn:
    """One column of the row record: Avro field name, PostgreSQL name, Avro type (resolved),
    the PostgreSQL names it had before renames (``RENAME COLUMN``), oldest first, and, for a
    column added with a default, the one-field Avro record schema (JSON) whose default is the
    value rows written before the column hold (:func:`missing_literal`)."""

    field: str
    name: str
    avro: Any
    renamed_from: tuple[str, ...] = ()
    missing: str | None = None


def _full_name(node: dict[str, Any], namespace: str | None) -> str:
    name = str(node["name"])
    if "." in name:
        return name
    ns = node.get("namespace", namespace)
    return f"{ns}.{name}" if ns else name


def named_types(node: Any, namespace: str | None, out: dict[str, Any]) -> None:
    """Every named type defined in ``node``, by full name (later uses are by reference)."""
    if isinstance(node, list):
        for item in node:
            named_types(item, namespace, out)
        return
    if not isinstance(node, dict):
        return
    kind = node.get("type")
    if kind in ("record", "enum", "fixed") and "name" in node:
        full = _full_name(node, namespace)
        out.setdefault(full, node)
        # A name without its own namespace still takes the enclosing one (Avro's rule).
        inner = full.rpartition(".")[0] or None
        for field_ in node.get("fields", []):
            named_types(field_.get("type"), inner, out)
        return
    for key in ("type", "items", "values"):
        if key in node:
            named_types(node[key], namespace, out)


def resolve(node: Any, named: dict[str, Any]) -> Any:
    """``node`` with a reference by name replaced by its definition, and ``null`` unions
    reduced to their other branch (Spark reads ``["null", X]`` as a nullable X)."""
    if isinstance(node, str):
        return named.get(node, node)
    if isinstance(node, list):
        branches = [b for b in node if b != "null"]
        return resolve(branches[0], named) if len(branches) == 1 else node
    if isinstance(node, dict) and isinstance(node.get("type"), dict | list):
        return resolve(node["type"], named)
    return node


_MISSING_WRITER = json.dumps({"type": "record", "name": "Missing", "fields": []})


def _missing_reader(field_: dict[str, Any], named: dict[str, Any]) -> str | None:
    """The reader schema that turns an empty record into ``field_``'s non-null Avro default."""
    if MISSING_PROPERTY not in field_ or field_.get("default") is None:
        return None
    kind = resolve(field_["type"], named)
    return json.dumps(
        {
            "type": "record",
            "name": "Missing",
            "fields": [{"name": "v", "type": [kind, "null"], "default": field_["default"]}],
        }
    )


def row_columns(schema_json: str) -> tuple[tuple[RowColumn, ...], dict[str, Any]]:
    """The row record's columns of a change envelope schema, and its named types."""
    envelope = json.loads(schema_json)
    named: dict[str, Any] = {}
    named_types(envelope, None, named)
    for field_ in envelope.get("fields", []) if isinstance(envelope, dict) else []:
        if field_.get("name") in ("before", "after"):
            row = resolve(field_["type"], named)
            if isinstance(row, dict) and row.get("type") == "record":
                return (
                    tuple(
                        RowColumn(
                            str(f["name"]),
                            str(f.get(ORIGINAL_NAME_PROPERTY) or f["name"]),
                            resolve(f["type"], named),
                            tuple(str(n) for n in f.get(RENAMED_FROM_PROPERTY) or ()),
                            _missing_reader(f, named),
                        )
                        for f in row.get("fields", [])
                    ),
                    named,
                )
    return (), named


def is_variable_decimal(avro: Any) -> bool:
    return (
        isinstance(avro, dict)
        and avro.get("type") == "record"
        and (
            avro.get("connect.name") == VARIABLE_SCALE_DECIMAL
            or _full_name(avro, None) == VARIABLE_SCALE_DECIMAL
        )
    )


def variable_decimal(record: Column, precision: int, scale: int) -> tuple[Column, Column]:
    """(the ``decimal(precision, scale)`` value, whether it did not fit) of a VariableScaleDecimal.

    The unscaled integer is folded from the bytes' hex digits in ``decimal(38,0)`` arithmetic
    (``try_*``: null beyond 38 digits instead of an error); a negative value folds the inverted
    digits and adds one (two's complement), so no intermediate exceeds the magnitude. The
    decimal text is then cut at ``scale`` digits from the right and checked digit by digit
    before the cast, so nothing is ever rounded.
    """
    raw, value_scale = record["value"], record["scale"]
    nibbles = F.split(F.hex(raw), "")
    negative = F.substr(F.hex(raw), F.lit(1), F.lit(1)).isin(*"89ABCDEF")
    zero = F.lit(0).cast(T.DecimalType(38, 0))

    def fold(invert: bool) -> Column:
        def step(acc: Column, nibble: Column) -> Column:
            digit = F.conv(nibble, 16, 10).cast("int")
            if invert:
                digit = F.lit(15) - digit
            return F.try_add(F.try_multiply(acc, F.lit(16)), digit).cast(T.DecimalType(38, 0))

        return F.aggregate(nibbles, zero, step)

    magnitude = F.when(negative, F.try_add(fold(True), F.lit(1)).cast(T.DecimalType(38, 0)))
    magnitude = magnitude.otherwise(fold(False))
    digits = magnitude.cast("string")
    padded = F.lpad(digits, F.greatest(F.length(digits), value_scale + 1), "0")
    cut = F.length(padded) - value_scale
    integer = F.substr(padded, F.lit(1), cut)
    fraction = F.substr(padded, cut + 1, value_scale)
    text = F.concat(
        F.when(negative, F.lit("-")).otherwise(F.lit("")),
        integer,
        F.when(value_scale > 0, F.concat(F.lit("."), fraction)).otherwise(F.lit("")),
    )
    fits = (
        magnitude.isNotNull()
        & (value_scale >= 0)
        & (F.length(F.regexp_replace(integer, "^0+", "")) <= precision - scale)
        & (F.length(F.regexp_replace(fraction, "0+$", "")) <= scale)
    )
    decimal = T.DecimalType(precision, scale)
    value = F.when(record.isNotNull() & fits, text.try_cast(decimal)).otherwise(
        F.lit(None).cast(decimal)
    )
    return value, F.coalesce(record.isNotNull() & ~fits, F.lit(True))


def zoned_timestamp(text: Column) -> tuple[Column, Column]:
    """(the ``timestamp``, whether the text did not fit) of a ZonedTimestamp (see the module
    doc). The text carries its zone (``Z``): the session's time zone plays no part."""
    parsed = F.try_to_timestamp(text)
    instant = (
        F.when(text == "infinity", F.timestamp_micros(F.lit(_INT64_MAX)))
        .when(text == "-infinity", F.timestamp_micros(F.lit(-_INT64_MAX - 1)))
        .when(parsed.isNotNull(), parsed)
        # After Spark's last instant (294247-01-10 04:00:54.775806 UTC; PostgreSQL's is
        # 294276-12-31): the instant mode's clamp, one below +infinity's sentinel.
        .when(text.startswith("+"), F.timestamp_micros(F.lit(_INT64_MAX - 1)))
    )
    return instant, F.coalesce(text.isNotNull() & instant.isNull(), F.lit(False))


def convert(
    col: Column, avro: Any, named: dict[str, Any], precision: int, scale: int
) -> tuple[Column, Column] | None:
    """(converted column, "a value did not fit" flag) for a column of Avro type ``avro``, or
    ``None`` when the column holds nothing to convert (it is then used as it is)."""
    avro = resolve(avro, named)
    if is_variable_decimal(avro):
        return variable_decimal(col, precision, scale)
    if not isinstance(avro, dict):
        return None
    kind = avro.get("type")
    if kind == "string" and avro.get("connect.name") == ZONED_TIMESTAMP:
        return zoned_timestamp(col)
    if kind == "array":
        inner = convert(F.lit(None), avro["items"], named, precision, scale)
        if inner is None:
            return None

        def item(x: Column) -> Column:
            converted = convert(x, avro["items"], named, precision, scale)
            assert converted is not None
            return converted[0]

        def unfit(x: Column) -> Column:
            converted = convert(x, avro["items"], named, precision, scale)
            assert converted is not None
            return converted[1]

        return F.transform(col, item), F.coalesce(F.exists(col, unfit), F.lit(False))
    if kind == "map":
        if convert(F.lit(None), avro["values"], named, precision, scale) is None:
            return None

        def value(_: Column, v: Column) -> Column:
            converted = convert(v, avro["values"], named, precision, scale)
            assert converted is not None
            return converted[0]

        def bad(_: Column, v: Column) -> Column:
            converted = convert(v, avro["values"], named, precision, scale)
            assert converted is not None
            return converted[1]

        unfit_map = F.exists(F.map_values(F.transform_values(col, bad)), lambda b: b)
        return F.transform_values(col, value), F.coalesce(unfit_map, F.lit(False))
    if kind == "record":
        fields = avro.get("fields", [])
        parts = [
            (f["name"], convert(col[f["name"]], f["type"], named, precision, scale)) for f in fields
        ]
        if all(p is None for _, p in parts):
            return None
        rebuilt = F.struct(
            *[(p[0] if p is not None else col[name]).alias(name) for name, p in parts]
        )
        flags = [p[1] for _, p in parts if p is not None]
        unfit_any = flags[0]
        for flag in flags[1:]:
            unfit_any = unfit_any | flag
        return (
            F.when(col.isNull(), F.lit(None)).otherwise(rebuilt),
            F.when(col.isNull(), F.lit(False)).otherwise(unfit_any),
        )
    return None


@dataclass(frozen=True, slots=True)
class RowShape:
    """The row record of one value schema version, with the job's decimal choice."""

    columns: tuple[RowColumn, ...]
    named: dict[str, Any]
    decimal: tuple[int, int]

    @classmethod
    def from_schema(cls, schema_json: str, decimal: tuple[int, int]) -> RowShape:
        columns, named = row_columns(schema_json)
        return cls(columns, named, decimal)

    @classmethod
    def plain(cls, fields: T.StructType) -> RowShape:
        """Columns named as their fields, nothing to convert (schemas without annotations)."""
        return cls(tuple(RowColumn(f.name, f.name, None) for f in fields.fields), {}, (38, 18))

    def renames(self) -> dict[str, str]:
        """Old PostgreSQL name -> this version's name, for each renamed column (an old name a
        column of this version has again is no rename)."""
        names = {c.name for c in self.columns}
        return {old: c.name for c in self.columns for old in c.renamed_from if old not in names}

    def renamed(self, renames: dict[str, str]) -> RowShape:
        """This (older) version with its columns under their names in a newer version."""
        names = {c.name for c in self.columns}
        columns = tuple(
            replace(c, name=renames[c.name])
            if c.name in renames and renames[c.name] not in names
            else c
            for c in self.columns
        )
        return replace(self, columns=columns)

    def name_of(self, field: str) -> str:
        """The PostgreSQL name of an Avro field name (itself when unknown)."""
        return next((c.name for c in self.columns if c.field == field), field)

    def _converted(self, image: Column, column: RowColumn) -> tuple[Column, Column] | None:
        if column.avro is None:
            return None
        return convert(image[column.field], column.avro, self.named, *self.decimal)

    def value(self, image: Column, column: RowColumn) -> Column:
        """``image``'s value of ``column``, converted for Delta (not yet renamed)."""
        converted = self._converted(image, column)
        return image[column.field] if converted is None else converted[0]

    def missing_values(self) -> dict[str, str]:
        """PostgreSQL name -> :attr:`RowColumn.missing`, for the columns added with a default."""
        return {c.name: c.missing for c in self.columns if c.missing is not None}

    def unfit_columns(self, image: Column) -> Column | None:
        """An array of the names of the columns whose value in ``image`` did not fit (empty if
        all did), or ``None`` when no column needs a conversion that can fail."""
        flags = [(c.name, self._converted(image, c)) for c in self.columns]
        names = [F.when(f[1], F.lit(name)) for name, f in flags if f is not None]
        if not names:
            return None
        return F.array_compact(F.array(*names))


def missing_literal(reader: str, decimal: tuple[int, int]) -> Column:
    """The value, as Delta holds the column's values, that rows written before a column was
    added with a default hold: ``reader`` (:attr:`RowColumn.missing`) resolves an empty record
    into its default, by Avro's own schema resolution in ``from_avro`` (the ``avroSchema``
    option), then the column's usual conversion. A constant: no Spark job."""
    from pyspark.sql.avro.functions import from_avro

    kind = json.loads(reader)["fields"][0]["type"][0]
    record = from_avro(F.lit(bytearray()), _MISSING_WRITER, {"avroSchema": reader})
    column = RowColumn("v", "v", kind)
    return RowShape((column,), {}, decimal).value(record, column)
