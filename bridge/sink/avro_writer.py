"""A specialised Avro binary encoder: a schema compiled once into one small function per node.

Why not just ``fastavro.schemaless_writer``: it walks the schema for every record (a dict lookup
per field, union branch *validation* per optional field, logical-type dispatch by string), about
20 µs for one of pgbridge's envelopes, which made it the largest single cost of the pipeline. The
schemas here are fixed per table version, so that walk is done once: :func:`compile_writer`
turns a schema into a ``(buffer, value) -> None`` closure that appends the value's encoding to
a ``bytearray`` (about 2 µs for a 6-column row). A record becomes one generated function in
which fields of primitive types, of logical types over them and of ``["null", primitive]``
unions are encoded inline (see :func:`_record_writer`); other fields call their own closures.

What is specialised (everything :mod:`bridge.schema` and :mod:`bridge.types` produce): records,
``null``/``boolean``/``int``/``long``/``float``/``double``/``bytes``/``string``, unions of
``null`` and one other type (either order), arrays, maps, enums, fixed, named-type references
(also recursive ones), and the logical types ``decimal`` (on bytes), ``date``, ``time-millis``,
``time-micros``, ``timestamp-*``, ``local-timestamp-*`` and ``uuid``. A logical-type value that
is already the underlying primitive (an int of microseconds, a str UUID, unscaled bytes) is
written as is; any other value (``datetime``, ``uuid.UUID``, ``date``) goes through fastavro's
own conversion for that logical type, so the result is what fastavro writes. ``Decimal`` is
converted here, ten times cheaper and to the same bytes (see :func:`_decimal_writer`).
Anything else (general unions, unknown types) falls back to fastavro for that sub-schema only,
so the encoder is always correct, just slower there.

The output is byte-for-byte fastavro's (``tests/sink/test_avro_writer.py`` checks it with
generated records): same zigzag varints, same block layout for arrays and maps (one block, then
0), same union indexes, same decimal byte width (fastavro's ``(bit_length + 8) // 8``, which is
not always minimal for negative numbers, but is what fastavro and hence the previous pgbridge
wrote). Record fields missing from the input dict take the field's default, as in fastavro.
"""

from __future__ import annotations

import decimal
import functools
import io
import json
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

import fastavro
from fastavro.logical_writers import LOGICAL_WRITERS

__all__ = ["AvroWriteError", "Writer", "compile_writer", "encode_long", "write_long"]

#: Appends the encoding of a value to the buffer.
Writer = Callable[[bytearray, Any], None]


class AvroWriteError(ValueError):
    """A value does not fit its schema (wrong type, out of range, unknown enum symbol)."""


# --- varints -------------------------------------------------------------------------------

_INT_MIN: Final = -(1 << 31)
_INT_MAX: Final = (1 << 31) - 1
_LONG_MIN: Final = -(1 << 63)
_LONG_MAX: Final = (1 << 63) - 1

# Varints are written 14 bits at a time from two tables instead of 7 bits per loop turn: a
# timestamp in microseconds is 8 varint bytes, 4 turns of this loop rather than 8. The tables
# hold 2 x 16,384 small bytes objects (about 1.5 MB), built once at import.
# _CONT14[x]: x's 14 bits as two bytes that both have the continuation bit set.
_CONT14: Final = tuple(bytes(((x & 0x7F) | 0x80, (x >> 7) | 0x80)) for x in range(0x4000))
# _LAST14[x], x >= 0x80: the last two bytes of a varint (the second without continuation bit).
_LAST14: Final = tuple(bytes(((x & 0x7F) | 0x80, x >> 7)) for x in range(0x4000))


def write_long(buf: bytearray, n: int) -> None:
    """Append ``n`` as an Avro long (zigzag varint)."""
    z = (n << 1) ^ (n >> 63)
    if 0 <= z < 0x80:
        buf.append(z)
        return
    if not _LONG_MIN <= n <= _LONG_MAX:
        raise AvroWriteError(f"{n} is out of range for an Avro long")
    while z >= 0x4000:
        buf += _CONT14[z & 0x3FFF]
        z >>= 14
    if z < 0x80:
        buf.append(z)
    else:
        buf += _LAST14[z]


