"""The snapshot's durable progress: a small JSON file, replaced atomically.

It records, for one slot: the consistent point the rows are positioned at, the attempt number
(``run``, see :func:`bridge.snapshot.plan.position`), and per table its plan (method, key
columns, chunk boundaries) and the chunks whose every record Kafka acknowledged. A chunk is
added only after its last record's delivery callback ran, so nothing is recorded that is not
in Kafka; a crash loses at most the chunks being copied. Writes go to a temporary file in the
same directory, are fsynced, renamed over the old file, and the directory is fsynced: the file
is always either the old or the new state, never a torn one.

Each table moves through explicit states, derived from the record: ``pending`` (no chunk
done), ``copying`` (some), ``copied`` (all); the whole snapshot is ``copying`` until every table
is copied, then ``done``, after which streaming starts from the consistent point.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal, TypeVar

from bridge.errors import PgBridgeError
from bridge.snapshot.plan import Chunk, TablePlan

logger = logging.getLogger(__name__)

__all__ = [
    "SnapshotState",
    "StateFileError",
    "TableProgress",
    "load_state",
    "read_json_state",
    "save_state",
    "write_json_atomically",
]

FORMAT_VERSION: Final = 1
_State = TypeVar("_State")
Status = Literal["copying", "done"]


class StateFileError(PgBridgeError):
    """The state file cannot be read or written; ``path`` names it."""

    def __init__(self, path: Path, message: str) -> None:
        super().__init__(f"snapshot state file {path}: {message}")
        self.path = path


@dataclass(slots=True)
class TableProgress:
    """One table's plan and what of it is delivered."""

    plan: TablePlan
    done: set[int] = field(default_factory=set)
    rows_done: int = 0
    bytes_done: int = 0
    started: bool = False  # a row of it was handed to Kafka (possibly not acknowledged)

    @property
    def state(self) -> str:
        if not self.done:
            return "pending"
        return "copied" if len(self.done) == len(self.plan.chunks) else "copying"

    @property
    def complete(self) -> bool:
        return len(self.done) == len(self.plan.chunks)

    def remaining(self) -> list[Chunk]:
        return [c for c in self.plan.chunks if c.index not in self.done]


@dataclass(slots=True)
class SnapshotState:
    slot: str
    consistent_point: str  # an LSN as text
    run: int = 0
    status: Status = "copying"
    tables: list[TableProgress] = field(default_factory=list)
    #: False between the slot's creation and the first plan: a restart then plans every table
    #: (the slot exists, so without this record its rows would never be copied).
    planned: bool = True
    #: This snapshot's identity (kept through resumes, new for a fresh or repeated one): the
    #: progress records of its Kafka transactions name it (bridge.snapshot.chunk_transactions).
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    #: Exactly once: how many transactional producers (lanes) the snapshot of this slot ever
    #: started; the next run starts at least as many, fencing whatever they left open.
    lanes: int = 0

    def table(self, name: str) -> TableProgress | None:
        return next((t for t in self.tables if t.plan.table == name), None)

    def as_json(self) -> dict[str, Any]:
        return {
            "version": FORMAT_VERSION,
            "slot": self.slot,
            "consistent_point": self.consistent_point,
            "run": self.run,
            "status": self.status,
            "planned": self.planned,
            "id": self.id,
            "lanes": self.lanes,
            "tables": [_table_json(t) for t in self.tables],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SnapshotState:
        if data.get("version") != FORMAT_VERSION:
            raise ValueError(f"unknown format version {data.get('version')!r}")
        status = data["status"]
        if status not in ("copying", "done"):
            raise ValueError(f"unknown status {status!r}")
        return cls(
            slot=str(data["slot"]),
            consistent_point=str(data["consistent_point"]),
            run=int(data["run"]),
            status=status,
            tables=[_table_from_json(t) for t in data["tables"]],
            planned=bool(data.get("planned", True)),
            # Files from before snapshot ids: no Kafka transaction names one.
            id=str(data.get("id") or uuid.uuid4().hex),
            lanes=int(data.get("lanes", 0)),
        )


def _bound(value: tuple[str, ...] | None) -> list[str] | None:
    return None if value is None else list(value)


def _table_json(t: TableProgress) -> dict[str, Any]:
    p = t.plan
    return {
        "table": p.table,
        "schema": p.schema,
        "name": p.name,
        "oid": p.oid,
        "method": p.method,
        "columns": list(p.columns),
        "order_columns": list(p.order_columns),
        "order_types": list(p.order_types),
        "row_filter": p.row_filter,
        "estimated_rows": p.estimated_rows,
        "keyed": p.keyed,
        "relfilenode": p.relfilenode,
        "source_query": p.source_query,
        "chunks": [[_bound(c.lower), _bound(c.upper)] for c in p.chunks],
        "done": sorted(t.done),
        "rows_done": t.rows_done,
        "bytes_done": t.bytes_done,
        "started": t.started,
    }


def _table_from_json(d: dict[str, Any]) -> TableProgress:
    def bound(value: list[str] | None) -> tuple[str, ...] | None:
        return None if value is None else tuple(str(v) for v in value)

    method = d["method"]
    if method not in ("key", "ctid", "whole"):
        raise ValueError(f"unknown method {method!r}")
    plan = TablePlan(
        table=str(d["table"]),
        schema=str(d["schema"]),
        name=str(d["name"]),
        oid=int(d["oid"]),
        method=method,
        columns=tuple(d["columns"]),
        chunks=tuple(Chunk(i, bound(lo), bound(hi)) for i, (lo, hi) in enumerate(d["chunks"])),
        order_columns=tuple(d["order_columns"]),
        order_types=tuple(d["order_types"]),
        row_filter=d["row_filter"],
        estimated_rows=int(d["estimated_rows"]),
        keyed=bool(d["keyed"]),
        relfilenode=int(d["relfilenode"]),
        source_query=d.get("source_query"),
    )
    done = {int(i) for i in d["done"]}
    if not done <= {c.index for c in plan.chunks}:
        raise ValueError(f"{plan.table}: done chunks {sorted(done)} outside the plan")
    return TableProgress(
        plan, done, int(d["rows_done"]), int(d["bytes_done"]), bool(d.get("started", done))
    )


def load_state(path: Path) -> SnapshotState | None:
    """The recorded state, or ``None`` when there is no file."""
    return read_json_state(path, SnapshotState.from_json, "move it away to snapshot again")


def read_json_state(path: Path, parse: Callable[[Any], _State], remedy: str) -> _State | None:
    """``parse`` of the JSON in ``path``, ``None`` when there is no file; an unreadable or
    malformed file is a StateFileError saying ``remedy``."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StateFileError(path, str(exc)) from exc
    try:
        return parse(json.loads(text))
    except (ValueError, KeyError, TypeError) as exc:
        raise StateFileError(path, f"unreadable ({exc}); {remedy}") from exc


def save_state(path: Path, state: SnapshotState) -> None:
    """Replace the file atomically (see :func:`write_json_atomically`)."""
    write_json_atomically(path, state.as_json())


def write_json_atomically(path: Path, payload: Any) -> None:
    """Replace ``path`` with ``payload`` as JSON: temporary file, fsync, rename, fsync of the
    directory, so a reader after any crash finds the old or the new content, never a torn one."""
    directory = path.parent
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=directory)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(payload, fh, indent=1)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as exc:
        raise StateFileError(path, str(exc)) from exc
