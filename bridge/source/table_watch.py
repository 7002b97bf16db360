"""Tables that appear while the bridge runs.

Every ``publication.refresh.interval.ms`` (on the pipeline's thread, between messages): a
``filtered`` publication is reconciled with the include and exclude lists, as at start, so a
table created later that the lists match is published from then on without a restart; then
the publication's tables are compared with those seen at the previous look, and the new ones
are handed to ``on_new`` (with ``snapshot.new.tables = parallel``: an incremental snapshot of
each, for the rows it had before it was published; see :mod:`bridge.snapshot.incremental`).

Partitions are watched too, for a publication that publishes them as their root's changes:
pgoutput sends nothing when a partition holding rows is attached (its rows were not changed)
or detached (they were not deleted), so the root's topic would miss or keep them. A leaf
partition that appears under a root seen at the previous look is handed to ``on_partitions``
as attached, one that left its root but still exists as detached (a dropped one only gets a
warning: its rows are gone before anyone could read their keys).

The first look after a start is the baseline: a table created (or a partition attached or
detached) while the bridge was stopped is not snapshotted by itself; signal it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import psycopg

from bridge.source import slots
from bridge.source.config import PublicationConfig, PublicationMode
from bridge.source.publication_tables import published_tables

logger = logging.getLogger(__name__)

__all__ = ["PartitionChange", "TableWatch"]

#: Leaf partitions (level > 0) of the partitioned tables among the given OIDs, with their root.
_LEAVES = """
SELECT c.oid, n.nspname, c.relname, t.root
FROM unnest(%s::oid[]) AS t(root)
CROSS JOIN LATERAL pg_partition_tree(t.root) AS p
JOIN pg_class c ON c.oid = p.relid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE p.isleaf AND p.level > 0
"""


@dataclass(frozen=True, slots=True)
class PartitionChange:
    """A leaf partition that joined (``attached``) or left a published partitioned table."""

    root: str  # schema.table, as published
    partition: str  # schema.table, its name now
    oid: int
    attached: bool


class TableWatch:
    def __init__(
        self,
        dsn: str,
        publication: PublicationConfig,
        interval_s: float,
        on_new: Callable[[list[tuple[str, int]]], None] | None,
        on_partitions: Callable[[list[PartitionChange]], None] | None = None,
    ) -> None:
        self.dsn = dsn
        self.publication = publication
        self.interval_s = interval_s
        self.on_new = on_new
        self.on_partitions = on_partitions
        self._known: set[str] | None = None
        self._partitions: dict[int, tuple[str, str]] = {}  # leaf OID -> (root, leaf name)
        self._next = 0.0

    def tick(self) -> None:
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + self.interval_s
        try:
            self._look()
        except psycopg.Error as exc:
            logger.warning("looking for new tables failed (trying again later): %s", exc)

    def _look(self) -> None:
        # A connection per look (every few seconds): nothing held open between looks, nothing
        # left behind when the pipeline stops.
        with psycopg.connect(
            self.dsn, autocommit=True, application_name="pgbridge-table-watch"
        ) as conn:
            if self.publication.mode is PublicationMode.FILTERED:
                slots.ensure_publication(conn, self.publication)
            published = {t.table: t.oid for t in published_tables(conn, self.publication.name)}
            partitions = _leaves(conn, published)
            changes = (
                self._partition_changes(conn, set(published), partitions) if self._known else []
            )
        known, self._known = self._known, set(published)
        self._partitions = partitions
        if known is None:
            return
        new = sorted(set(published) - known)
        if new:
            logger.info("new table(s) in publication %s: %s", self.publication.name, new)
            if self.on_new is not None:
                self.on_new([(t, published[t]) for t in new])
        for change in changes:
            logger.info(
                "partition %s %s %s",
                change.partition,
                "attached to" if change.attached else "detached from",
                change.root,
            )
        if changes and self.on_partitions is not None:
            self.on_partitions(changes)

    def _partition_changes(
        self,
        conn: psycopg.Connection[tuple[object, ...]],
        published: set[str],
        now: dict[int, tuple[str, str]],
    ) -> list[PartitionChange]:
        """Leaves that joined a root published at the previous look (a new root's rows are a
        new table's), or left one still published."""
        before, known = self._partitions, self._known or set()
        changes = [
            PartitionChange(root, name, oid, attached=True)
            for oid, (root, name) in now.items()
            if oid not in before and root in known
        ]
        for oid, (root, name) in before.items():
            if oid in now or root not in published:
                continue
            row = conn.execute(
                "SELECT n.nspname, c.relname FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = %s",
                (oid,),
            ).fetchone()
            if row is None:
                logger.warning(
                    "partition %s of %s was dropped: its rows stay in %s's topic and Delta "
                    "table (pgoutput sends no delete for them; detach a partition before "
                    "dropping it to have them deleted)",
                    name,
                    root,
                    root,
                )
                continue
            changes.append(PartitionChange(root, f"{row[0]}.{row[1]}", oid, attached=False))
        return sorted(changes, key=lambda c: (c.root, c.partition))


def _leaves(
    conn: psycopg.Connection[tuple[object, ...]], published: dict[str, int]
) -> dict[int, tuple[str, str]]:
    """Each leaf partition of the published tables: OID -> (root, schema.table)."""
    roots = {oid: table for table, oid in published.items()}
    rows = conn.execute(_LEAVES, (list(roots),)).fetchall()
    return {
        int(str(oid)): (roots[int(str(root))], f"{schema}.{name}")
        for oid, schema, name, root in rows
    }