def encode_long(n: int) -> bytes:
    """``n`` as an Avro long, as bytes."""
    buf = bytearray()
    write_long(buf, n)
    return bytes(buf)


def _write_int(buf: bytearray, n: int) -> None:
    if not _INT_MIN <= n <= _INT_MAX:
        raise AvroWriteError(f"{n} is out of range for an Avro int")
    write_long(buf, n)


def _write_string(buf: bytearray, s: str) -> None:
    b = s.encode()
    n = len(b)
    if n < 0x40:  # zigzag(n) = 2n fits one byte
        buf.append(n << 1)
    else:
        write_long(buf, n)
    buf += b


def _write_bytes(buf: bytearray, b: bytes) -> None:
    n = len(b)
    if n < 0x40:
        buf.append(n << 1)
    else:
        write_long(buf, n)
    buf += b


def _write_boolean(buf: bytearray, v: Any) -> None:
    buf.append(1 if v else 0)


def _write_null(buf: bytearray, v: Any) -> None:
    if v is not None:
        raise AvroWriteError(f"{v!r} is not null")


_FLOAT: Final = struct.Struct("<f").pack
_DOUBLE: Final = struct.Struct("<d").pack


def _write_float(buf: bytearray, v: float) -> None:
    buf += _FLOAT(v)


def _write_double(buf: bytearray, v: float) -> None:
    buf += _DOUBLE(v)


_PRIMITIVES: Final[dict[str, Writer]] = {
    "null": _write_null,
    "boolean": _write_boolean,
    "int": _write_int,
    "long": write_long,
    "float": _write_float,
    "double": _write_double,
    "bytes": _write_bytes,
    "string": _write_string,
}

#: The Python type a logical type's underlying primitive arrives as when no conversion is due.
_PRIMITIVE_PYTYPE: Final[dict[str, type]] = {"int": int, "long": int, "string": str}


# --- the compiler ------------------------------------------------------------------------------


def compile_writer(schema: Any) -> Writer:
    """Compile a schema (parsed JSON: dict, list or str, as :mod:`bridge.schema` builds it)
    into a writer. Raises :class:`fastavro.schema.SchemaParseException` (via fastavro) for a
    schema fastavro would reject.

    Writers are pure functions of their schema, so one is compiled per distinct schema and
    process: every table's envelope shares the source, transaction and TOAST blocks, and a
    reconnect's Relation messages bring back schemas already compiled (a few ms each)."""
    return _compile_canonical(json.dumps(schema, sort_keys=True, separators=(",", ":")))


@functools.lru_cache(maxsize=2048)
def _compile_canonical(text: str) -> Writer:
    schema = json.loads(text)
    named: dict[str, Any] = {}
    # fastavro validates the schema and collects the named types its fallbacks may refer to.
    fastavro.parse_schema(schema, named_schemas=named)
    return _Compiler(named).compile(schema, "")


@dataclass(frozen=True, slots=True)
class _Inline:
    """How a record writer may inline a field's writer instead of calling it."""

    base: str  # a key of _INLINE_CODE
    null_index: int | None = None  # the null branch of a ["null", base] union
    convert: Callable[[Any, Any], Any] | None = None  # fastavro's logical-type conversion
    schema: Mapping[str, Any] | None = None  # the logical type's schema, for convert
    pytype: type | None = None  # values of this type need no conversion


_PRIMITIVE_INLINE: Final[dict[Writer, _Inline]] = {
    write_long: _Inline("long"),
    _write_int: _Inline("int"),
    _write_string: _Inline("string"),
    _write_bytes: _Inline("bytes"),
    _write_boolean: _Inline("boolean"),
    _write_double: _Inline("double"),
    _write_float: _Inline("float"),
}


