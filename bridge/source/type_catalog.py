"""What pgoutput's Type message leaves out of a domain, read from the catalog.

A Type message names a domain by its *base* type (``logicalrep_write_typ`` looks through
domains), without the domain's type modifier, and an array of a domain by the array's own name
(``_amount``). A column of ``CREATE DOMAIN amount AS numeric(12,3)`` has ``atttypmod = -1``, so
from the messages alone it is an unconstrained numeric, and ``amount[]`` an unknown type. The
catalog has the rest: :func:`describe_types` gives, for each domain and array of a domain, the
named type and modifier it stands for (``numeric`` with ``(12,3)``, ``_numeric`` with
``(12,3)``), which :meth:`bridge.types.TypeMapper.observe_resolved` maps by.

A domain's base type and modifier never change (``ALTER DOMAIN`` changes constraints and
defaults only), so reading them now describes the domain at any WAL position: the snapshot
(inside its transaction) and the stream (with a short connection of its own when a Type message
names an OID not yet described) resolve a column the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import psycopg

if TYPE_CHECKING:
    from bridge.types.mapper import TypeMapper

logger = logging.getLogger(__name__)

__all__ = ["ResolvedType", "TypeDescriber", "describe_types"]

Conn = psycopg.Connection[tuple[object, ...]]


@dataclass(frozen=True, slots=True)
class ResolvedType:
    """Type ``oid`` stands for the named type ``namespace.name`` (namespace ``""`` for
    pg_catalog, as the protocol spells it) with modifier ``typmod`` (a domain, or an array of
    one: ``domain``); ``enum`` is the (namespace, name, labels in order) of the enum it is,
    holds (an array) or stands for (a domain over one)."""

    oid: int
    namespace: str
    name: str
    typmod: int
    enum: tuple[str, str, tuple[str, ...]] | None = None
    domain: bool = True

    def tell(self, mapper: TypeMapper) -> None:
        """Give ``mapper`` what the catalog adds to the Type message."""
        if self.enum is not None:
            mapper.observe_enum(*self.enum)
        if self.domain:
            mapper.observe_resolved(self.oid, self.namespace, self.name, self.typmod)


@dataclass(frozen=True, slots=True)
class _Row:
    typtype: str
    basetype: int
    typmod: int
    element: int
    array: int
    namespace: str
    name: str


def describe_types(conn: Conn, oids: Iterable[int]) -> dict[int, ResolvedType]:
    """The domains and arrays of domains among ``oids``, resolved, and the enums and arrays of
    enums with their labels (Debezium's ``io.debezium.data.Enum`` lists them); other types are
    left out (their Type message says all there is)."""
    rows: dict[int, _Row] = {}

    def fetch(wanted: set[int]) -> None:
        missing = sorted(wanted - rows.keys())
        if not missing:
            return
        for oid, typtype, base, typmod, elem, array, nsp, name in conn.execute(
            "SELECT t.oid::int, t.typtype::text, t.typbasetype::int, t.typtypmod, "
            "CASE WHEN t.typtype <> 'd' AND t.typcategory = 'A' THEN t.typelem::int ELSE 0 END, "
            "t.typarray::int, n.nspname, t.typname FROM pg_type t "
            "JOIN pg_namespace n ON n.oid = t.typnamespace WHERE t.oid = ANY(%s::oid[])",
            (missing,),
        ).fetchall():
            rows[int(str(oid))] = _Row(
                str(typtype),
                int(str(base)),
                int(str(typmod)),
                int(str(elem)),
                int(str(array)),
                "" if nsp == "pg_catalog" else str(nsp),
                str(name),
            )

    wanted = set(oids)
    fetch(wanted)
    fetch({rows[o].element for o in wanted if o in rows and rows[o].element})
    resolved: dict[int, ResolvedType] = {}
    enum: tuple[str, str, tuple[str, ...]] | None
    for oid in sorted(wanted):
        row = rows.get(oid)
        if row is None:
            continue
        start = row.element or oid
        if rows.get(start) is not None and rows[start].typtype == "e":
            enum = (rows[start].namespace, rows[start].name, _enum_labels(conn, start))
            resolved[oid] = ResolvedType(oid, row.namespace, row.name, -1, enum, domain=False)
            continue
        if rows.get(start) is None or rows[start].typtype != "d":
            continue
        base, typmod = _walk_domains(start, rows, fetch)
        over, enum = rows[base], None
        if over.typtype == "e":  # a domain over an enum
            enum = (over.namespace, over.name, _enum_labels(conn, base))
        if row.element:
            array = rows[base].array
            fetch({array})
            if array not in rows:
                continue
            base = array
        target = rows[base]
        resolved[oid] = ResolvedType(oid, target.namespace, target.name, typmod, enum)
    return resolved


def _enum_labels(conn: Conn, oid: int) -> tuple[str, ...]:
    return tuple(
        str(label)
        for (label,) in conn.execute(
            "SELECT enumlabel FROM pg_enum WHERE enumtypid = %s ORDER BY enumsortorder", (oid,)
        )
    )


def _walk_domains(
    oid: int, rows: dict[int, _Row], fetch: Callable[[set[int]], None]
) -> tuple[int, int]:
    """The type at the bottom of a domain chain and the modifier that applies: the first one
    set, from the outermost domain down (``getBaseTypeAndTypmod``)."""
    typmod = -1
    while rows[oid].typtype == "d":
        if typmod == -1:
            typmod = rows[oid].typmod
        oid = rows[oid].basetype
        fetch({oid})
    return oid, typmod


class TypeDescriber:
    """Describes the types the stream's Type messages name, each OID once per process, with a
    short connection per lookup (Type messages are rare: one per type and stream start)."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._described: dict[int, ResolvedType | None] = {}

    def describe(self, oid: int) -> ResolvedType | None:
        """The catalog's word on type ``oid``. A domain's is remembered (it never changes); an
        enum's labels are read again each time (``ALTER TYPE ... ADD VALUE``): Type messages
        are rare (one per type and stream start)."""
        if oid in self._described:
            return self._described[oid]
        try:
            with psycopg.connect(
                self.dsn, autocommit=True, application_name="pgbridge-type-catalog"
            ) as conn:
                described = describe_types(conn, [oid]).get(oid)
        except psycopg.Error as exc:
            # Not remembered: the next Type message for it (a reconnect's) asks again.
            logger.warning(
                "could not read type %d from the catalog (a domain's modifier or an enum's "
                "labels are then unknown until the next look): %s",
                oid,
                exc,
            )
            return None
        if described is None or described.enum is None:
            self._described[oid] = described
        return described
