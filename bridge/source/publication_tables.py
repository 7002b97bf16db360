"""The tables a publication publishes, as pgoutput publishes them: what the snapshots copy and
what the running bridge watches for tables added while it streams (bridge.source.table_watch)."""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from bridge.source.protocol import quote_ident

__all__ = ["Conn", "PublishedTable", "published_tables"]

Conn = psycopg.Connection[tuple[object, ...]]


@dataclass(frozen=True, slots=True)
class PublishedTable:
    schema: str
    name: str
    oid: int
    columns: tuple[str, ...] | None  # pg_publication_tables.attnames (15+), else None
    row_filter: str | None  # (15+)

    @property
    def table(self) -> str:
        return f"{self.schema}.{self.name}"

    @property
    def qualified(self) -> str:
        return f"{quote_ident(self.schema)}.{quote_ident(self.name)}"


def published_tables(conn: Conn, publication: str) -> list[PublishedTable]:
    """The publication's tables as pgoutput publishes them (roots when via partition root)."""
    version = conn.info.server_version
    extra = ", t.attnames, t.rowfilter" if version >= 150000 else ", NULL, NULL"
    rows = conn.execute(
        "SELECT t.schemaname, t.tablename, c.oid, p.pubviaroot" + extra + " "
        "FROM pg_publication_tables t JOIN pg_publication p ON p.pubname = t.pubname "
        "JOIN pg_namespace n ON n.nspname = t.schemaname "
        "JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = t.tablename "
        "WHERE t.pubname = %s ORDER BY 1, 2",
        (publication,),
    ).fetchall()
    tables: dict[int, PublishedTable] = {}
    for schema, name, oid, via_root, attnames, row_filter in rows:
        oid_int = int(str(oid))
        if via_root and version < 150000:
            # Before 15 the view lists leaf partitions even when changes are published as the
            # root's: publish the root, as pgoutput does.
            root = conn.execute(
                "SELECT r.oid, n.nspname, r.relname FROM pg_class r "
                "JOIN pg_namespace n ON n.oid = r.relnamespace "
                "WHERE r.oid = pg_partition_root(%s::oid)",
                (oid_int,),
            ).fetchone()
            if root is not None:
                oid_int, schema, name = int(str(root[0])), root[1], root[2]
        tables[oid_int] = PublishedTable(
            str(schema),
            str(name),
            oid_int,
            None if attnames is None else tuple(str(a) for a in attnames),  # type: ignore[attr-defined]
            None if row_filter is None else str(row_filter),
        )
    return sorted(tables.values(), key=lambda t: (t.schema, t.name))