class _Compiler:
    def __init__(self, fastavro_named: dict[str, Any]) -> None:
        self._fastavro_named = fastavro_named
        # Full name -> writer; a record's entry is a trampoline until it is compiled, so
        # recursive references work.
        self._named: dict[str, Writer] = {}
        # Writers a record writer may inline (primitives, their logical types and optionals).
        self._inline: dict[Writer, _Inline] = dict(_PRIMITIVE_INLINE)

    def compile(self, schema: Any, namespace: str) -> Writer:
        if isinstance(schema, str):
            return self._compile_name(schema, namespace)
        if isinstance(schema, list):
            return self._compile_union(schema, namespace)
        if not isinstance(schema, dict):
            raise AvroWriteError(f"not a schema: {schema!r}")
        kind = schema.get("type")
        if isinstance(kind, (dict, list)):
            return self.compile(kind, namespace)
        logical = schema.get("logicalType")
        if logical is not None and kind in _PRIMITIVES:
            return self._compile_logical(schema, kind, logical)
        if kind in _PRIMITIVES:
            return _PRIMITIVES[kind]
        if kind == "record" or kind == "error":
            return self._compile_record(schema, namespace)
        if kind == "enum":
            return self._compile_enum(schema, namespace)
        if kind == "fixed":
            return self._compile_fixed(schema, namespace)
        if kind == "array":
            return _array_writer(self.compile(schema["items"], namespace))
        if kind == "map":
            return _map_writer(self.compile(schema["values"], namespace))
        return self._fallback(schema, namespace)

    # -- names --------------------------------------------------------------------------------

    @staticmethod
    def _full_name(schema: Mapping[str, Any], namespace: str) -> tuple[str, str]:
        """(full name, the namespace its children inherit)."""
        name: str = schema["name"]
        if "." in name:
            return name, name.rpartition(".")[0]
        ns: str = schema.get("namespace", namespace) or ""
        return (f"{ns}.{name}" if ns else name), ns

    def _compile_name(self, name: str, namespace: str) -> Writer:
        if name in _PRIMITIVES:
            return _PRIMITIVES[name]
        for candidate in (f"{namespace}.{name}" if namespace else name, name):
            writer = self._named.get(candidate)
            if writer is not None:
                return writer
        raise AvroWriteError(f"unknown named type {name!r}")

    def _define(self, full: str) -> list[Writer]:
        """Register ``full`` before its body is compiled: references to it made meanwhile
        (recursion) go through a one-element cell filled in afterwards."""
        cell: list[Writer] = []

        def trampoline(buf: bytearray, value: Any) -> None:
            cell[0](buf, value)

        self._named[full] = trampoline
        return cell

    # -- complex types ------------------------------------------------------------------------

    def _compile_record(self, schema: Mapping[str, Any], namespace: str) -> Writer:
        full, ns = self._full_name(schema, namespace)
        cell = self._define(full)
        fields: list[tuple[str, Writer]] = []
        defaults: list[tuple[str, bool, Any, Any]] = []
        for f in schema["fields"]:
            writer = self.compile(f["type"], ns)
            fields.append((f["name"], writer))
            defaults.append((f["name"], "default" in f, f.get("default"), f["type"]))
        inline = [self._inline.get(w) for _, w in fields]
        writer = _record_writer(full, tuple(fields), tuple(defaults), inline)
        cell.append(writer)
        self._named[full] = writer  # later references skip the trampoline
        return writer

    def _compile_enum(self, schema: Mapping[str, Any], namespace: str) -> Writer:
        full, _ = self._full_name(schema, namespace)
        index = {symbol: i for i, symbol in enumerate(schema["symbols"])}

        def write_enum(buf: bytearray, value: Any) -> None:
            i = index.get(value)
            if i is None:
                raise AvroWriteError(f"{value!r} is not a symbol of enum {full}")
            write_long(buf, i)

        self._named[full] = write_enum
        return write_enum

    def _compile_fixed(self, schema: Mapping[str, Any], namespace: str) -> Writer:
        full, _ = self._full_name(schema, namespace)
        size: int = schema["size"]
        if schema.get("logicalType") == "decimal":
            writer = self._fallback(schema, namespace)  # rare: let fastavro size and pad it
        else:

            def writer(buf: bytearray, value: Any) -> None:
                if len(value) != size:
                    raise AvroWriteError(f"fixed {full} takes {size} bytes, got {len(value)}")
                buf += value

        self._named[full] = writer
        return writer

    def _compile_union(self, branches: list[Any], namespace: str) -> Writer:
        kinds = [b if isinstance(b, str) else None for b in branches]
        if len(branches) == 2 and "null" in kinds and kinds[0] != kinds[1]:
            null_index = kinds.index("null")
            other = self.compile(branches[1 - null_index], namespace)
            optional = _optional_writer(other, null_index)
            shape = self._inline.get(other)
            if shape is not None and shape.null_index is None:
                self._inline[optional] = replace(shape, null_index=null_index)
            return optional
        if len(branches) == 1:
            inner = self.compile(branches[0], namespace)

            def single(buf: bytearray, value: Any) -> None:
                buf.append(0)
                inner(buf, value)

            return single
        # Branch selection by value is fastavro's business (its rules are subtle: tuples,
        # records by field names, float vs double); pgbridge's own schemas never get here.
        return self._fallback(branches, namespace)

    def _compile_logical(self, schema: Mapping[str, Any], kind: str, logical: str) -> Writer:
        base = _PRIMITIVES[kind]
        if kind == "bytes" and logical == "decimal":
            return _decimal_writer(schema)
        convert = LOGICAL_WRITERS.get(f"{kind}-{logical}")
        pytype = _PRIMITIVE_PYTYPE.get(kind)
        if convert is None or pytype is None:
            return base  # fastavro ignores unknown logical types too
        frozen = dict(schema)

        def write_logical(buf: bytearray, value: Any) -> None:
            if type(value) is not pytype:
                value = convert(value, frozen)
            base(buf, value)

        self._inline[write_logical] = _Inline(kind, convert=convert, schema=frozen, pytype=pytype)
        return write_logical

    def _fallback(self, schema: Any, namespace: str) -> Writer:
        """fastavro for one sub-schema: a one-field wrapper record (a record's encoding is its
        fields' concatenation), parsed with the enclosing schema's named types so references
        resolve, minus the ones the sub-schema defines itself."""
        own = _names_in(schema, namespace)
        named = {k: v for k, v in self._fastavro_named.items() if k not in own}
        wrapper: dict[str, Any] = {
            "type": "record",
            "name": "_pgbridge_fallback",
            "fields": [{"name": "v", "type": schema}],
        }
        if namespace:
            wrapper["namespace"] = namespace
        parsed = fastavro.parse_schema(wrapper, named_schemas=named)
        write = fastavro.schemaless_writer

        def write_fallback(buf: bytearray, value: Any) -> None:
            out = io.BytesIO()
            write(out, parsed, {"v": value})
            buf += out.getbuffer()

        return write_fallback


