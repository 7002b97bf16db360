"""Debezium's column controls: which columns reach Kafka, and which only masked, hashed or cut.

The settings, with Debezium's names (each value a comma-separated list of regular expressions
matching ``schema.table.column`` whole, case-insensitively, as Debezium's do):

- ``column.include.list`` / ``column.exclude.list``: the columns of the ``Value`` record (at most
  one of the two). A key column left out of the value stays in the message key, as in Debezium.
- ``column.mask.with.<N>.chars``: the value is ``N`` asterisks.
- ``column.mask.hash.<algorithm>.with.salt.<salt>``: the value is the hex digest of the salt and
  the value (Debezium's default "v1" form: the value as Java serialises a ``String``);
  ``column.mask.hash.v2.<algorithm>.with.salt.<salt>``: of the salt and the value's UTF-8
  bytes. Cut to the column's declared length (``varchar(n)``, ``char(n)``), as Debezium does.
- ``column.truncate.to.<N>.chars``: strings cut to ``N`` characters, bytes to ``N`` bytes.

Masking and hashing apply to character columns (``text``, ``varchar``, ``char``, ``name``,
``citext`` and domains over them), truncation to those and ``bytea``; a matched column of
another type is sent as it is, with a warning (Debezium passes it silently). The field's
schema says what was done, with Debezium's parameters (``masked``, ``truncateLength``).

Where pgbridge differs from Debezium, on purpose:

- A column several controls match gets the most protective: exclusion, then masking, then
  hashing, then truncation (Debezium takes the first rule in its own order).
- ``NULL`` stays ``NULL`` (Debezium's mask writes asterisks for it, which tells nothing and
  hides that the value is absent).
- The control applies to the column wherever its value appears: ``before``, ``after``, the
  message key and the dead-letter topic (Debezium leaves the key in clear). A key column can
  therefore be hashed but not masked or truncated: distinct rows would share one key; that is
  a :class:`ColumnControlError` naming the column.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal

from bridge.errors import ConfigError, PgBridgeError
from bridge.types import ColumnType
from bridge.types.errors import ConversionError

logger = logging.getLogger(__name__)

ControlKind = Literal["mask", "hash", "truncate"]

#: Precedence when several controls match one column: the most protective first.
_PRECEDENCE: Final[tuple[ControlKind, ...]] = ("mask", "hash", "truncate")

#: The PostgreSQL types (``ColumnType.pg_name``; a domain has its base type's) whose values
#: are character strings: what masking and hashing apply to (Debezium: JDBC CHAR/VARCHAR/...).
CHARACTER_TYPES: Final = frozenset({"text", "character varying", "character", "name", "citext"})
#: ... and what truncation applies to besides them.
_TRUNCATABLE: Final = CHARACTER_TYPES | {"bytea"}

#: Java's MessageDigest names (what Debezium's keys spell) -> hashlib's.
_ALGORITHMS: Final = {
    "MD2": None,
    "MD5": "md5",
    "SHA-1": "sha1",
    "SHA-224": "sha224",
    "SHA-256": "sha256",
    "SHA-384": "sha384",
    "SHA-512": "sha512",
    "SHA-512/224": "sha512_224",
    "SHA-512/256": "sha512_256",
    "SHA3-224": "sha3_224",
    "SHA3-256": "sha3_256",
    "SHA3-384": "sha3_384",
    "SHA3-512": "sha3_512",
}

_MASK_KEY: Final = re.compile(r"column\.mask\.with\.(\d+)\.chars")
_TRUNCATE_KEY: Final = re.compile(r"column\.truncate\.to\.(\d+)\.chars")
_HASH_KEY: Final = re.compile(r"column\.mask\.hash\.(?:(v2)\.)?([^.]+)\.with\.salt\.(.+)", re.S)

#: Shown instead of a salt wherever settings are printed (the salt is a secret in a key name).
SALT_SHOWN: Final = "****"


class ColumnControlError(PgBridgeError):
    """A column control cannot apply to a column (a masked or truncated key column)."""

    def __init__(self, column: str, message: str) -> None:
        super().__init__(f"column {column}: {message}")
        self.column = column


@dataclass(frozen=True, slots=True)
class ColumnRule:
    """One control setting: which columns (regexes of ``schema.table.column``), what to do.
    ``length``: the mask's or the truncation's number of characters; ``algorithm`` (hashlib's
    name), ``salt`` and ``version`` (1 or 2): the hash's."""

    kind: ControlKind
    patterns: tuple[str, ...]
    length: int = 0
    algorithm: str = ""
    salt: bytes = field(default=b"", repr=False)
    version: int = 1

    def matches(self, qualified: str) -> bool:
        return _matches(self.patterns, qualified)


