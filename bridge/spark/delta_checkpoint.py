"""A classic Delta checkpoint written from the log state this process keeps
(bridge.spark.delta_log.LogFiles), and the removal of expired log entries.

Why not delta-rs's: on a local path both list the table's whole ``_delta_log`` directory
(object_store lists a local directory whole), which keeps every commit for
``delta.logRetentionDuration`` (30 days): measured at 30,000 commits, bringing delta-rs to the
version 30 ms, its checkpoint 33 ms and its cleanup 280 ms, where the commit they follow costs
2 ms (bench/log_length_bench.py). The state holds what a checkpoint is made of (the protocol,
the metadata, the live files, the transactions), so the checkpoint is one Parquet file written
from memory, in the schema delta-rs and Delta-Spark write (``checkpoint_schema``): the same
cost at any log length.

Not written here (the caller uses delta-rs's): a table whose log holds actions the state does
not keep (``domainMetadata``, ``sidecar``: :attr:`LogFiles.foreign`). Tombstones (``remove``)
are not carried: Delta keeps them in checkpoints for VACUUM's sake, whose Spark and delta-rs
implementations find unreferenced files by listing the table.

Delta-Spark writes through Hadoop's local file system, which keeps a checksum beside each file
it writes (``.<name>.crc``) and checks every read against it. A file replaced here
(``_last_checkpoint``, which both write) loses that checksum first, never keeps a stale one: a
stale checksum made every Spark reader of the table retry for seconds, log the pointer
"corrupted" and list the log instead. Entries removed here take their checksums along.

The cleanup lists the log's names once (no stat but for the oldest entries, in version
order, which is time order) and removes what Delta's own metadata cleanup removes: entries of
versions before the newest checkpoint that is older than the retention, themselves older
than it.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bridge.spark.delta_log import LogFiles

__all__ = [
    "checkpoint_schema",
    "drop_hadoop_checksum",
    "remove_expired",
    "retention_seconds",
    "write_checkpoint",
]

_LOG_ENTRY = re.compile(r"^(\d{20})\.(json|crc|checkpoint\.parquet|checkpoint\.\d+\.\d+\.parquet)$")
_INTERVAL = re.compile(r"^\s*interval\s+(\d+)\s+(second|minute|hour|day|week)s?\s*$", re.I)
_UNIT_SECONDS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 604800}


def checkpoint_schema() -> Any:
    """The checkpoint's columns: one struct per action kind, as delta-rs 1.6 writes them."""
    import pyarrow as pa

    def strings() -> Any:
        return pa.map_(pa.string(), pa.string())

    vector = pa.struct([("storageType", pa.string()), ("pathOrInlineDv", pa.string()),
                        ("offset", pa.int32()), ("sizeInBytes", pa.int32()),
                        ("cardinality", pa.int64())])  # fmt: skip
    add = pa.struct([("path", pa.string()), ("partitionValues", strings()),
                     ("size", pa.int64()), ("modificationTime", pa.int64()),
                     ("dataChange", pa.bool_()), ("stats", pa.string()), ("tags", strings()),
                     ("deletionVector", vector), ("baseRowId", pa.int64()),
                     ("defaultRowCommitVersion", pa.int64()),
                     ("clusteringProvider", pa.string())])  # fmt: skip
    remove = pa.struct([("path", pa.string()), ("deletionTimestamp", pa.int64()),
                        ("dataChange", pa.bool_()), ("extendedFileMetadata", pa.bool_()),
                        ("partitionValues", strings()), ("size", pa.int64()),
                        ("stats", pa.string()), ("tags", strings()),
                        ("deletionVector", vector), ("baseRowId", pa.int64()),
                        ("defaultRowCommitVersion", pa.int64())])  # fmt: skip
    metadata = pa.struct([("id", pa.string()), ("name", pa.string()),
                          ("description", pa.string()),
                          ("format", pa.struct([("provider", pa.string()),
                                                ("options", strings())])),
                          ("schemaString", pa.string()),
                          ("partitionColumns", pa.list_(pa.string())),
                          ("createdTime", pa.int64()), ("configuration", strings())])  # fmt: skip
    protocol = pa.struct([("minReaderVersion", pa.int32()), ("minWriterVersion", pa.int32()),
                          ("readerFeatures", pa.list_(pa.string())),
                          ("writerFeatures", pa.list_(pa.string()))])  # fmt: skip
    txn = pa.struct([("appId", pa.string()), ("version", pa.int64()),
                     ("lastUpdated", pa.int64())])  # fmt: skip
    return pa.schema([("add", add), ("remove", remove), ("metaData", metadata),
                      ("protocol", protocol), ("txn", txn)])  # fmt: skip


def _as_map(value: Mapping[str, Any] | None) -> list[tuple[str, Any]] | None:
    return None if value is None else [(str(k), v) for k, v in value.items()]