def _names_in(schema: Any, namespace: str) -> set[str]:
    """Full names of the named types a (sub-)schema defines."""
    found: set[str] = set()

    def walk(s: Any, ns: str) -> None:
        if isinstance(s, list):
            for b in s:
                walk(b, ns)
        elif isinstance(s, dict):
            kind = s.get("type")
            if kind in ("record", "error", "enum", "fixed"):
                full, child_ns = _Compiler._full_name(s, ns)
                found.add(full)
                for f in s.get("fields", ()):
                    walk(f["type"], child_ns)
            elif kind == "array":
                walk(s["items"], ns)
            elif kind == "map":
                walk(s["values"], ns)
            elif isinstance(kind, (dict, list)):
                walk(kind, ns)

    walk(schema, namespace)
    return found


# --- writer factories ----------------------------------------------------------------------

_MISSING: Final = object()


#: Inline encodings of ``v`` (already converted) by _Inline.base, appending to ``buf``.
_INLINE_CODE: Final = {
    "long": """
z = (v << 1) ^ (v >> 63)
if 0 <= z < 0x80:
    append(z)
elif 0 < z < 0x200000:
    if z < 0x4000:
        buf += LAST14[z]
    else:
        buf += CONT14[z & 0x3FFF]
        append(z >> 14)
else:
    write_long(buf, v)""",
    "int": """
if -0x40 <= v < 0x40:
    append((v << 1) ^ (v >> 63))
else:
    write_int(buf, v)""",
    "string": """
b = v.encode()
n = len(b)
if n < 0x40:
    append(n << 1)
else:
    write_long(buf, n)
buf += b""",
    "bytes": """
n = len(v)
if n < 0x40:
    append(n << 1)
else:
    write_long(buf, n)
buf += v""",
    "boolean": """
append(1 if v else 0)""",
    "double": """
buf += pack_double(v)""",
    "float": """
buf += pack_float(v)""",
}


