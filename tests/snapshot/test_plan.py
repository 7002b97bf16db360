"""Chunk planning, the COPY statements and row positions."""

from __future__ import annotations

import pytest

from bridge.snapshot.plan import (
    MAX_CHUNKS,
    MAX_RUN,
    Chunk,
    TablePlan,
    ctid_chunks,
    key_chunks,
    position,
    select_statement,
)


def _plan(**changes: object) -> TablePlan:
    base: dict[str, object] = {
        "table": "public.t",
        "schema": "public",
        "name": "t",
        "oid": 1,
        "method": "key",
        "columns": ("id", "v"),
        "chunks": (Chunk(0),),
        "order_columns": ("id",),
        "order_types": ("integer",),
    }
    base.update(changes)
    return TablePlan(**base)  # type: ignore[arg-type]


def test_key_chunks_cover_every_key_open_at_both_ends() -> None:
    chunks = key_chunks([("10",), ("20",)])
    assert chunks == (
        Chunk(0, None, ("10",)),
        Chunk(1, ("10",), ("20",)),
        Chunk(2, ("20",), None),
    )
    assert key_chunks([]) == (Chunk(0, None, None),)


def test_ctid_chunks_split_pages_by_rows_per_chunk() -> None:
    chunks = ctid_chunks(pages=100, estimated_rows=10_000, rows_per_chunk=2_500)
    assert [(c.lower, c.upper) for c in chunks] == [
        (None, ("25",)),
        (("25",), ("50",)),
        (("50",), ("75",)),
        (("75",), None),
    ]
    assert ctid_chunks(pages=0, estimated_rows=0, rows_per_chunk=10) == (Chunk(0),)
    assert ctid_chunks(pages=10, estimated_rows=5, rows_per_chunk=10) == (Chunk(0),)
    many = ctid_chunks(pages=10**6, estimated_rows=10**8, rows_per_chunk=1, max_chunks=16)
    assert len(many) == 16


def test_select_statement_key_range_with_casts_unsorted() -> None:
    plan = _plan()
    assert select_statement(plan, Chunk(1, ("10",), ("20",))) == (
        'COPY (SELECT "id", "v" FROM "public"."t" WHERE "id" >= \'10\'::integer AND '
        "\"id\" < '20'::integer) TO STDOUT (FORMAT binary)"
    )


def test_select_statement_composite_key_compares_rows() -> None:
    plan = _plan(order_columns=("a", "b"), order_types=("text", "date"))
    sql = select_statement(plan, Chunk(0, None, ("it's", "2024-01-01")))
    assert "(\"a\", \"b\") < ('it''s'::text, '2024-01-01'::date)" in sql
    assert sql.endswith("'2024-01-01'::date)) TO STDOUT (FORMAT binary)")


def test_select_statement_ctid_whole_and_row_filter() -> None:
    ctid = _plan(method="ctid", order_columns=(), order_types=())
    sql = select_statement(ctid, Chunk(1, ("8",), ("16",)))
    assert "WHERE ctid >= '(8,0)'::tid AND ctid < '(16,0)'::tid)" in sql
    whole = _plan(method="whole", row_filter="(id > 5)")
    assert select_statement(whole, Chunk(0)) == (
        'COPY (SELECT "id", "v" FROM "public"."t" WHERE ((id > 5))) TO STDOUT (FORMAT binary)'
    )


def test_select_statement_quotes_hostile_names_and_zero_columns() -> None:
    plan = _plan(schema='we"ird', name="a%b c", columns=(), method="whole")
    assert select_statement(plan, Chunk(0)) == (
        'COPY (SELECT  FROM "we""ird"."a%b c") TO STDOUT (FORMAT binary)'
    )


def test_position_is_unique_ordered_and_bounded() -> None:
    seen = {position(r, c, i) for r in (0, 1, MAX_RUN) for c in (0, 1, MAX_CHUNKS - 1)
            for i in (0, 1, 2**32 - 1)}  # fmt: skip
    assert len(seen) == 27
    assert max(seen) < 2**63
    assert position(0, 0, 5) < position(0, 1, 0) < position(1, 0, 0)
    assert position(0, 0, 0) == 0
    for bad in ((MAX_RUN + 1, 0, 0), (0, MAX_CHUNKS, 0), (0, 0, 2**32), (-1, 0, 0)):
        with pytest.raises(ValueError):
            position(*bad)


def test_wire_kinds_text_only_where_the_accelerator_reads_text_only() -> None:
    from bridge.snapshot.plan import wire_kinds

    # (text op, binary op): both, text only, binary only, neither.
    assert wire_kinds(((1, 1), (4, 0), (0, 7), (0, 0))) == b"btbb"
    plan = _plan(columns=("id", "amount"))
    assert select_statement(plan, Chunk(0), b"bt").startswith(
        'COPY (SELECT "id", "amount"::text FROM'
    )


def test_snapshot_sessions_render_text_like_the_walsender() -> None:
    from bridge.runner import WALSENDER_SETTINGS
    from bridge.snapshot.reader import SESSION_SETTINGS

    ours = {(k.lower(), v) for k, v in SESSION_SETTINGS}
    assert {(k.lower(), v) for k, v in WALSENDER_SETTINGS} <= ours


def test_select_statement_source_query_keeps_key_ranges_and_row_filter() -> None:
    """snapshot.select.statement.overrides: the user's query replaces the table as the rows'
    source, named like the table, and the chunk's range and the publication's row filter
    still apply (so a filtered table is copied in key ranges)."""
    plan = _plan(
        name="My Table", source_query="SELECT * FROM t WHERE v <> 'x'", row_filter="(id > 5)"
    )
    assert select_statement(plan, Chunk(1, ("10",), None), b"bt") == (
        'COPY (SELECT "id", "v"::text FROM (SELECT * FROM t WHERE v <> \'x\') AS "My Table" '
        "WHERE \"id\" >= '10'::integer AND ((id > 5))) TO STDOUT (FORMAT binary)"
    )
