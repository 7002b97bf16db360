"""A local Delta table's live files as its log states them, and a commit of actions to it.

Why not delta-rs: its Python API hands out the live files without their deletion vectors and
with their statistics parsed, and commits no ``add`` that carries a deletion vector; a commit
that marks rows of a file deleted must remove the file's entry exactly as the log holds it
(path and old vector) and add it again with the new vector (Delta's protocol, "Deletion
Vectors"). So this module replays the log itself: the classic checkpoint ``_last_checkpoint``
names (single or multi-part Parquet), then the JSON commits after it, read by version number
(``<version>.json`` exists or not: no listing of the log directory, which grows by a commit
per batch). A table with V2 checkpoints is refused (:class:`DeltaLogError`).

A commit is the next version's JSON file, created only if absent (a hard link of a written
temporary file: atomic on a local file system, and it fails when another writer took the
version first, which is Delta's optimistic concurrency on a local path).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

__all__ = [
    "CommitConflict",
    "DeltaLogError",
    "LogFiles",
    "commit_file",
    "file_key",
    "local_root",
    "read_log_files",
    "write_commit",
]


#: Actions a table's state must carry into a checkpoint that :class:`LogFiles` does not keep.
_FOREIGN_ACTIONS = ("domainMetadata", "sidecar", "checkpointMetadata")


class DeltaLogError(Exception):
    """A log this module does not read (a V2 checkpoint, a missing commit)."""


class CommitConflict(Exception):
    """Another writer committed the version first: nothing of this commit is in the table."""


def local_root(table_uri: str) -> Path:
    """The directory of a table at a plain path or ``file:`` URI."""
    parsed = urlparse(table_uri)
    return Path(unquote(parsed.path) if parsed.scheme == "file" else table_uri)


def commit_file(root: Path, version: int) -> Path:
    return root / "_delta_log" / f"{version:020d}.json"


def file_key(action: Mapping[str, Any]) -> tuple[str, str | None]:
    """What identifies a file action in the log: its path and its deletion vector's id (a
    commit that changes a file's vector removes the old pair and adds the new one)."""
    dv = action.get("deletionVector")
    if not dv:
        return action["path"], None
    offset = dv.get("offset")
    dv_id = dv["storageType"] + dv["pathOrInlineDv"] + (f"@{offset}" if offset is not None else "")
    return action["path"], dv_id


@dataclass
class LogFiles:
    """The live ``add`` actions of the table at ``root``, as of ``version``, keyed by
    :func:`file_key`; each application's last transaction version (``txn``); the newest
    ``metaData`` and ``protocol`` actions; whether a commit read since ``redescribed`` was
    last cleared changed either; and whether the log holds actions this state does not keep
    (``foreign``: domain metadata, sidecars), which a checkpoint must carry."""

    root: Path
    version: int
    adds: dict[tuple[str, str | None], dict[str, Any]] = field(default_factory=dict)
    txns: dict[str, int] = field(default_factory=dict)
    metadata: dict[str, Any] | None = None
    protocol: dict[str, Any] | None = None
    checkpoint: int | None = None  # the newest checkpoint's version, as this process knows it
    redescribed: bool = False
    foreign: bool = False

    def advance(self) -> LogFiles:
        """This state brought up to the table's newest version (the commits after it)."""
        version = self.version
        while True:
            path = commit_file(self.root, version + 1)
            try:
                text = path.read_text(encoding="utf-8")
            except FileNotFoundError:
                break
            self.apply(json.loads(line) for line in text.splitlines() if line.strip())
            version += 1
        self.version = version
        return self

    def apply(self, actions: Iterable[Mapping[str, Any]]) -> None:
        """One commit's actions: files reconciled by :func:`file_key` (Delta's rule),
        transactions, and a change of description noted."""
        for action in actions:
            if "add" in action:
                add = action["add"]
                self.adds[file_key(add)] = add
            elif "remove" in action:
                self.adds.pop(file_key(action["remove"]), None)
            elif "txn" in action:
                txn = action["txn"]
                self.txns[str(txn["appId"])] = int(txn["version"])
            elif "metaData" in action:
                self.metadata = dict(action["metaData"])
                self.redescribed = True
            elif "protocol" in action:
                self.protocol = dict(action["protocol"])
                self.redescribed = True
            elif any(kind in action for kind in _FOREIGN_ACTIONS):
                self.foreign = True