def _record_writer(
    full: str,
    fields: tuple[tuple[str, Writer], ...],
    defaults: tuple[tuple[str, bool, Any, Any], ...],
    inline: list[_Inline | None],
) -> Writer:
    """One function for the whole record, its source generated here: a field of a primitive
    type, of a logical type over one or of a ["null", primitive] union is encoded inline (no
    call per field, one-byte varints without a call), any other field calls its writer. This
    is what namedtuple and dataclasses do for their methods; the names and writers reach the
    code through its globals, never as text."""
    env: dict[str, Any] = {
        "write_long": write_long,
        "write_int": _write_int,
        "pack_double": _DOUBLE,
        "pack_float": _FLOAT,
        "LAST14": _LAST14,
        "CONT14": _CONT14,
    }
    lines = ["def write_record(buf, record):", "    append = buf.append"]
    for i, ((name, writer), shape) in enumerate(zip(fields, inline, strict=True)):
        env[f"N{i}"], env[f"W{i}"] = name, writer
        lines.append(f"    v = record[N{i}]")
        if shape is None:
            lines.append(f"    W{i}(buf, v)")
            continue
        body: list[str] = []
        if shape.convert is not None:
            env[f"C{i}"], env[f"S{i}"], env[f"T{i}"] = shape.convert, shape.schema, shape.pytype
            body.append(f"if type(v) is not T{i}:\n    v = C{i}(v, S{i})")
        body.append(_INLINE_CODE[shape.base])
        code = "\n".join(body).strip("\n")
        if shape.null_index is None:
            lines.append(_indent(code, 4))
        else:
            lines.append("    if v is None:")
            lines.append(f"        append({shape.null_index << 1})")
            lines.append("    else:")
            lines.append(f"        append({(1 - shape.null_index) << 1})")
            lines.append(_indent(code, 8))
    exec("\n".join(lines), env)  # the source is built above from fixed fragments only
    fast: Writer = env["write_record"]

    def write_record(buf: bytearray, record: Any) -> None:
        start = len(buf)
        try:
            fast(buf, record)
        except KeyError:
            # A field is missing (or a writer below raised KeyError): start over with
            # fastavro's rule, the field's default, and let a real error surface from there.
            del buf[start:]
            _write_record_with_defaults(buf, record, full, fields, defaults)

    return write_record


def _indent(code: str, spaces: int) -> str:
    pad = " " * spaces
    return "\n".join(pad + line for line in code.splitlines())


def _write_record_with_defaults(
    buf: bytearray,
    record: Any,
    full: str,
    fields: tuple[tuple[str, Writer], ...],
    defaults: tuple[tuple[str, bool, Any, Any], ...],
) -> None:
    get = record.get
    for (name, writer), (_, has_default, default, ftype) in zip(fields, defaults, strict=True):
        value = get(name, _MISSING)
        if value is _MISSING:
            nullable = ftype == "null" or (isinstance(ftype, list) and "null" in ftype)
            if not has_default and not nullable:
                raise AvroWriteError(f"record {full}: no value and no default for {name}")
            value = default
        writer(buf, value)


