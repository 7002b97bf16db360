"""The building blocks every type family uses: the column type record, options, and registry.

A :class:`ColumnType` is what the schema mapper needs to know about one column: its Avro schema
(the non-null form; the schema layer adds the ``null`` branch) and two converters, one per wire
format, each turning the exact bytes pgoutput sent into the value fastavro writes for that
schema. Converters are resolved once per Relation, so the per-row work is a plain function call.

Type families (``numeric``, ``temporal``, ...) register *factories* here, keyed by OID for the
built-in types and by type name for types whose OID differs between databases (extensions, and
the base type names that Type messages carry for domains). A factory receives the column's
typmod and the options, because several mappings depend on them (numeric precision and scale,
``bit(n)`` length, the handling modes).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from psycopg import postgres
from psycopg.adapt import Transformer
from psycopg.pq import Format

from bridge.errors import ConfigError

logger = logging.getLogger(__name__)

#: An Avro schema as its JSON structure (a type name, a union list, or a complex type dict).
AvroSchema = str | list[Any] | dict[str, Any]

#: Raw wire bytes of one value -> the value fastavro writes for the column's Avro schema.
Converter = Callable[[bytes], Any]

#: Debezium's placeholder for unchanged TOASTed values (``unavailable.value.placeholder``).
DEBEZIUM_UNAVAILABLE: Final = "__debezium_unavailable_value"
DEBEZIUM_UNAVAILABLE_BYTES: Final = DEBEZIUM_UNAVAILABLE.encode()

DecimalHandling = Literal["precise", "string", "double"]
UnconstrainedNumeric = Literal["variable_scale", "string", "double"]
IntervalHandling = Literal["numeric", "string"]
TimestamptzHandling = Literal["instant", "string"]
UnknownTypes = Literal["text", "fail"]
HstoreHandling = Literal["map", "json"]
BinaryHandling = Literal["bytes", "base64", "base64-url-safe", "hex"]
TimePrecision = Literal["adaptive_time_microseconds", "connect"]
LogicalTypes = Literal["avro", "connect"]


@dataclass(frozen=True, slots=True)
class TypeOptions:
    """How PostgreSQL types are represented in Avro. Defaults follow Debezium's defaults except
    where noted, so a Debezium consumer configured with defaults reads pgbridge topics.

    - ``decimal_handling``: ``numeric(p,s)`` and ``money`` as Avro ``decimal`` (``precise``, the
      default), as a string, or as a double (Debezium's ``decimal.handling.mode``).
    - ``unconstrained_numeric``: ``numeric`` without precision, in ``precise`` mode: Debezium's
      ``io.debezium.data.VariableScaleDecimal`` record (default; exact, any scale), a string
      (exact, Spark can cast it), or a double (lossy).
    - ``interval_handling``: ``numeric`` = ``io.debezium.time.MicroDuration`` (microseconds, a
      month counted as 30.4375 days like Debezium), ``string`` = ISO-8601
      ``io.debezium.time.Interval``.
    - ``timestamptz_handling``: ``instant`` (default, a pgbridge choice) = UTC microseconds since
      the epoch with Avro ``timestamp-micros``, so Spark gets a native timestamp; ``string`` =
      Debezium's ``io.debezium.time.ZonedTimestamp`` ISO-8601 string in UTC.
    - ``money_fraction_digits``: scale of ``money`` (Debezium's ``money.fraction.digits``).
    - ``unknown_types``: ``text`` sends a type pgbridge does not know as its text form and logs a
      warning once; ``fail`` raises :class:`~bridge.types.errors.UnknownTypeError`.
    - ``hstore_handling``: ``map`` (Avro map of optional strings) or ``json`` (a JSON string).
    - ``binary_handling``: ``bytea`` as Avro ``bytes`` (default) or as a string in ``base64``,
      ``base64-url-safe`` or lower-case ``hex`` (Debezium's ``binary.handling.mode``).
    - ``time_precision``: ``adaptive_time_microseconds`` (default) = the microsecond types
      (``MicroTime``, ``MicroTimestamp``) whatever the column's precision; ``connect`` = Kafka
      Connect's millisecond ``Date`` / ``Time`` / ``Timestamp`` (Debezium's
      ``time.precision.mode=connect``; sub-millisecond digits are dropped).
    - ``logical_types``: ``avro`` (default) = Debezium's ``connect.name`` *and* a standard Avro
      ``logicalType`` where one exists, so Spark's ``from_avro`` gets native types; ``connect`` =
      Debezium's form only, as Debezium with Confluent's AvroConverter writes it: a
      ``logicalType`` is kept only where Kafka Connect gives it the same meaning (``decimal``
      with ``org.apache.kafka.connect.data.Decimal``, ``date`` with ``...connect.data.Date``,
      …). Kafka Connect's Avro data mapping (Confluent's and Apicurio's converters) refuses a
      field with ``logicalType: date`` and ``connect.name: io.debezium.time.Date``.
    - ``enum_labels``: labels of enum types by name (``schema.type`` or bare ``type``). Relation
      and Type messages do not carry labels and the mapper does no I/O, so the caller that has a
      catalog connection passes them in; without labels an enum is a plain string.

    The defaults here are the mapper's own, pgbridge's ``avro`` form; the configuration's
    defaults (bridge.config.keys) are Debezium's wire form: ``timestamptz_handling="string"``,
    ``logical_types="connect"``.
    """

    decimal_handling: DecimalHandling = "precise"
    unconstrained_numeric: UnconstrainedNumeric = "variable_scale"
    interval_handling: IntervalHandling = "numeric"
    timestamptz_handling: TimestamptzHandling = "instant"
    money_fraction_digits: int = 2
    unknown_types: UnknownTypes = "text"
    hstore_handling: HstoreHandling = "map"
    binary_handling: BinaryHandling = "bytes"
    time_precision: TimePrecision = "adaptive_time_microseconds"
    logical_types: LogicalTypes = "avro"
    enum_labels: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        allowed: dict[str, tuple[str, ...]] = {
            "decimal_handling": ("precise", "string", "double"),
            "unconstrained_numeric": ("variable_scale", "string", "double"),
            "interval_handling": ("numeric", "string"),
            "timestamptz_handling": ("instant", "string"),
            "unknown_types": ("text", "fail"),
            "hstore_handling": ("map", "json"),
            "binary_handling": ("bytes", "base64", "base64-url-safe", "hex"),
            "time_precision": ("adaptive_time_microseconds", "connect"),
            "logical_types": ("avro", "connect"),
        }
        for key, values in allowed.items():
            if getattr(self, key) not in values:
                raise ConfigError(key, f"must be one of {', '.join(values)}")
        if not 0 <= self.money_fraction_digits <= 10:
            raise ConfigError("money_fraction_digits", "must be between 0 and 10")


@dataclass(frozen=True, slots=True)
class ColumnType:
    """One column's mapping, resolved once per Relation.

    ``avro`` is the non-null schema; ``from_text`` / ``from_binary`` convert a value in the wire
    format pgoutput marked (kind ``t`` / ``b``). ``toast_placeholder`` is what the column holds
    when the server did not send an unchanged TOASTed value: Debezium's placeholder for string
    and bytes columns, ``None`` (with the column listed in the envelope's
    ``unchanged_toast_columns``) for the others. ``pg_name`` names the type in errors and docs.
    ``native`` names, for the text and the binary wire format, the :mod:`bridge.native.ops`
    code whose C parser reproduces the converter exactly (0: the Python converter only).
    ``element`` is an array's element type, whose ``native`` codes the C encoder applies to
    the items (``None`` for other types). ``fraction_digits``: the fixed fraction width of a
    ``ZONED_PADDED`` value (the C plan's scale).
    """

    pg_name: str
    avro: AvroSchema
    from_text: Converter
    from_binary: Converter
    toast_placeholder: Any = None
    native: tuple[int, int] = (0, 0)
    element: ColumnType | None = None
    fraction_digits: int = 0


@dataclass(frozen=True, slots=True)
class TypeRequest:
    """What a factory is asked to map: one column type with its modifier (and, for arrays, its
    declared dimensions), under some options."""

    oid: int
    typmod: int
    name: str
    options: TypeOptions
    dimensions: int = 1  # for array types: how deep the Avro arrays nest


Factory = Callable[[TypeRequest], ColumnType]


class TypeRegistry:
    """Factories by OID (built-in types) and by name (extension types, domains' base types)."""

    def __init__(self) -> None:
        self.by_oid: dict[int, Factory] = {}
        self.by_name: dict[str, Factory] = {}
        #: element name -> array factory maker, filled by the array family
        self.array_of: Callable[[str, Factory], Factory] | None = None

    def add_builtin(self, name: str, factory: Factory) -> None:
        """Register a built-in type by its pg_catalog name; the OID comes from psycopg's table."""
        info = postgres.types.get(name)
        if info is None:  # pragma: no cover - a typo in a family module
            raise KeyError(name)
        self.by_oid[info.oid] = factory
        self.by_name[name] = factory

    def add_named(self, name: str, factory: Factory) -> None:
        """Register a type that has no fixed OID (extensions): resolved from Type messages."""
        self.by_name[name] = factory


# --- helpers shared by the families -------------------------------------------------------

# One transformer without a connection: psycopg's C loaders then assume the server defaults
# (DateStyle ISO, UTF-8), which is what the replication connection is configured with.
_TX: Final = Transformer(None)


def psycopg_loader(name: str, fmt: Format) -> Callable[[bytes], Any]:
    """psycopg's (C) loader function for a built-in type, by type name."""
    info = postgres.types.get(name)
    if info is None:  # pragma: no cover
        raise KeyError(name)
    return _TX.get_loader(info.oid, fmt).load


def builtin_oid(name: str) -> int:
    info = postgres.types.get(name)
    if info is None:  # pragma: no cover
        raise KeyError(name)
    return info.oid


def connect(
    avro_type: AvroSchema,
    name: str,
    *,
    version: int | None = 1,
    parameters: Mapping[str, str] | None = None,
    logical: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """An Avro type annotated the way Confluent's AvroConverter writes a Connect semantic type
    (``connect.name``, ``connect.version``, ``connect.parameters``), plus an optional standard
    Avro ``logicalType`` so non-Connect readers (Spark's ``from_avro``) get a native type."""
    schema: dict[str, Any] = {"type": avro_type} if isinstance(avro_type, str) else dict(avro_type)
    if version is not None:
        schema["connect.version"] = version
    if parameters:
        schema["connect.parameters"] = dict(parameters)
    schema["connect.name"] = name
    if logical is not None:
        schema["logicalType"] = logical
    schema.update(extra)
    return schema


#: Standard Avro logical types and the Kafka Connect schema name that means the same thing.
#: Kafka Connect's Avro data mapping reads a ``logicalType`` as that Connect type, so a field
#: whose ``connect.name`` is any other name (``io.debezium.time.Date`` with ``date``) is
#: refused ("Mismatched names"); the pair below is the only form it accepts.
CONNECT_LOGICAL_NAMES: Final[Mapping[str, str]] = {
    "decimal": "org.apache.kafka.connect.data.Decimal",
    "date": "org.apache.kafka.connect.data.Date",
    "time-millis": "org.apache.kafka.connect.data.Time",
    "timestamp-millis": "org.apache.kafka.connect.data.Timestamp",
}


def connect_form(schema: AvroSchema) -> AvroSchema:
    """``schema`` as Debezium with a Kafka Connect Avro converter writes it: every
    ``logicalType`` whose Connect meaning differs from the field's ``connect.name`` (or that
    Connect does not know) is dropped; the value's encoding is the same either way (an Avro
    logical type only annotates a primitive). Arrays, maps, unions and records are walked."""
    if isinstance(schema, list):
        return [connect_form(branch) for branch in schema]
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    logical = out.get("logicalType")
    if logical is not None and CONNECT_LOGICAL_NAMES.get(logical) != out.get("connect.name"):
        del out["logicalType"]
    kind = out.get("type")
    if isinstance(kind, (dict, list)):
        out["type"] = connect_form(kind)
    if "items" in out:
        out["items"] = connect_form(out["items"])
    if "values" in out:
        out["values"] = connect_form(out["values"])
    if isinstance(out.get("fields"), list):
        out["fields"] = [{**f, "type": connect_form(f["type"])} for f in out["fields"]]
    return out


def utf8(raw: bytes) -> str:
    return raw.decode("utf-8")


def simple(
    pg_name: str,
    avro: AvroSchema,
    from_text: Converter,
    from_binary: Converter | None = None,
    toast_placeholder: Any = None,
    *,
    native: tuple[int, int] = (0, 0),
) -> Factory:
    """A factory for a type whose mapping does not depend on typmod or options."""
    column_type = ColumnType(
        pg_name, avro, from_text, from_binary or from_text, toast_placeholder, native
    )

    def factory(request: TypeRequest) -> ColumnType:
        return column_type

    return factory