def read_log_files(root: Path) -> LogFiles:
    """The table's live files at its newest version: its last checkpoint, then the commits
    after it."""
    log = root / "_delta_log"
    state = LogFiles(root, -1)
    try:
        last = json.loads((log / "_last_checkpoint").read_text(encoding="utf-8"))
    except FileNotFoundError:
        last = None
    if last is not None:
        version, parts = int(last["version"]), last.get("parts")
        if "v2Checkpoint" in last:
            raise DeltaLogError(f"{root}: a V2 checkpoint")
        if parts:
            files = [log / f"{version:020d}.checkpoint.{i:010d}.{int(parts):010d}.parquet"
                     for i in range(1, int(parts) + 1)]  # fmt: skip
        else:
            files = [log / f"{version:020d}.checkpoint.parquet"]
        for file in files:
            if not file.exists():
                raise DeltaLogError(f"{root}: checkpoint {file.name} is not a classic one")
            state.apply(_checkpoint_actions(file))
        state.version = state.checkpoint = version
    elif not commit_file(root, 0).exists():
        raise DeltaLogError(f"{root}: no commit 0 and no checkpoint")
    return state.advance()


def _pairs_as_dict(value: Any) -> Any:
    """A Parquet map read as a list of pairs, as a dict (anything else as it is)."""
    return dict(value) if isinstance(value, list) else value


def _checkpoint_actions(file: Path) -> list[dict[str, Any]]:
    """A checkpoint part's actions this state keeps (and a mark for those it does not)."""
    import pyarrow.parquet as pq

    kinds = ("add", "txn", "metaData", "protocol", *_FOREIGN_ACTIONS)
    present = set(pq.read_schema(file).names)  # a writer may leave out an action never taken
    read = pq.read_table(file, columns=[c for c in kinds if c in present])
    actions: list[dict[str, Any]] = []
    for kind in ("txn", "protocol", *_FOREIGN_ACTIONS):
        if kind in present:
            actions += [{kind: a} for a in read.column(kind).to_pylist() if a is not None]
    if "metaData" in present:
        for meta in read.column("metaData").to_pylist():
            if meta is None:
                continue
            meta = {k: v for k, v in meta.items() if v is not None}
            meta["configuration"] = _pairs_as_dict(meta.get("configuration") or {})
            form = dict(meta.get("format") or {"provider": "parquet"})
            form["options"] = _pairs_as_dict(form.get("options") or {})
            meta["format"] = form
            actions.append({"metaData": meta})
    if "add" not in present:
        return actions
    for add in read.column("add").to_pylist():
        if add is None:
            continue
        live = {k: v for k, v in add.items() if v is not None and k != "stats_parsed"}
        if isinstance(live.get("partitionValues"), list):  # a Parquet map read as pairs
            live["partitionValues"] = dict(live["partitionValues"])
        if isinstance(live.get("tags"), list):
            live["tags"] = dict(live["tags"])
        actions.append({"add": live})
    return actions


def write_commit(root: Path, version: int, actions: Iterable[Mapping[str, Any]]) -> None:
    """Create commit ``version`` of the table with ``actions``, or raise
    :class:`CommitConflict` when that version exists already (nothing is written then)."""
    final = commit_file(root, version)
    temporary = final.parent / f".{final.name}.{uuid.uuid4()}.tmp"
    body = "".join(json.dumps(a, separators=(",", ":")) + "\n" for a in actions)
    # Not fsynced, as neither Delta-Spark nor delta-rs syncs a commit on a local path: the data
    # files a commit names are not synced either, and a process's crash leaves both in the
    # page cache. Syncing cost 0.6 ms a commit alone and a sixth of the driver's writer
    # threads over 200 tables (journal flushes queue behind each other).
    with open(temporary, "x", encoding="utf-8") as f:
        f.write(body)
    try:
        os.link(temporary, final)
    except FileExistsError:
        raise CommitConflict(f"{root}: version {version} was committed by another writer") from None
    finally:
        temporary.unlink()
