"""Full-text search types: tsvector and tsquery, as strings in PostgreSQL's text form.

``tsvector`` is named ``io.debezium.data.Tsvector`` as in Debezium. The binary forms are
decoded and printed exactly as ``tsvectorout`` / ``tsqueryout`` print, so text and binary
publications agree.
"""

from __future__ import annotations

from typing import Final

from bridge.types.base import DEBEZIUM_UNAVAILABLE, TypeRegistry, connect, simple, utf8
from bridge.types.errors import ConversionError

TSVECTOR_SCHEMA: Final = connect("string", "io.debezium.data.Tsvector")

_WEIGHTS: Final = "DCBA"  # weight bits 0..3


def _quote(lexeme: bytes) -> str:
    text = lexeme.decode("utf-8").replace("\\", "\\\\").replace("'", "''")
    return f"'{text}'"


def tsvector_from_binary(raw: bytes) -> str:
    count = int.from_bytes(raw[0:4], "big")
    pos = 4
    out = []
    for _ in range(count):
        end = raw.index(b"\x00", pos)
        word = _quote(raw[pos:end])
        pos = end + 1
        npos = int.from_bytes(raw[pos : pos + 2], "big")
        pos += 2
        if npos:
            marks = []
            for _ in range(npos):
                wp = int.from_bytes(raw[pos : pos + 2], "big")
                pos += 2
                weight = wp >> 14
                marks.append(f"{wp & 0x3FFF}{_WEIGHTS[weight] if weight else ''}")
            word += ":" + ",".join(marks)
        out.append(word)
    return " ".join(out)


# tsquery operators (QI_OPR) and their priorities, from tsearch's ts_type.h / tsquery.c.
_OP_NOT, _OP_AND, _OP_OR, _OP_PHRASE = 1, 2, 3, 4
_PRIORITY: Final = {_OP_NOT: 4, _OP_PHRASE: 3, _OP_AND: 2, _OP_OR: 1}
_VAL_PRIORITY: Final = 5


class _Reader:
    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        self.pos = 4
        self.left = int.from_bytes(raw[0:4], "big")

    def node(self) -> tuple[str, int]:
        """Read one subtree (Polish notation: operator, right operand, left operand) and return
        its text with its priority."""
        if self.left <= 0:
            raise ConversionError("tsquery", "truncated binary tsquery", raw=self.raw)
        self.left -= 1
        raw = self.raw
        kind = raw[self.pos]
        if kind == 1:  # QI_VAL
            weight, prefix = raw[self.pos + 1], raw[self.pos + 2]
            end = raw.index(b"\x00", self.pos + 3)
            text = _quote(raw[self.pos + 3 : end])
            self.pos = end + 1
            suffix = "*" if prefix else ""
            suffix += "".join(
                w for bit, w in zip((8, 4, 2, 1), "ABCD", strict=True) if weight & bit
            )
            return (f"{text}:{suffix}" if suffix else text), _VAL_PRIORITY
        if kind != 2:
            raise ConversionError("tsquery", f"unknown item type {kind}", raw=raw)
        oper = raw[self.pos + 1]
        self.pos += 2
        if oper == _OP_NOT:
            child, prio = self.node()
            return "!" + (child if prio >= _PRIORITY[_OP_NOT] else f"( {child} )"), _PRIORITY[oper]
        distance = 0
        if oper == _OP_PHRASE:
            distance = int.from_bytes(raw[self.pos : self.pos + 2], "big")
            self.pos += 2
        right, rprio = self.node()
        left, lprio = self.node()
        mine = _PRIORITY[oper]
        if lprio < mine:
            left = f"( {left} )"
        if rprio < mine or (rprio == mine and oper == _OP_PHRASE):
            right = f"( {right} )"
        sign = {_OP_AND: "&", _OP_OR: "|"}.get(oper) or (
            "<->" if distance == 1 else f"<{distance}>"
        )
        return f"{left} {sign} {right}", mine


def tsquery_from_binary(raw: bytes) -> str:
    if int.from_bytes(raw[0:4], "big") == 0:
        return ""
    return _Reader(raw).node()[0]


def register_types(registry: TypeRegistry) -> None:
    registry.add_builtin(
        "tsvector",
        simple("tsvector", TSVECTOR_SCHEMA, utf8, tsvector_from_binary, DEBEZIUM_UNAVAILABLE),
    )
    registry.add_builtin("tsquery", simple("tsquery", "string", utf8, tsquery_from_binary))