def _optional_writer(other: Writer, null_index: int) -> Writer:
    # The common cases get one closure instead of two calls per value.
    value_index = 1 - null_index
    tag = bytes((value_index << 1,))  # zigzag of the branch index
    null_tag = null_index << 1
    if other is write_long:

        def write_optional_long(buf: bytearray, value: Any) -> None:
            if value is None:
                buf.append(null_tag)
            else:
                buf += tag
                write_long(buf, value)

        return write_optional_long
    if other is _write_string:

        def write_optional_string(buf: bytearray, value: Any) -> None:
            if value is None:
                buf.append(null_tag)
            else:
                b = value.encode()
                n = len(b)
                if n < 0x40:
                    buf += tag
                    buf.append(n << 1)
                else:
                    buf += tag
                    write_long(buf, n)
                buf += b

        return write_optional_string
    if other is _write_boolean:
        true, false = tag + b"\x01", tag + b"\x00"

        def write_optional_boolean(buf: bytearray, value: Any) -> None:
            if value is None:
                buf.append(null_tag)
            else:
                buf += true if value else false

        return write_optional_boolean

    def write_optional(buf: bytearray, value: Any) -> None:
        if value is None:
            buf.append(null_tag)
        else:
            buf += tag
            other(buf, value)

    return write_optional


def _array_writer(items: Writer) -> Writer:
    def write_array(buf: bytearray, values: Any) -> None:
        n = len(values)
        if n:
            write_long(buf, n)
            for v in values:
                items(buf, v)
        buf.append(0)

    return write_array


def _map_writer(values: Writer) -> Writer:
    def write_map(buf: bytearray, mapping: Any) -> None:
        n = len(mapping)
        if n:
            write_long(buf, n)
            for k, v in mapping.items():
                _write_string(buf, k)
                values(buf, v)
        buf.append(0)

    return write_map


def _decimal_writer(schema: Mapping[str, Any]) -> Writer:
    scale: int = schema.get("scale", 0)
    precision: int = schema["precision"]
    factor = 10**scale
    limit = 10**precision
    Decimal = decimal.Decimal

    def write_decimal(buf: bytearray, value: Any) -> None:
        if not isinstance(value, Decimal):
            _write_bytes(buf, value)  # already the unscaled two's complement bytes
            return
        # as_integer_ratio is exact and ~10x cheaper than fastavro's digit-tuple loop. Unlike
        # fastavro this accepts trailing zeros beyond the scale (1.000 at scale 2 is 100): the
        # value is representable, which is all an Avro reader needs. Exponents far outside the
        # schema are refused first: as_integer_ratio of 1E-999999999 would never return.
        if value.is_finite() and value and not -scale - 1 <= value.adjusted() < precision:
            raise AvroWriteError(
                f"{value} cannot be written as an Avro decimal({precision}, {scale})"
            )
        try:
            numerator, denominator = value.as_integer_ratio()
        except (ValueError, OverflowError):
            raise AvroWriteError(f"{value} cannot be written as an Avro decimal") from None
        unscaled, rest = divmod(numerator * factor, denominator)
        if rest:
            raise AvroWriteError(f"{value} has more decimal places than scale {scale}")
        if not -limit < unscaled < limit:
            raise AvroWriteError(f"{value} has more digits than precision {precision}")
        # fastavro's width: the magnitude's bit length + 1 sign bit, rounded up to whole bytes.
        size = (unscaled.bit_length() + 8) // 8
        if size < 0x40:
            buf.append(size << 1)
        else:
            write_long(buf, size)
        buf += unscaled.to_bytes(size, "big", signed=True)

    return write_decimal
