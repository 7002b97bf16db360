"""What a Relation message leaves out of a column's identity: its attribute number.

A Relation message names a table's columns, in order, but not their ``attnum``. The number is
what tells ``ALTER TABLE ... RENAME COLUMN a TO b`` (same number, new name) from dropping ``a``
and adding ``b`` (a new number), which the two Relation messages alone cannot: both read
``[..., a]`` then ``[..., b]``. The builder asks for the numbers whenever it builds a table
version's schemas (a new Relation), and :func:`bridge.schema.carry_renames` compares them with
the previous version's.

The catalog answers for now, not for the WAL position being decoded: the numbers are trusted
only when the table's columns now are the message's (the same names and types, in order; the
publication may leave some out), that is when the stream is not behind a later change of the
table. Otherwise the version gets no numbers, and a rename next to it reads as a dropped and
an added column, as before pgbridge told renames: never a wrong rename.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import psycopg

from bridge.pgoutput.messages import Relation, RelationColumn

logger = logging.getLogger(__name__)

__all__ = ["CatalogColumn", "ColumnNumbers", "catalog_columns", "matching_numbers"]

_QUERY = (
    "SELECT attname, attnum::int, atttypid::int FROM pg_attribute "
    "WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped ORDER BY attnum"
)

#: (name, attnum, type OID) of a column as the catalog has it now.
CatalogColumn = tuple[str, int, int]


def catalog_columns(
    conn: psycopg.Connection[tuple[object, ...]], relation_oid: int
) -> list[CatalogColumn]:
    """The columns of the table with OID ``relation_oid`` as it is now, by attribute number."""
    return [
        (str(name), int(str(number)), int(str(type_oid)))
        for name, number, type_oid in conn.execute(_QUERY, (relation_oid,))
    ]


def matching_numbers(
    columns: Sequence[RelationColumn], catalog: Sequence[CatalogColumn]
) -> dict[str, int]:
    """Column name -> attribute number when ``columns`` (a Relation message's) are the catalog's
    columns now, in order (an ordered subset: publications may leave some out), with the same
    names and types; else empty (the table changed since that message)."""
    numbers: dict[str, int] = {}
    rest = iter(catalog)
    for column in columns:
        for name, number, type_oid in rest:
            if name == column.name:
                if type_oid != column.type_oid:
                    return {}
                numbers[name] = number
                break
        else:
            return {}
    return numbers


class ColumnNumbers:
    """Reads a table's column numbers with a short connection per table version (Relation
    messages are rare: one per table and stream start, and one after each DDL)."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    def __call__(self, relation: Relation) -> dict[str, int]:
        try:
            with psycopg.connect(
                self.dsn, autocommit=True, application_name="pgbridge-column-numbers"
            ) as conn:
                catalog = catalog_columns(conn, relation.relation_oid)
            return matching_numbers(relation.columns, catalog)
        except psycopg.Error as exc:
            # Without numbers the schema says nothing of renames: a rename made now reaches
            # consumers as a dropped and an added column, as it did before pgbridge told them.
            logger.warning(
                "could not read the column numbers of table %d from the catalog (a column "
                "renamed in this version is then treated as dropped and added): %s",
                relation.relation_oid,
                exc,
            )
            return {}