def is_control_key(key: str) -> bool:
    """Whether ``key`` is one of the patterned control keys (the count, algorithm or salt is
    part of the name, as in Debezium)."""
    return any(p.fullmatch(key) for p in (_MASK_KEY, _TRUNCATE_KEY, _HASH_KEY))


def shown_key(key: str) -> str:
    """``key`` as settings are printed: a hash key's salt hidden."""
    match = _HASH_KEY.fullmatch(key)
    if match is None:
        return key
    version = "v2." if match.group(1) else ""
    return f"column.mask.hash.{version}{match.group(2)}.with.salt.{SALT_SHOWN}"


def parse_rule(key: str, raw: object) -> ColumnRule:
    """The rule of one patterned control key; :class:`ConfigError` naming the key (its salt
    hidden) when the key or its value is not valid."""
    shown = shown_key(key)
    patterns = _column_patterns(shown, raw)
    if match := _MASK_KEY.fullmatch(key):
        return ColumnRule("mask", patterns, length=int(match.group(1)))
    if match := _TRUNCATE_KEY.fullmatch(key):
        return ColumnRule("truncate", patterns, length=int(match.group(1)))
    match = _HASH_KEY.fullmatch(key)
    if match is None:  # pragma: no cover - callers ask is_control_key first
        raise ConfigError(shown, "is not a column control")
    algorithm = _ALGORITHMS.get(match.group(2).upper())
    if algorithm is None:
        known = ", ".join(name for name, lib in _ALGORITHMS.items() if lib)
        raise ConfigError(shown, f"unknown hash algorithm {match.group(2)!r}; one of {known}")
    return ColumnRule(
        "hash",
        patterns,
        algorithm=algorithm,
        salt=match.group(3).encode(),
        version=2 if match.group(1) else 1,
    )


def _column_patterns(key: str, raw: object) -> tuple[str, ...]:
    if not isinstance(raw, str):
        raise ConfigError(key, f"expected a comma-separated list of regexes, got {raw!r}")
    patterns = tuple(p.strip() for p in raw.split(",") if p.strip())
    if not patterns:
        raise ConfigError(key, "names no column (a regex of schema.table.column)")
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ConfigError(key, f"{pattern!r} is not a regular expression: {exc}") from None
    return patterns


def _matches(patterns: Iterable[str], qualified: str) -> bool:
    return any(re.fullmatch(p, qualified, re.IGNORECASE) for p in patterns)


@dataclass(frozen=True, slots=True)
class ColumnControls:
    """The column settings of one bridge (see the module doc). Empty: every column, as it is."""

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    rules: tuple[ColumnRule, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.include or self.exclude or self.rules)

    def in_value(self, table: str, column: str) -> bool:
        """Whether ``column`` of ``table`` (``schema.table``) is a field of the ``Value``."""
        qualified = f"{table}.{column}"
        if self.include and not _matches(self.include, qualified):
            return False
        return not (self.exclude and _matches(self.exclude, qualified))

    def rule_for(self, table: str, column: str) -> ColumnRule | None:
        """The control of ``column`` of ``table``: the most protective that matches."""
        qualified = f"{table}.{column}"
        matched = [rule for rule in self.rules if rule.matches(qualified)]
        for kind in _PRECEDENCE:
            for rule in matched:
                if rule.kind == kind:
                    return rule
        return None

    def controlled(
        self, column_type: ColumnType, table: str, column: str, *, length: int, in_key: bool
    ) -> ColumnType:
        """``column_type`` under this column's control (itself when none applies);
        ``length``: the declared length of a ``varchar(n)``/``char(n)`` column, else -1."""
        rule = self.rule_for(table, column)
        if rule is None:
            return column_type
        if rule.kind == "truncate":
            applies = column_type.pg_name in _TRUNCATABLE
        else:
            applies = column_type.pg_name in CHARACTER_TYPES
        if not applies:
            logger.warning(
                "%s.%s: %s applies to character columns%s; the column is %s and is sent as it is",
                table, column, _describe(rule), "" if rule.kind != "truncate" else " and bytea",
                column_type.pg_name,
            )  # fmt: skip
            return column_type
        if in_key and rule.kind != "hash":
            raise ColumnControlError(
                f"{table}.{column}",
                f"is in the message key: {_describe(rule)} would give distinct rows one key; "
                "hash it (column.mask.hash.*) or key the table by other columns "
                "(message.key.columns)",
            )
        return _apply(rule, column_type, length)


