"""What the driver's delta-rs writers share: their refusal, rows in a table's schema, and
their commits' checkpoints."""

from __future__ import annotations

import logging
import time
import zlib
from typing import Any

from bridge.spark.delta_checkpoint import (
    drop_hadoop_checksum,
    remove_expired,
    retention_seconds,
    write_checkpoint,
)
from bridge.spark.logged_table import LoggedTable

__all__ = ["DriverWriteRefused", "checkpoint_due", "checkpoint_if_due", "conformed",
           "no_post_commit_hooks", "pa_schema"]  # fmt: skip

logger = logging.getLogger(__name__)


class DriverWriteRefused(Exception):
    """delta-rs could not write the batch and committed nothing: apply it with Spark."""


def pa_schema(table: LoggedTable) -> Any:
    """The table's schema as pyarrow's."""
    return table.arrow_schema()


def conformed(table: LoggedTable, rows: Any) -> Any:
    """``rows`` with exactly the table's columns and types (delta-rs appends only that)."""
    return conformed_to(pa_schema(table), rows)


def conformed_to(schema: Any, rows: Any) -> Any:
    """``rows`` (Arrow) with exactly ``schema``'s columns and types, a column they lack null."""
    import pyarrow as pa

    present = set(rows.column_names)  # (a property building a new list at each use)
    columns = [
        as_type(rows.column(field.name), field.type)
        if field.name in present
        else pa.nulls(rows.num_rows, field.type)
        for field in schema
    ]
    return pa.Table.from_arrays(columns, schema=schema)


def as_type(values: Any, arrow_type: Any) -> Any:
    """``values`` cast to ``arrow_type`` unless already of it: a cast is a pyarrow.compute call
    of its own, most of a small table's cost per column."""
    return values if values.type == arrow_type else values.cast(arrow_type)


def no_post_commit_hooks() -> Any:
    """delta-rs's post-commit hooks off, for a commit the caller follows with
    :func:`checkpoint_if_due`.

    Why: on a local path the hooks list the table's whole ``_delta_log`` directory at every
    commit (object_store lists a local directory whole, without a start offset), and the
    directory keeps every commit for ``delta.logRetentionDuration``, 30 days by default: tens
    of thousands of files a day at a one-second trigger. Measured (bench/log_length_bench.py),
    an append of 10 rows at 50,000 commits: 273 ms with the hooks, 80 ms without."""
    from deltalake import PostCommitHookProperties

    return PostCommitHookProperties(create_checkpoint=False, cleanup_expired_logs=False)


def checkpoint_due(table_uri: str, version: int, interval: int, last: int | None) -> bool:
    """``interval`` versions or more since the table's last checkpoint (``last``), whoever
    wrote the commits between (Spark's compactions and MERGEs checkpoint at versions of their
    own). A table without one takes its first at a version offset by its path: the job's
    tables advance a version a batch together, and checkpointing 200 of them in the same
    batch made that batch 2-3 s instead of 1.2 (measured, 1,000 changes/s over 200 tables)."""
    interval = max(interval, 1)
    if last is None:
        last = zlib.crc32(table_uri.encode()) % interval - interval
    return version - last >= interval


#: How often, at most, the driver removes a table's expired log entries (after a checkpoint):
#: what it removes is older than ``delta.logRetentionDuration`` (30 days by default), which an
#: hour more does not change, and finding it lists the log's directory.
CLEANUP_EVERY_SECONDS = 3600.0

#: table URI -> when (time.monotonic) this process last removed its expired log entries.
_cleaned_at: dict[str, float] = {}


def checkpoint_if_due(table: LoggedTable, version: int) -> None:
    """A checkpoint once ``delta.checkpointInterval`` versions (10 by default) passed since the
    last, as Spark and delta-rs write one after their own commits: readers replay at most
    about that many commits; then, as they do, but at most once per
    :data:`CLEANUP_EVERY_SECONDS`, the log entries older than ``delta.logRetentionDuration``
    removed. ``table`` is at ``version``, the caller's commit, on a local path.

    Both from the state the table keeps (bridge.spark.delta_checkpoint: the same cost at any
    length of the log); by delta-rs where the log holds actions that state does not keep."""
    configuration = table.metadata().configuration
    interval = int(configuration.get("delta.checkpointInterval", "10"))
    uri, log = table.table_uri, table.log
    # The last checkpoint as this process knows it (read when the table was opened, and
    # written since), not read from _last_checkpoint at every commit: one written by another
    # writer meanwhile only makes this one come earlier than it needed to.
    if not checkpoint_due(uri, version, interval, log.checkpoint):
        return
    try:
        own = not log.foreign and log.metadata is not None and log.protocol is not None
        if own and log.version == version:
            write_checkpoint(log)
        else:
            drop_hadoop_checksum(log.root / "_delta_log" / "_last_checkpoint")  # replaced next
            table.create_checkpoint()
            log.checkpoint = version
        last = _cleaned_at.get(uri)
        if last is None or time.monotonic() - last >= CLEANUP_EVERY_SECONDS:
            retention = retention_seconds(configuration)
            if retention is not None:
                remove_expired(log.root, retention)
            else:
                table.cleanup_metadata()
            _cleaned_at[uri] = time.monotonic()
    except Exception as exc:  # the commit stands; the next writer checkpoints
        logger.warning("%s: checkpoint at version %d failed: %s", uri, version, exc)