def _metadata_row(metadata: Mapping[str, Any]) -> dict[str, Any]:
    form = metadata.get("format") or {"provider": "parquet", "options": {}}
    return {
        **{
            k: metadata.get(k) for k in ("id", "name", "description", "schemaString", "createdTime")
        },
        "format": {
            "provider": form.get("provider", "parquet"),
            "options": _as_map(form.get("options") or {}),
        },
        "partitionColumns": list(metadata.get("partitionColumns") or []),
        "configuration": _as_map(metadata.get("configuration") or {}),
    }


def _add_row(add: Mapping[str, Any]) -> dict[str, Any]:
    row = dict(add)
    row["partitionValues"] = _as_map(add.get("partitionValues") or {})
    row["tags"] = _as_map(add.get("tags"))
    return row


def write_checkpoint(log: LogFiles) -> int:
    """Write the checkpoint of ``log.version`` and point ``_last_checkpoint`` at it; the
    number of actions written. Both files appear whole (written aside, then renamed)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if log.foreign or log.metadata is None or log.protocol is None:
        raise ValueError(f"{log.root}: the log holds actions this checkpoint would not carry")
    schema = checkpoint_schema()
    rows: list[dict[str, Any]] = [
        {"protocol": dict(log.protocol)},
        {"metaData": _metadata_row(log.metadata)},
        *(
            {"txn": {"appId": app, "version": version, "lastUpdated": None}}
            for app, version in log.txns.items()
        ),
        *({"add": _add_row(add)} for add in log.adds.values()),
    ]
    table = pa.Table.from_pylist(rows, schema=schema)
    directory = log.root / "_delta_log"
    final = directory / f"{log.version:020d}.checkpoint.parquet"
    aside = directory / f".{final.name}.{uuid.uuid4()}.tmp"
    pq.write_table(table, aside, compression="snappy")
    size = aside.stat().st_size
    drop_hadoop_checksum(final)  # Spark's, if it checkpointed this version too
    os.replace(aside, final)
    pointer = {"version": log.version, "size": table.num_rows, "sizeInBytes": size,
               "numOfAddFiles": len(log.adds)}  # fmt: skip
    _replace_text(directory / "_last_checkpoint", json.dumps(pointer))
    log.checkpoint = log.version
    return int(table.num_rows)


def _replace_text(path: Path, text: str) -> None:
    aside = path.parent / f".{path.name}.{uuid.uuid4()}.tmp"
    aside.write_text(text, encoding="utf-8")
    drop_hadoop_checksum(path)
    os.replace(aside, path)


def drop_hadoop_checksum(path: Path) -> None:
    """Remove the checksum Hadoop's local file system keeps beside ``path``, before ``path`` is
    replaced: without one, Hadoop reads the file unchecked; with the old one, never."""
    (path.parent / f".{path.name}.crc").unlink(missing_ok=True)


def retention_seconds(configuration: Mapping[str, str]) -> float | None:
    """``delta.logRetentionDuration`` in seconds (30 days when unset), or None when it is in
    a form this module does not read (then delta-rs cleans up)."""
    text = configuration.get("delta.logRetentionDuration", "interval 30 days")
    match = _INTERVAL.match(str(text))
    if match is None:
        return None
    return int(match.group(1)) * _UNIT_SECONDS[match.group(2).lower()]


def remove_expired(root: Path, retention: float, now: float | None = None) -> int:
    """Remove the log entries Delta's metadata cleanup removes: those of versions before the
    newest checkpoint older than ``retention`` seconds, themselves older than it. The number
    of files removed."""
    cutoff = (time.time() if now is None else now) - retention
    directory = root / "_delta_log"
    by_version: dict[int, list[str]] = {}
    checkpoints: set[int] = set()
    with os.scandir(directory) as entries:
        for entry in entries:
            match = _LOG_ENTRY.match(entry.name)
            if match is None:
                continue
            version = int(match.group(1))
            by_version.setdefault(version, []).append(entry.name)
            if match.group(2).startswith("checkpoint"):
                checkpoints.add(version)
    # Versions are written in time order: the expired ones are a prefix of them.
    expired_below = None
    for version in sorted(checkpoints):
        if _mtime(directory, by_version[version]) > cutoff:
            break
        expired_below = version
    if expired_below is None:
        return 0
    removed = 0
    for version in sorted(v for v in by_version if v < expired_below):
        names = by_version[version]
        if _mtime(directory, names) > cutoff:
            break
        for name in names:
            try:
                (directory / name).unlink()
                removed += 1
            except FileNotFoundError:
                pass
            drop_hadoop_checksum(directory / name)
    return removed


def _mtime(directory: Path, names: list[str]) -> float:
    """The newest modification time of a version's entries."""
    times = []
    for name in names:
        try:
            times.append((directory / name).stat().st_mtime)
        except FileNotFoundError:
            continue
    return max(times, default=0.0)
