"""Avro payloads of one writer schema decoded straight into Arrow columns, without a Python
object per record.

Why: the apply job's decode (Spark's ``from_avro`` into its columnar cache) is most of what a
snapshot-sized batch costs, about 7 us of CPU per record on 2 cores, and fastavro in Python
costs about 16 us (docs/measurements.md). :func:`compile_plan` turns a writer schema and the
fields a caller wants (``captures``: field paths such as ``("after", "id")`` or
``("source", "commit_lsn")``) into a plan; :func:`decode` runs it over the payloads of an Arrow
binary array in C (``bridge.native._avrocols``) and wraps the column buffers as an Arrow table.
Every other field is skipped by its encoding.

What it captures is exact or refused: a field of a type it does not convert exactly as Spark's
path (bridge.spark.driver_decode's rules, a subset of them) makes :func:`compile_plan` answer
None, and a payload that does not decode, or a decimal that does not fit its precision, raises
:class:`PayloadError`: the caller then leaves the records to Spark's path, which dead-letters.
Without the C part (``PGBRIDGE_NATIVE=0``, no compiler) the same table comes from fastavro.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Context, Decimal
from typing import Any

from bridge.native.switches import NATIVE, enabled
from bridge.spark.columns import ZONED_TIMESTAMP

__all__ = ["Output", "PayloadError", "Plan", "compile_plan", "decode", "native_decoder"]

# Node kinds of a plan (bridge/native/_avrocols.c).
(_NULL, _BOOL, _INT, _FLOAT, _DOUBLE, _BYTES, _FIXED, _RECORD, _UNION, _ARRAY, _MAP, _ENUM) = range(
    12
)
# How a captured value is stored.
(_C_BOOL, _C_INT32, _C_INT64, _C_FLOAT32, _C_FLOAT64, _C_VAR, _C_DECIMAL, _C_COUNT, _C_ZONED) = (
    range(9)
)
_NODE = struct.Struct("<4i")
_MAX_DIGITS = 38
#: Decimal arithmetic without rounding (the default context rounds to 28 digits).
_EXACT = Context(prec=2 * _MAX_DIGITS + 2)


class PayloadError(ValueError):
    """A payload the plan cannot decode exactly (truncated, not of the writer schema, a
    decimal beyond its precision): the batch is Spark's path's to decode."""


@dataclass(frozen=True, slots=True)
class Output:
    """One captured field: its output column name, storage and Arrow type."""

    name: str
    kind: int
    arrow: Any  # pyarrow.DataType
    precision: int = 0


@dataclass(frozen=True, slots=True)
class Plan:
    nodes: bytes
    outputs: tuple[Output, ...]
    paths: tuple[tuple[str, ...], ...]  # each output's field path
    schema: Any  # the writer schema (parsed JSON), for the fastavro path

    @property
    def kinds(self) -> bytes:
        return bytes(o.kind for o in self.outputs)

    @property
    def precisions(self) -> tuple[int, ...]:
        return tuple(o.precision for o in self.outputs)


def _leaf_output(name: str, avro: Any) -> Output | None:
    """How a captured value of (non-union) Avro type ``avro`` is stored, with the Arrow type of
    Spark's path's reading of it; None where that is not exact here."""
    import pyarrow as pa

    kind = avro if isinstance(avro, str) else avro.get("type")
    logical = None if isinstance(avro, str) else avro.get("logicalType")
    connect = None if isinstance(avro, str) else avro.get("connect.name")
    if kind == "boolean" and logical is None:
        return Output(name, _C_BOOL, pa.bool_())
    if kind == "int":
        if logical is None:
            return Output(name, _C_INT32, pa.int32())
        return Output(name, _C_INT32, pa.date32()) if logical == "date" else None
    if kind == "long":
        typed = {
            None: pa.int64(),
            "timestamp-micros": pa.timestamp("us", tz="UTC"),
            "local-timestamp-micros": pa.timestamp("us"),
        }
        return Output(name, _C_INT64, typed[logical]) if logical in typed else None
    if kind == "float" and logical is None:
        return Output(name, _C_FLOAT32, pa.float32())
    if kind == "double" and logical is None:
        return Output(name, _C_FLOAT64, pa.float64())
    if kind == "string" and logical in (None, "uuid"):
        if connect == ZONED_TIMESTAMP:  # text Spark's path parses into an instant
            return Output(name, _C_ZONED, pa.timestamp("us", tz="UTC"))
        return Output(name, _C_VAR, pa.string())
    if kind == "bytes":
        if logical is None:
            return Output(name, _C_VAR, pa.binary())
        if logical == "decimal":
            digits, places = int(avro.get("precision", 0)), int(avro.get("scale", 0))
            if 0 < digits <= _MAX_DIGITS and 0 <= places <= digits:
                return Output(name, _C_DECIMAL, pa.decimal128(digits, places), digits)
    if kind in ("array", "map"):
        return Output(name, _C_COUNT, pa.int32())  # how many items (unchanged TOAST columns)
    return None


class _Compiler:
    def __init__(self, captures: Mapping[tuple[str, ...], str]) -> None:
        self.captures = captures
        self.named: dict[str, Any] = {}
        self.nodes: list[list[int]] = []
        self.outputs: list[Output] = []
        self.paths: list[tuple[str, ...]] = []
        self.found: set[tuple[str, ...]] = set()
        self.refused = False

    def lookup(self, name: str, namespace: str | None) -> tuple[Any, str | None]:
        full = name if "." in name or not namespace else f"{namespace}.{name}"
        node = self.named.get(full, self.named.get(name))
        if node is None:
            raise KeyError(name)
        return node, full.rpartition(".")[0] or None

    def emit(self, kind: int, arg: int = 0, column: int = -1) -> int:
        self.nodes.append([kind, arg, column, 1])
        return len(self.nodes) - 1

    def close(self, at: int) -> None:
        self.nodes[at][3] = len(self.nodes) - at

    def capture(self, path: tuple[str, ...], avro: Any) -> int:
        name = self.captures.get(path)
        if name is None:
            return -1
        output = _leaf_output(name, avro)
        if output is None or path in self.found:
            self.refused = True
            return -1
        self.found.add(path)
        self.outputs.append(output)
        self.paths.append(path)
        return len(self.outputs) - 1

    def node(self, avro: Any, namespace: str | None, path: tuple[str, ...] | None) -> None:
        """Emit ``avro``'s subtree; ``path``: the field path when its value may be captured
        (a field of records only, not inside arrays or maps)."""
        if isinstance(avro, list):
            at = self.emit(_UNION, len(avro))
            branches = [b for b in avro if b != "null"]
            for branch in avro:
                # Only ["null", T] carries a capture through to T (null: left null).
                inner = path if branch != "null" and len(branches) == 1 else None
                if path is not None and len(branches) > 1 and path in self.captures:
                    self.refused = True
                self.node(branch, namespace, inner)
            self.close(at)
            return
        if isinstance(avro, str) and avro not in _PRIMITIVE_KINDS:
            definition, inner_ns = self.lookup(avro, namespace)
            self.node(definition, inner_ns, path)
            return
        kind = avro if isinstance(avro, str) else avro.get("type")
        if isinstance(kind, dict | list):
            self.node(kind, namespace, path)
            return
        if kind == "record":
            full = str(avro["name"])
            if "." not in full:
                ns = avro.get("namespace", namespace)
                full = f"{ns}.{full}" if ns else full
            self.named.setdefault(full, avro)
            inner_ns = full.rpartition(".")[0] or None
            if path is not None and path in self.captures:
                self.refused = True  # a record is not a value this captures
            at = self.emit(_RECORD, len(avro["fields"]))
            for field in avro["fields"]:
                sub = (*path, field["name"]) if path is not None else None
                self.node(field["type"], inner_ns, sub)
            self.close(at)
            return
        if kind in ("enum", "fixed"):
            full = str(avro["name"])
            if "." not in full:
                ns = avro.get("namespace", namespace)
                full = f"{ns}.{full}" if ns else full
            self.named.setdefault(full, avro)
            if path is not None and path in self.captures:
                self.refused = True
            if kind == "enum":
                self.emit(_ENUM)
            else:
                self.emit(_FIXED, int(avro["size"]))
            return
        column = self.capture(path, avro) if path is not None else -1
        if kind in ("array", "map"):
            at = self.emit(_ARRAY if kind == "array" else _MAP, 0, column)
            self.node(avro["items" if kind == "array" else "values"], namespace, None)
            self.close(at)
            return
        simple = {
            "null": _NULL,
            "boolean": _BOOL,
            "int": _INT,
            "long": _INT,
            "float": _FLOAT,
            "double": _DOUBLE,
            "bytes": _BYTES,
            "string": _BYTES,
        }
        if kind not in simple:
            raise ValueError(f"not an Avro type: {kind!r}")
        self.emit(simple[kind], 0, column)


_PRIMITIVE_KINDS = frozenset(
    {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}
)


def compile_plan(schema: Any, captures: Mapping[tuple[str, ...], str]) -> Plan | None:
    """A plan that decodes payloads of writer schema ``schema`` (parsed JSON) into one column
    per captured field path (``captures``: path -> column name, in the output's order of
    appearance in the schema); None when a captured field's type is not converted exactly
    here, or a path is not in the schema."""
    compiler = _Compiler(captures)
    try:
        compiler.node(schema, None, ())
    except (KeyError, ValueError, TypeError):
        return None
    if compiler.refused or compiler.found != set(captures):
        return None
    nodes = b"".join(_NODE.pack(*n) for n in compiler.nodes)
    return Plan(nodes, tuple(compiler.outputs), tuple(compiler.paths), schema)


def native_decoder() -> Any | None:
    """``bridge.native._avrocols.decode_columns``, or None without the C part."""
    if not enabled(NATIVE):
        return None
    try:
        from bridge.native._avrocols import decode_columns
    except ImportError:
        return None
    return decode_columns


def decode(plan: Plan, payloads: Any, skip: int = 5) -> Any:
    """The captured fields of every payload of ``payloads`` (an Arrow binary array; the first
    ``skip`` bytes of each are the Confluent frame) as an Arrow table, one column per output."""
    import pyarrow as pa

    payloads = payloads.combine_chunks() if isinstance(payloads, pa.ChunkedArray) else payloads
    if payloads.null_count:
        raise PayloadError("a record without a payload (a tombstone) among the payloads")
    if payloads.type == pa.large_binary():
        payloads = payloads.cast(pa.binary())
    decoder = native_decoder()
    if decoder is None:
        return _decode_fastavro(plan, payloads, skip)
    _, offsets, data = payloads.buffers()
    try:
        parts = decoder(
            plan.nodes,
            plan.kinds,
            plan.precisions,
            offsets if offsets is not None else b"\0\0\0\0",
            data if data is not None else b"",
            payloads.offset,
            len(payloads),
            skip,
        )
    except ValueError as exc:
        raise PayloadError(str(exc)) from exc
    count = len(payloads)
    arrays = []
    for output, (validity, values, var_data) in zip(plan.outputs, parts, strict=True):
        buffers = [pa.py_buffer(validity), pa.py_buffer(values)]
        if var_data is not None:
            buffers.append(pa.py_buffer(var_data))
        arrays.append(pa.Array.from_buffers(output.arrow, count, buffers))
    return pa.Table.from_arrays(arrays, names=[o.name for o in plan.outputs])


def _decode_fastavro(plan: Plan, payloads: Any, skip: int) -> Any:
    """The same table by fastavro, one record at a time (the path without the C part)."""
    import fastavro
    import pyarrow as pa

    parsed = fastavro.parse_schema(_raw(plan.schema))
    columns: list[list[Any]] = [[] for _ in plan.outputs]
    for i, payload in enumerate(payloads.to_pylist()):
        try:
            record = fastavro.schemaless_reader(io.BytesIO(payload[skip:]), parsed, None)
        except Exception as exc:
            raise PayloadError(f"record {i}: {exc}") from exc
        for column, output, path in zip(columns, plan.outputs, plan.paths, strict=True):
            column.append(_converted(output, _at(record, path), i))
    arrays = [pa.array(c, o.arrow) for c, o in zip(columns, plan.outputs, strict=True)]
    return pa.Table.from_arrays(arrays, names=[o.name for o in plan.outputs])


def _raw(node: Any) -> Any:
    """The schema with logical types removed: fastavro then gives raw ints and bytes."""
    if isinstance(node, list):
        return [_raw(item) for item in node]
    if not isinstance(node, dict):
        return node
    return {k: _raw(v) for k, v in node.items() if k != "logicalType"}


def _at(record: Any, path: Sequence[str]) -> Any:
    value = record
    for name in path:
        if value is None:
            return None
        value = value[name]
    return value


def _converted(output: Output, value: Any, index: int) -> Any:
    if value is None:
        return None
    if output.kind == _C_COUNT:
        return len(value)
    if output.kind == _C_ZONED:
        from bridge.spark.driver_decode import NotForDriver, zoned_timestamp

        try:
            return zoned_timestamp(value)
        except NotForDriver as exc:
            raise PayloadError(f"record {index}: {exc}") from exc
    if output.kind == _C_DECIMAL:
        unscaled = int.from_bytes(value, "big", signed=True)
        if len(value) > 16 or abs(unscaled) >= 10**output.precision:
            raise PayloadError(f"record {index}: a decimal that does not fit its precision")
        return Decimal(unscaled).scaleb(-output.arrow.scale, _EXACT)
    return value
