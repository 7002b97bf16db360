"""Tables that appear while the bridge runs.

Every ``publication.refresh.interval.ms`` (on the pipeline's thread, between messages): a
``filtered`` publication is reconciled with the include and exclude lists, as at start, so a
table created later that the lists match is published from then on without a restart; then
the publication's tables are compared with those seen at the previous look, and the new ones
are handed to ``on_new`` (with ``snapshot.new.tables = parallel``: an incremental snapshot of
each, for the rows it had before it was published; see :mod:`bridge.snapshot.incremental`).

The first look after a start is the baseline: a table created while the bridge was stopped is
published (filtered mode reconciles at start) but not snapshotted by itself; signal it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import psycopg

from bridge.source import slots
from bridge.source.config import PublicationConfig, PublicationMode
from bridge.source.publication_tables import published_tables

logger = logging.getLogger(__name__)

__all__ = ["TableWatch"]


class TableWatch:
    def __init__(
        self,
        dsn: str,
        publication: PublicationConfig,
        interval_s: float,
        on_new: Callable[[list[tuple[str, int]]], None] | None,
    ) -> None:
        self.dsn = dsn
        self.publication = publication
        self.interval_s = interval_s
        self.on_new = on_new
        self._known: set[str] | None = None
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
        known, self._known = self._known, set(published)
        if known is None:
            return
        new = sorted(set(published) - known)
        if new:
            logger.info("new table(s) in publication %s: %s", self.publication.name, new)
            if self.on_new is not None:
                self.on_new([(t, published[t]) for t in new])
