"""Chunk planning and row positions of the snapshot: pure, no I/O.

A table is copied in chunks, each one ``COPY (SELECT … WHERE <range>) TO STDOUT``:

- ``key``: ranges of a primary key or of a unique index on NOT NULL columns, the boundaries
  being key values read once (as text) inside the snapshot; the first range is open below, the
  last open above, so together they cover every possible key, including keys inserted later
  (which matters when a chunk is copied again after a restart, in a newer snapshot);
- ``ctid``: block ranges of the heap, ``ctid >= '(a,0)' AND ctid < '(b,0)'``, the last one open
  above (the table may have grown);
- ``whole``: the table in one chunk: tables without a message key (a multiset downstream, see
  :mod:`bridge.snapshot`) and partitioned tables without a usable key.

Rows of a chunk are numbered in the order the scan returns them: ``seq = run << 52 | chunk << 32
| row``, where ``run`` counts the attempts of one snapshot (0 for the first, one more at each
resume). A chunk is read once per attempt, so positions ``(consistent point, seq)`` are unique
per table across restarts and a consumer that deduplicates by position never mistakes a row
copied after a restart for a different row delivered before it. No chunk is sorted: rows of one
snapshot have distinct keys, so their order does not change what a consumer rebuilds; the
planner reads a key range by an index scan all the same (in key order), without a sort step.
(Bitmap heap scans, forced with index scans off, cost the server less per row on a table that
fits in memory and more on one of 10 million rows: the bench measured both and kept the
planner's choice.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from bridge.source.protocol import quote_ident, quote_literal

__all__ = [
    "MAX_CHUNKS",
    "MAX_RUN",
    "Chunk",
    "Method",
    "TablePlan",
    "ctid_chunks",
    "key_chunks",
    "position",
    "select_statement",
    "wire_kinds",
]

Method = Literal["key", "ctid", "whole"]

ROW_BITS: Final = 32
CHUNK_BITS: Final = 20
#: Chunks per table and attempts per snapshot that fit in a ``seq`` (a signed 64-bit long).
MAX_CHUNKS: Final = 1 << CHUNK_BITS
MAX_RUN: Final = (1 << (63 - ROW_BITS - CHUNK_BITS)) - 1
MAX_ROWS_PER_CHUNK: Final = 1 << ROW_BITS


def position(run: int, chunk: int, row: int) -> int:
    """The ``seq`` of row ``row`` of chunk ``chunk`` in attempt ``run``."""
    if not (0 <= run <= MAX_RUN and 0 <= chunk < MAX_CHUNKS and 0 <= row < MAX_ROWS_PER_CHUNK):
        raise ValueError(f"position out of range: run {run}, chunk {chunk}, row {row}")
    return (run << (ROW_BITS + CHUNK_BITS)) | (chunk << ROW_BITS) | row


@dataclass(frozen=True, slots=True)
class Chunk:
    """One range of a table: ``lower <= x < upper``, ``None`` for an open end. For ``key``
    chunks the bounds are key values as text (one per key column); for ``ctid`` chunks one
    block number each."""

    index: int
    lower: tuple[str, ...] | None = None
    upper: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class TablePlan:
    """How one table is copied: which columns, in which ranges.

    ``columns`` are the published columns in the Relation's order (quoted here, never by the
    caller); ``order_columns``/``order_types`` the chunking key and the SQL types its text
    bounds are cast to (``format_type``); ``row_filter`` the publication's row filter
    (PostgreSQL 15+), which the copy applies like pgoutput does; ``source_query`` the user's
    query that replaces the table as the rows' source (``snapshot.select.statement.overrides``).
    """

    table: str  # "schema.table"
    schema: str
    name: str
    oid: int
    method: Method
    columns: tuple[str, ...]
    chunks: tuple[Chunk, ...]
    order_columns: tuple[str, ...] = ()
    order_types: tuple[str, ...] = ()
    row_filter: str | None = None
    estimated_rows: int = 0
    keyed: bool = True  # the Kafka records have a key (upserts downstream)
    relfilenode: int = 0
    source_query: str | None = None

    @property
    def qualified(self) -> str:
        return f"{quote_ident(self.schema)}.{quote_ident(self.name)}"


def key_chunks(boundaries: list[tuple[str, ...]]) -> tuple[Chunk, ...]:
    """Chunks between sorted, distinct key boundaries: ``(-inf, b0), [b0, b1), …, [bn, +inf)``."""
    if len(boundaries) + 1 > MAX_CHUNKS:
        raise ValueError(f"{len(boundaries) + 1} chunks: at most {MAX_CHUNKS}")
    bounds: list[tuple[str, ...] | None] = [None, *boundaries, None]
    return tuple(Chunk(i, bounds[i], bounds[i + 1]) for i in range(len(bounds) - 1))


def ctid_chunks(
    pages: int, estimated_rows: int, rows_per_chunk: int, max_chunks: int = MAX_CHUNKS
) -> tuple[Chunk, ...]:
    """Block ranges of about ``rows_per_chunk`` rows each, from ``relpages`` and ``reltuples``
    (at most ``max_chunks``); the first open below, the last open above."""
    if pages <= 0 or estimated_rows <= rows_per_chunk:
        return (Chunk(0),)
    rows_per_page = max(estimated_rows / pages, 1.0)
    blocks = max(1, int(rows_per_chunk / rows_per_page), -(-pages // max_chunks))
    return key_chunks([(str(b),) for b in range(blocks, pages, blocks)])


def _row(columns: tuple[str, ...]) -> str:
    quoted = ", ".join(quote_ident(c) for c in columns)
    return quoted if len(columns) == 1 else f"({quoted})"


def _values(values: tuple[str, ...], types: tuple[str, ...]) -> str:
    cast = ", ".join(f"{quote_literal(v)}::{t}" for v, t in zip(values, types, strict=True))
    return cast if len(values) == 1 else f"({cast})"


def range_predicate(plan: TablePlan, chunk: Chunk) -> list[str]:
    """The WHERE conditions of one chunk (none for a whole-table chunk)."""
    conditions: list[str] = []
    if plan.method == "key":
        row = _row(plan.order_columns)
        if chunk.lower is not None:
            conditions.append(f"{row} >= {_values(chunk.lower, plan.order_types)}")
        if chunk.upper is not None:
            conditions.append(f"{row} < {_values(chunk.upper, plan.order_types)}")
    elif plan.method == "ctid":
        if chunk.lower is not None:
            conditions.append(f"ctid >= '({int(chunk.lower[0])},0)'::tid")
        if chunk.upper is not None:
            conditions.append(f"ctid < '({int(chunk.upper[0])},0)'::tid")
    return conditions


def wire_kinds(native_ops: tuple[tuple[int, int], ...]) -> bytes:
    """Per column, ``b`` (binary) or ``t`` (text form) for the COPY, from each column type's
    ``(text op, binary op)`` of the C accelerator (0: none): binary wherever the accelerator
    reads it (or nothing does), text where it reads only the text form (numeric, jsonb, …),
    so that every row the accelerator can encode is encoded by it. Both forms go through the
    same converters as streaming in text or binary mode, which give identical values."""
    return bytes(
        0x74 if binary_op == 0 and text_op != 0 else 0x62 for text_op, binary_op in native_ops
    )


def select_statement(plan: TablePlan, chunk: Chunk, kinds: bytes | None = None) -> str:
    """``COPY (SELECT <columns> FROM <table> WHERE …) TO STDOUT (FORMAT binary)`` for a chunk.

    ``kinds`` (one ``b`` or ``t`` per column, default all ``b``) says which columns are sent
    as their text form (``col::text``: text's send function writes the type's output text, the
    very bytes pgoutput sends in text mode) rather than in binary (see :func:`wire_kinds`).

    No ``ORDER BY`` (see the module doc): rows come in the order of the scan, the key's for an
    index scan, the heap's for TID range and sequential scans (the reader turns synchronized
    sequential scans off, which would otherwise start a large table's scan wherever another
    scan is)."""
    columns = ", ".join(
        f"{quote_ident(c)}::text" if kinds is not None and kinds[i] == 0x74 else quote_ident(c)
        for i, c in enumerate(plan.columns)
    )
    conditions = range_predicate(plan, chunk)
    if plan.row_filter:
        conditions.append(f"({plan.row_filter})")
    where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
    source = plan.qualified
    if plan.source_query is not None:
        # The user's rows, by the table's column names: the chunk's key range and the
        # publication's row filter apply to them as to the table (PostgreSQL pushes them down
        # into a simple query), so a filtered table is still copied in key ranges.
        source = f"({plan.source_query}) AS {quote_ident(plan.name)}"
    select = f"SELECT {columns} FROM {source}{where}"
    return f"COPY ({select}) TO STDOUT (FORMAT binary)"
