"""What a Relation message leaves out of a column's identity: its attribute number.

A Relation message names a table's columns, in order, but not their ``attnum``. The number is
what tells ``ALTER TABLE ... RENAME COLUMN a TO b`` (same number, new name) from dropping ``a``
and adding ``b`` (a new number), which the two Relation messages alone cannot: both read
``[..., a]`` then ``[..., b]``. The builder asks for the numbers whenever it builds a table
version's schemas (a new Relation), and :func:`bridge.schema_versions.carry_renames` compares
them with the previous version's.

The catalog answers for now, not for the WAL position being decoded: the numbers are trusted
only when the table's columns now are the message's (the same names and types, in order; the
publication may leave some out), that is when the stream is not behind a later change of the
table. Otherwise (a burst of DDL: the stream decodes a change made between two ALTERs)
:func:`inferred_numbers` tells the renames it can prove from the previous version's numbers,
the message's column order and the catalog, and a column it cannot place reads as a dropped
and an added column, as before pgbridge told renames: never a wrong rename.

The same read gives the value rows written before ``ALTER TABLE ... ADD COLUMN ... DEFAULT``
hold for the new column: PostgreSQL does not rewrite them, it serves them the value computed at
the ``ALTER`` (``pg_attribute.attmissingval``; ``pg_attrdef`` may have changed since, so it is
not the source of truth). It is read as text, as the walsender renders it, under the same
"the catalog still describes the message" rule.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import psycopg

from bridge.pgoutput.messages import Relation, RelationColumn

logger = logging.getLogger(__name__)

__all__ = [
    "CatalogColumn",
    "ColumnFacts",
    "ColumnNumbers",
    "catalog_columns",
    "inferred_numbers",
    "matching_numbers",
    "missing_values",
]

# attmissingval is a one-element array of the column's type: its text form parsed as text[]
# gives the element's text (an array column's element is the array's own text). Types whose
# array delimiter is not a comma (box) are left out rather than split wrongly.
_QUERY = (
    "SELECT a.attname, a.attnum::int, a.atttypid::int, "
    "CASE WHEN a.atthasmissing AND t.typdelim = ',' "
    "THEN (a.attmissingval::text::text[])[1] END, "
    "a.atthasdef AND a.attgenerated = '' "
    "FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
    "WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum"
)

#: The table's primary key columns, in the key's order (a REPLICA IDENTITY FULL table's Relation
#: message flags every column as its identity, so it does not say which they are).
_PRIMARY_KEY = (
    "SELECT a.attname FROM pg_index i "
    "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
    "WHERE i.indrelid = %s AND i.indisprimary "
    "ORDER BY array_position(i.indkey::int2[], a.attnum)"
)

#: (name, attnum, type OID, missing value's text or None) of a column as the catalog has it now.
CatalogColumn = tuple[str, int, int, str | None]


@dataclass(frozen=True, slots=True)
class ColumnFacts:
    """What the catalog adds to a Relation message's columns (empty when it no longer
    describes them): attribute numbers, and the text of the value PostgreSQL serves for a
    column added with a default to rows written before it (``attmissingval``)."""

    numbers: dict[str, int] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    #: Columns with a default expression (not generated columns).
    defaulted: frozenset[str] = frozenset()
    #: The table's columns as the catalog has them now (read even when they no longer match).
    catalog: tuple[CatalogColumn, ...] = ()
    #: The table's primary key columns now, by name (empty: none).
    primary_key: tuple[str, ...] = ()


def catalog_columns(
    conn: psycopg.Connection[tuple[object, ...]], relation_oid: int
) -> list[CatalogColumn]:
    """The columns of the table with OID ``relation_oid`` as it is now, by attribute number."""
    return [_catalog_column(row) for row in conn.execute(_QUERY, (relation_oid,))]


def _catalog_column(row: tuple[object, ...]) -> CatalogColumn:
    name, number, type_oid, missing = row[:4]
    return (
        str(name),
        int(str(number)),
        int(str(type_oid)),
        None if missing is None else str(missing),
    )


def matching_numbers(
    columns: Sequence[RelationColumn], catalog: Sequence[CatalogColumn]
) -> dict[str, int]:
    """Column name -> attribute number when ``columns`` (a Relation message's) are the catalog's
    columns now, in order (an ordered subset: publications may leave some out), with the same
    names and types; else empty (the table changed since that message)."""
    numbers: dict[str, int] = {}
    rest = iter(catalog)
    for column in columns:
        for name, number, type_oid, _missing in rest:
            if name == column.name:
                if type_oid != column.type_oid:
                    return {}
                numbers[name] = number
                break
        else:
            return {}
    return numbers


def inferred_numbers(
    previous: Sequence[tuple[str, int]], columns: Sequence[str], catalog: Sequence[CatalogColumn]
) -> dict[str, int]:
    """Column name -> attribute number for a Relation message's ``columns`` (names, in order)
    when the catalog has moved on since it (:func:`matching_numbers` found nothing), from
    ``previous``: the table's previous version's (name, number) pairs, in order.

    What makes it sound: a Relation lists columns in attribute-number order, a column added
    later gets a number above every existing one, and numbers are never reused. So a column of
    the same name keeps its number (as everywhere in pgbridge), and the other columns between
    two such anchors are old columns between them: renamed ones. A column is given an old
    column's number when the catalog now has it under that number (and no longer has the old
    name), or, between two anchors, when as many columns are new there as old ones went, none
    of whose names the catalog contradicts. Columns after the last anchor are told only by the
    catalog (they may be added ones). Whatever cannot be proved gets no number."""
    old_names = {number: name for name, number in previous}
    numbers = {name: number for name, number in previous if name in set(columns)}
    anchors = [numbers[name] for name in columns if name in numbers]
    if anchors != sorted(set(anchors)):
        return {}
    live = {name: number for name, number, _type_oid, _missing in catalog}
    lower, segment = 0, []
    for name in [*columns, None]:
        if name is not None and name not in numbers:
            segment.append(name)
            continue
        upper = numbers[name] if name is not None else None
        gone = [
            number
            for number in sorted(old_names)
            if number > lower and (upper is None or number < upper)
            and old_names[number] not in columns and old_names[number] not in live
        ]  # fmt: skip
        numbers.update(_renamed(segment, gone, live, between_anchors=upper is not None))
        if upper is not None:
            lower, segment = upper, []
    placed = [numbers[name] for name in columns if name in numbers]
    return numbers if placed == sorted(set(placed)) else {}


def _renamed(
    new: list[str], gone: list[int], live: dict[str, int], *, between_anchors: bool
) -> dict[str, int]:
    """Numbers for the ``new`` names of one stretch between anchors, from the numbers of the
    old columns there whose names are ``gone`` (see :func:`inferred_numbers`)."""
    told = {name: live[name] for name in new if live.get(name) in gone}
    if told or not between_anchors or len(new) != len(gone):
        return told
    if any(name in live for name in new):  # the catalog has it under another number
        return {}
    return dict(zip(new, gone, strict=True))


def missing_values(
    columns: Sequence[RelationColumn], catalog: Sequence[CatalogColumn]
) -> dict[str, str]:
    """Column name -> the text of its missing value (``attmissingval``), for the columns of
    ``columns`` that have one, when the catalog still describes them (:func:`matching_numbers`)."""
    if not matching_numbers(columns, catalog):
        return {}
    wanted = {column.name for column in columns}
    return {
        name: missing
        for name, _number, _type_oid, missing in catalog
        if missing is not None and name in wanted
    }


def _escaped(value: str) -> str:
    return value.replace("\\", "\\\\").replace(" ", "\\ ")


class ColumnNumbers:
    """Reads a table's column numbers and missing values with a short connection per table
    version (Relation messages are rare: one per table and stream start, one after each DDL)."""

    def __init__(self, dsn: str, settings: Sequence[tuple[str, str]] = ()) -> None:
        """``settings``: the walsender's session settings (bridge.runner.WALSENDER_SETTINGS), so
        that missing values read as text as the stream's values are sent."""
        self.dsn = dsn
        # libpq's options: a space inside a value is escaped with a backslash.
        self.options = " ".join(f"-c {name}={_escaped(value)}" for name, value in settings)

    def __call__(self, relation: Relation) -> ColumnFacts:
        try:
            with psycopg.connect(
                self.dsn,
                autocommit=True,
                application_name="pgbridge-column-numbers",
                options=self.options,
            ) as conn:
                rows = list(conn.execute(_QUERY, (relation.relation_oid,)))
                primary_key = tuple(
                    str(row[0]) for row in conn.execute(_PRIMARY_KEY, (relation.relation_oid,))
                )
            catalog = [_catalog_column(row) for row in rows]
            numbers = matching_numbers(relation.columns, catalog)
            return ColumnFacts(
                numbers,
                missing_values(relation.columns, catalog),
                frozenset(str(row[0]) for row in rows if row[4] and numbers) & set(numbers),
                tuple(catalog),
                primary_key,
            )
        except psycopg.Error as exc:
            # Without numbers the schema says nothing of renames: a rename made now reaches
            # consumers as a dropped and an added column, as it did before pgbridge told them.
            logger.warning(
                "could not read the column numbers of table %d from the catalog (a column "
                "renamed in this version is then treated as dropped and added): %s",
                relation.relation_oid,
                exc,
            )
            return ColumnFacts()
