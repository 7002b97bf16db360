"""A Delta table the driver writes, known from its log as this process reads it: its version,
live files and transactions advance by reading the next commit files by number, never by
listing the log directory.

Why: on a local path delta-rs lists the table's whole ``_delta_log`` directory whenever it
brings a table up to date or commits (object_store lists a local directory whole, with no
start offset), and the directory keeps every commit for ``delta.logRetentionDuration``, 30
days by default: at the one-second trigger, tens of thousands of files a day per busy table.
Measured (bench/log_length_bench.py), delta-rs's append of 10 rows cost 6 ms at 100 commits and
74 ms at 30,000; over 200 tables that is a batch's whole time. The driver's own writes
(bridge.spark.driver_commit) commit the next version's file themselves and read it back here,
which costs the same at any log length.

delta-rs stays the table's reader for what this module does not keep (schema, properties,
protocol: the ``metaData`` and ``protocol`` actions) and the engine of the operations it runs
(a scan, its MERGE, a checkpoint): :meth:`LoggedTable.synced` brings it to this version first,
which lists the log once, for those only. A commit that changes the schema, properties or
protocol brings it up to date at once (:meth:`LoggedTable.update_incremental`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from bridge.spark.delta_log import LogFiles, local_root, read_log_files

__all__ = ["LoggedTable"]


class LoggedTable:
    """delta-rs's table at ``table_uri`` and its log state (:class:`LogFiles`), kept at the
    same version: what the driver's writers take where they took a delta-rs ``DeltaTable``."""

    def __init__(self, delta: Any) -> None:
        self.delta = delta
        self.log: LogFiles = read_log_files(local_root(delta.table_uri))
        self.log.redescribed = False
        if self.log.version != delta.version():  # a commit landed between the two reads
            delta.load_as_version(self.log.version)
        # What the writers derive from the table's description (schema, properties, protocol)
        # at every write, kept until a commit changes it: a write asked delta-rs for the schema
        # as Arrow and as JSON several times (4% of the writer threads over 200 tables).
        self._described: dict[str, Any] = {}

    @classmethod
    def open(cls, path: str) -> LoggedTable:
        from deltalake import DeltaTable

        return cls(DeltaTable(path))

    @property
    def table_uri(self) -> str:
        return str(self.delta.table_uri)

    def version(self) -> int:
        return self.log.version

    def metadata(self) -> Any:
        return self.delta.metadata()

    def schema(self) -> Any:
        return self.delta.schema()

    def protocol(self) -> Any:
        return self.delta.protocol()

    def described(self, name: str, derive: Callable[[LoggedTable], Any]) -> Any:
        """``derive(self)``, computed once per description of the table (its schema,
        properties and protocol) and kept under ``name``."""
        if name not in self._described:
            self._described[name] = derive(self)
        return self._described[name]

    def arrow_schema(self) -> Any:
        """The table's schema as pyarrow's."""
        import pyarrow as pa

        return self.described("arrow", lambda t: pa.schema(t.delta.schema().to_arrow()))

    def schema_fields(self) -> list[dict[str, Any]]:
        """The table's columns as Delta's schema JSON states them (names, types, metadata)."""
        return self.described(  # type: ignore[no-any-return]
            "fields", lambda t: list(json.loads(t.delta.schema().to_json())["fields"])
        )

    def transaction_version(self, app_id: str) -> int | None:
        """The last version ``app_id`` committed (Delta's ``txn``), or None."""
        return self.log.txns.get(app_id)

    def file_sizes(self) -> list[int]:
        """The sizes of the live files."""
        return [int(add.get("size") or 0) for add in self.log.adds.values()]

    def update_incremental(self) -> None:
        """This table brought up to the newest version of its log: the commits after this
        one, read by number; delta-rs too where one of them changed the table's description."""
        self.log.advance()
        if self.log.redescribed:
            self.delta.load_as_version(self.log.version)
            self.log.redescribed = False
            self._described.clear()

    def synced(self) -> Any:
        """delta-rs's table at this version (listing the log when it is behind), for an
        operation of its own."""
        if self.delta.version() != self.log.version:
            self.delta.load_as_version(self.log.version)
        return self.delta

    def scan(self) -> Any:
        return self.synced().scan()

    def merge(self, *args: Any, **kwargs: Any) -> Any:
        """delta-rs's MERGE builder; the caller reads its commit back with
        :meth:`update_incremental`."""
        return self.synced().merge(*args, **kwargs)

    def history(self, limit: int | None = None) -> Any:
        return self.synced().history(limit)

    def create_checkpoint(self) -> None:
        self.synced().create_checkpoint()

    def cleanup_metadata(self) -> None:
        self.synced().cleanup_metadata()