def _describe(rule: ColumnRule) -> str:
    if rule.kind == "mask":
        return f"column.mask.with.{rule.length}.chars"
    if rule.kind == "truncate":
        return f"column.truncate.to.{rule.length}.chars"
    return "column.mask.hash." + ("v2." if rule.version == 2 else "") + "…"


def _apply(rule: ColumnRule, column_type: ColumnType, length: int) -> ColumnType:
    if rule.kind == "mask":
        mask = "*" * rule.length
        return _wrapped(column_type, lambda _value: mask, {"masked": "true"})
    if rule.kind == "truncate":
        limit = rule.length
        return _wrapped(
            column_type, lambda value: truncated(value, limit), {"truncateLength": str(limit)}
        )
    digest = hasher(rule.algorithm, rule.salt, rule.version)
    cut = length if length > 0 else None
    return _wrapped(column_type, lambda value: digest(value)[:cut], {"masked": "true"})


def _wrapped(
    column_type: ColumnType, control: Callable[[Any], Any], parameters: dict[str, str]
) -> ColumnType:
    """``column_type`` with ``control`` applied to each converted value; the C encoder has no
    form for it (``native`` 0): rows of a table with a controlled column take the Python
    converters."""
    from_text, from_binary = column_type.from_text, column_type.from_binary

    def converted(convert: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
        def control_value(raw: bytes) -> Any:
            try:
                return control(convert(raw))
            except Exception as exc:  # say what failed, never the value (it is withheld)
                raise ConversionError(column_type.pg_name, type(exc).__name__) from None

        return control_value

    avro = column_type.avro
    schema: dict[str, Any] = {"type": avro} if isinstance(avro, str) else dict(avro)
    schema["connect.parameters"] = {**schema.get("connect.parameters", {}), **parameters}
    return replace(
        column_type,
        avro=schema,
        from_text=converted(from_text),
        from_binary=converted(from_binary),
        native=(0, 0),
        element=None,
    )


def truncated(value: Any, limit: int) -> Any:
    """A string cut to ``limit`` characters as Java counts them (UTF-16 units; a character
    outside the BMP is not split: it is left out whole), bytes to ``limit`` bytes."""
    if isinstance(value, str):
        if len(value) <= limit // 2:  # no string of this length has more units than that
            return value
        units = value.encode("utf-16-le", "surrogatepass")
        if len(units) <= 2 * limit:
            return value
        cut = units[: 2 * limit]
        if 0xD8 <= cut[-1] <= 0xDB:  # the last unit opens a surrogate pair: drop it
            cut = cut[:-2]
        return cut.decode("utf-16-le", "surrogatepass")
    if isinstance(value, (bytes, bytearray)):
        return bytes(value[:limit])
    return value


def hasher(algorithm: str, salt: bytes, version: int) -> Callable[[Any], str]:
    """Debezium's ``MaskStrings`` hash: the lowercase hex digest of ``salt`` followed by the
    value's bytes: the Java serialisation of the ``String`` (version 1, Debezium's default) or
    its UTF-8 (version 2)."""
    to_bytes = java_serialized if version == 1 else _utf8

    def digest(value: Any) -> str:
        h = hashlib.new(algorithm)
        h.update(salt)
        h.update(to_bytes(str(value)))
        return h.hexdigest()

    return digest


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def java_serialized(text: str) -> bytes:
    """What ``new ObjectOutputStream(out).writeObject(text)`` writes: the stream header, then
    ``TC_STRING`` with a 2-byte length (``TC_LONGSTRING`` with an 8-byte one past 65,535
    bytes) and the string in Java's modified UTF-8."""
    encoded = _modified_utf8(text)
    if len(encoded) <= 0xFFFF:
        return b"\xac\xed\x00\x05\x74" + len(encoded).to_bytes(2, "big") + encoded
    return b"\xac\xed\x00\x05\x7c" + len(encoded).to_bytes(8, "big") + encoded


def _modified_utf8(text: str) -> bytes:
    """Java's modified UTF-8: U+0000 as two bytes, characters outside the BMP as the two
    3-byte encodings of their surrogates (CESU-8)."""
    plain = text.encode("utf-8", "surrogatepass")
    if b"\x00" not in plain and (plain.isascii() or max(plain) < 0xF0):
        return plain
    out = bytearray()
    for char in text:
        point = ord(char)
        if point == 0:
            out += b"\xc0\x80"
        elif point > 0xFFFF:
            point -= 0x10000
            for unit in (0xD800 + (point >> 10), 0xDC00 + (point & 0x3FF)):
                out += chr(unit).encode("utf-8", "surrogatepass")
        else:
            out += char.encode("utf-8", "surrogatepass")
    return bytes(out)
