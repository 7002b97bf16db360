"""What the snapshot reads from the catalog: the published tables, each one's Relation exactly as
pgoutput would describe it, the Type messages of its non-builtin types, and its chunk plan.

I/O (psycopg), run inside the snapshot's transaction so the catalog is read as of the snapshot.
The Relation built here is what :class:`~bridge.events.EventBuilder` would have received from
the stream for the same table version (``pgoutput``'s ``send_relation_and_attrs``):

- the columns of ``pg_publication_tables.attnames`` (PostgreSQL 15+: column lists and, from 18,
  published generated columns), else every column that is not dropped and not generated, in
  ``attnum`` order, each with ``atttypid`` and ``atttypmod``;
- the key flag on the replica identity's columns: the primary key (DEFAULT), the index's columns
  (USING INDEX), every column (FULL), none (NOTHING);
- the namespace ``""`` for ``pg_catalog``, as the protocol sends it;
- a publication ``publish_via_partition_root`` lists the root: its Relation and its rows are the
  partitioned table's, like its changes.

Types with OIDs from ``FirstGenbkiObjectId`` (10000) on are described to the mapper by the
same Type message pgoutput sends (name and namespace), so enums, domains, composites and
extension types map exactly as they do while streaming.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

import psycopg

from bridge.pgoutput.messages import (
    COLUMN_FLAG_KEY,
    Relation,
    RelationColumn,
    ReplicaIdentity,
    Type,
)
from bridge.snapshot.errors import SnapshotTableError
from bridge.snapshot.plan import Chunk, Method, TablePlan, ctid_chunks, key_chunks
from bridge.source.protocol import quote_ident
from bridge.source.publication_tables import Conn, PublishedTable, published_tables
from bridge.source.type_catalog import ResolvedType, describe_types
from bridge.types import TypeMapper

logger = logging.getLogger(__name__)

__all__ = ["PublishedTable", "TableCatalog", "boundaries", "plan_table", "published_tables"]

#: pgoutput sends a Type message for column types with OIDs from here on (FirstGenbkiObjectId).
FIRST_NON_BUILTIN_OID = 10000


@dataclass(frozen=True, slots=True)
class TableCatalog:
    """One table as of the snapshot: its Relation, the Type messages it needs, what the plan
    needs to know about it."""

    published: PublishedTable
    relation: Relation
    types: tuple[Type, ...]
    resolved_types: tuple[ResolvedType, ...]  # its domains and arrays of domains
    relkind: str
    pages: int
    estimated_rows: int
    relfilenode: int
    chunk_key: tuple[tuple[str, str], ...]  # (column, format_type) of a usable unique key

    def describe_to(self, mapper: TypeMapper) -> None:
        """Tell ``mapper`` what the stream tells it before this table's Relation (its Type
        messages), and what the catalog adds (domains' modifiers)."""
        for message in self.types:
            mapper.observe(message)
        for resolved in self.resolved_types:
            resolved.tell(mapper)


_IDENTITY = {
    "d": ReplicaIdentity.DEFAULT,
    "n": ReplicaIdentity.NOTHING,
    "f": ReplicaIdentity.FULL,
    "i": ReplicaIdentity.INDEX,
}


def read_table(conn: Conn, table: PublishedTable) -> TableCatalog:
    """The table's Relation, Type messages and planning facts, as of the current snapshot."""
    row = conn.execute(
        "SELECT c.relreplident, c.relkind, c.relpages, c.reltuples::float8, c.relfilenode, "
        "n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE c.oid = %s",
        (table.oid,),
    ).fetchone()
    if row is None:
        raise SnapshotTableError(table.table, "dropped before the snapshot could read it")
    replident, relkind, pages, reltuples, relfilenode, nspname = row
    identity = _IDENTITY[str(replident)]
    # Without a column list (before 15), generated columns are never published.
    generated = "" if table.columns else "AND a.attgenerated = ''"
    attributes = conn.execute(
        "SELECT a.attname, a.atttypid::int, a.atttypmod, a.attnum, "
        "format_type(a.atttypid, a.atttypmod) "
        "FROM pg_attribute a WHERE a.attrelid = %s AND a.attnum > 0 "
        f"AND NOT a.attisdropped {generated} ORDER BY a.attnum",
        (table.oid,),
    ).fetchall()
    if table.columns is not None:
        wanted = set(table.columns)
        attributes = [a for a in attributes if a[0] in wanted]
    key_columns = _identity_columns(conn, table.oid, identity)
    columns = tuple(
        RelationColumn(
            COLUMN_FLAG_KEY if identity is ReplicaIdentity.FULL or str(name) in key_columns else 0,
            str(name),
            int(str(type_oid)),
            int(str(typmod)),
        )
        for name, type_oid, typmod, _, _ in attributes
    )
    namespace = "" if nspname == "pg_catalog" else str(nspname)
    relation = Relation(None, table.oid, namespace, table.name, identity, columns)
    type_oids = {c.type_oid for c in columns}
    types = _type_messages(conn, type_oids)
    resolved = describe_types(conn, (o for o in type_oids if o >= FIRST_NON_BUILTIN_OID))
    estimated = _estimate_rows(conn, table, str(relkind), float(str(reltuples)))
    return TableCatalog(
        published=table,
        relation=relation,
        types=types,
        resolved_types=tuple(resolved.values()),
        relkind=str(relkind),
        pages=int(str(pages)),
        estimated_rows=estimated,
        relfilenode=int(str(relfilenode)),
        chunk_key=_chunk_key(conn, table.oid),
    )


def _identity_columns(conn: Conn, oid: int, identity: ReplicaIdentity) -> set[str]:
    if identity is ReplicaIdentity.DEFAULT:
        condition = "i.indisprimary"
    elif identity is ReplicaIdentity.INDEX:
        condition = "i.indisreplident"
    else:
        return set()
    rows = conn.execute(
        "SELECT a.attname FROM pg_index i "
        "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
        f"WHERE i.indrelid = %s AND {condition}",
        (oid,),
    ).fetchall()
    return {str(r[0]) for r in rows}


def _type_messages(conn: Conn, oids: set[int]) -> tuple[Type, ...]:
    """The Type messages pgoutput sends for ``oids``: for a domain, its OID with the namespace
    and name of its base type (``logicalrep_write_typ`` looks through domains, to the bottom of
    a domain over a domain), so a column maps the same whether copied or streamed."""
    wanted = sorted(o for o in oids if o >= FIRST_NON_BUILTIN_OID)
    if not wanted:
        return ()
    rows = conn.execute(
        "WITH RECURSIVE chain(oid, base) AS ("
        " SELECT t.oid, t.oid FROM pg_type t WHERE t.oid = ANY(%s::oid[])"
        " UNION ALL SELECT c.oid, b.typbasetype FROM chain c"
        " JOIN pg_type b ON b.oid = c.base WHERE b.typtype = 'd') "
        "SELECT c.oid::int, n.nspname, t.typname FROM chain c "
        "JOIN pg_type t ON t.oid = c.base AND t.typtype <> 'd' "
        "JOIN pg_namespace n ON n.oid = t.typnamespace",
        (wanted,),
    ).fetchall()
    return tuple(
        Type(None, int(str(oid)), "" if nsp == "pg_catalog" else str(nsp), str(name))
        for oid, nsp, name in rows
    )


def _estimate_rows(conn: Conn, table: PublishedTable, relkind: str, reltuples: float) -> int:
    if relkind == "p":
        row = conn.execute(
            "SELECT coalesce(sum(greatest(c.reltuples, 0)), 0)::bigint, "
            "bool_or(c.reltuples < 0) FROM pg_partition_tree(%s::regclass) t "
            "JOIN pg_class c ON c.oid = t.relid WHERE t.isleaf",
            (table.oid,),
        ).fetchone()
        if row is not None and not row[1]:
            return int(str(row[0]))
    elif reltuples >= 0:
        return int(reltuples)
    # Never analyzed (reltuples -1 since PostgreSQL 14, 0 before): count, once.
    counted = conn.execute(f"SELECT count(*) FROM {table.qualified}").fetchone()
    return int(str(counted[0])) if counted else 0


def _chunk_key(conn: Conn, oid: int) -> tuple[tuple[str, str], ...]:
    """A key to split the table by: the primary key, else the replica identity index, else
    the unique index with the fewest columns, all plain NOT NULL columns, no predicate."""
    rows = conn.execute(
        "SELECT i.indexrelid, i.indisprimary, i.indisreplident, "
        "array_agg(a.attname ORDER BY k.ord), "
        "array_agg(format_type(a.atttypid, a.atttypmod) ORDER BY k.ord), "
        "bool_and(a.attnotnull) "
        "FROM pg_index i "
        "CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) "
        "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum "
        "WHERE i.indrelid = %s AND i.indisunique AND i.indisvalid AND i.indpred IS NULL "
        "AND i.indexprs IS NULL AND k.ord <= i.indnkeyatts "
        "GROUP BY i.indexrelid, i.indisprimary, i.indisreplident",
        (oid,),
    ).fetchall()
    usable = [r for r in rows if r[5]]
    if not usable:
        return ()
    usable.sort(key=lambda r: (not r[1], not r[2], len(r[3]), int(str(r[0]))))  # type: ignore[arg-type]
    names, types = usable[0][3], usable[0][4]
    return tuple(zip((str(n) for n in names), (str(t) for t in types), strict=True))  # type: ignore[attr-defined]


def boundaries(conn: Conn, plan: TablePlan, rows_per_chunk: int) -> list[tuple[str, ...]]:
    """Key values every ``rows_per_chunk`` rows in key order, as text, read in the snapshot."""
    keys = ", ".join(quote_ident(c) for c in plan.order_columns)
    texts = ", ".join(f"{quote_ident(c)}::text" for c in plan.order_columns)
    where = f" WHERE ({plan.row_filter})" if plan.row_filter else ""
    # No parameters: names may hold '%', which only parameter processing would interpret.
    rows = conn.execute(
        f"SELECT {texts} FROM (SELECT {keys}, row_number() OVER (ORDER BY {keys}) AS rn "
        f"FROM {plan.qualified}{where}) s WHERE rn > 1 AND rn % {int(rows_per_chunk)} = 1 "
        "ORDER BY rn"
    ).fetchall()
    return [tuple(str(v) for v in r) for r in rows]


def _check_source_query(conn: Conn, table: str, catalog: TableCatalog, query: str) -> None:
    """The user's query must give the table's published columns: tried once (no rows) before
    anything is copied, so a typo stops the snapshot with its key named rather than mid-way."""
    columns = ", ".join(quote_ident(c.name) for c in catalog.relation.columns)
    try:
        conn.execute(f"SELECT {columns} FROM ({query}) AS checked LIMIT 0")
    except psycopg.Error as exc:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SnapshotTableError(
            table,
            f"snapshot.select.statement.overrides.{table} cannot give the table's columns "
            f"({', '.join(c.name for c in catalog.relation.columns)}): {text}",
            sqlstate=exc.sqlstate,
        ) from exc


def plan_table(
    conn: Conn,
    catalog: TableCatalog,
    *,
    keyed: bool,
    rows_per_chunk: int,
    source_query: str | None = None,
) -> TablePlan:
    """How to copy the table: key ranges, block ranges, or whole (see
    :mod:`bridge.snapshot.plan`). ``keyed``: its Kafka records have a key. ``source_query``:
    the user's query for its rows (key ranges still apply to it; block ranges cannot)."""
    table = catalog.published
    method: Method
    chunks: tuple[Chunk, ...] = (Chunk(0),)
    order_columns: tuple[str, ...] = ()
    order_types: tuple[str, ...] = ()
    if source_query is not None:
        _check_source_query(conn, table.table, catalog, source_query)
    if not keyed:
        method = "whole"
    elif catalog.chunk_key:
        method = "key"
        order_columns = tuple(c for c, _ in catalog.chunk_key)
        order_types = tuple(t for _, t in catalog.chunk_key)
    elif catalog.relkind == "r" and conn.info.server_version >= 140000 and source_query is None:
        # Before 14 a ctid range is a filter over a whole sequential scan (no TID range
        # scan): block ranges would read the table once per chunk.
        method = "ctid"
        pages = catalog.pages
        if pages <= 0:
            row = conn.execute(
                "SELECT pg_relation_size(%s::regclass) / current_setting('block_size')::int",
                (table.oid,),
            ).fetchone()
            pages = int(str(row[0])) if row else 0
        chunks = ctid_chunks(pages, catalog.estimated_rows, rows_per_chunk)
    else:
        method = "whole"
    plan = TablePlan(
        table=table.table,
        schema=table.schema,
        name=table.name,
        oid=table.oid,
        method=method,
        columns=tuple(c.name for c in catalog.relation.columns),
        chunks=chunks,
        order_columns=order_columns,
        order_types=order_types,
        row_filter=table.row_filter,
        estimated_rows=catalog.estimated_rows,
        keyed=keyed,
        relfilenode=catalog.relfilenode,
        source_query=source_query,
    )
    if method == "key" and catalog.estimated_rows > rows_per_chunk:
        plan = replace(plan, chunks=key_chunks(boundaries(conn, plan, rows_per_chunk)))
    return plan
