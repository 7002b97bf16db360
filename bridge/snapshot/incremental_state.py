"""The incremental snapshot's durable progress: which tables, how far each one is, paused or
not, and the signals already acted on; one JSON file per slot, replaced atomically.

A version of it is written only once the stream has been acknowledged past the transaction
that produced it (the chunk's closing watermark, or the signal): whatever the file says is in
Kafka. After a crash the next start resumes after the last recorded chunk; signals replayed
from the slot that the file lists as handled are not acted on twice. With exactly once, each
Kafka transaction also carries the newest version it covers (:func:`incremental_record`, in the
offsets topic), so that a crash between a commit and the file's write does not copy a chunk
again for a read_committed reader; a start takes the later of the two.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

from bridge.snapshot.state import read_json_state, write_json_atomically

__all__ = [
    "IncrementalState",
    "TableTask",
    "incremental_key",
    "incremental_record",
    "load_incremental",
    "parse_incremental_record",
    "save_incremental",
]

FORMAT_VERSION: Final = 1
#: Signal ids remembered as handled (a replay after a crash is at most this far behind).
HANDLED_MEMORY: Final = 1000


@dataclass(slots=True)
class TableTask:
    """One table of the snapshot: how far it is copied (``last_key``: the chunk key of the last
    row delivered, as text, ``None`` before the first chunk) and why it ended, if it did."""

    table: str  # schema.table
    condition: str | None = None  # additional-conditions' filter
    last_key: list[str] | None = None
    rows: int = 0
    chunks: int = 0
    status: str = "pending"  # pending | copying | done | skipped | stopped
    reason: str | None = None  # why skipped
    #: Read this partition's rows (schema.table) as ``table``'s: one attached while running,
    #: or, ``detached``, one that left it, whose rows are sent as deletes.
    partition: str | None = None
    detached: bool = False

    def describe(self) -> str:
        if self.partition is None:
            return f"incremental snapshot of {self.table}"
        if self.detached:
            return f"deleting the rows of detached partition {self.partition} from {self.table}"
        return f"copying the rows of attached partition {self.partition} into {self.table}"

    @property
    def finished(self) -> bool:
        return self.status in ("done", "skipped", "stopped")


@dataclass(slots=True)
class IncrementalState:
    slot: str
    tables: list[TableTask] = field(default_factory=list)
    paused: bool = False
    handled: list[str] = field(default_factory=list)
    #: The end LSN of the stream transaction this version was made in (0: unknown): of two
    #: versions (the file's, the one committed in Kafka with exactly once), the later wins.
    lsn: int = 0

    @property
    def current(self) -> TableTask | None:
        """The table being copied: the first not finished."""
        return next((t for t in self.tables if not t.finished), None)

    @property
    def running(self) -> bool:
        return self.current is not None

    def remember(self, signal_id: str) -> None:
        self.handled.append(signal_id)
        del self.handled[:-HANDLED_MEMORY]

    def as_json(self) -> dict[str, Any]:
        return {
            "version": FORMAT_VERSION,
            "slot": self.slot,
            "paused": self.paused,
            "tables": [asdict(t) for t in self.tables],
            "handled": list(self.handled),
            "lsn": self.lsn,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> IncrementalState:
        if data.get("version") != FORMAT_VERSION:
            raise ValueError(f"format version {data.get('version')!r}, expected {FORMAT_VERSION}")
        return cls(
            slot=str(data["slot"]),
            tables=[TableTask(**t) for t in data["tables"]],
            paused=bool(data["paused"]),
            handled=[str(h) for h in data["handled"]],
            lsn=int(data.get("lsn", 0)),
        )

    def copy(self) -> IncrementalState:
        return IncrementalState.from_json(json.loads(json.dumps(self.as_json())))


def load_incremental(path: Path) -> IncrementalState | None:
    return read_json_state(path, IncrementalState.from_json, "move it away to forget the snapshot")


def save_incremental(path: Path, state: IncrementalState) -> None:
    write_json_atomically(path, state.as_json())


def incremental_key(slot: str) -> bytes:
    # A slot name is [a-z0-9_]: no streaming offsets record (key: the slot) has a "/".
    return f"{slot}/incremental".encode()


def incremental_record(state: IncrementalState) -> tuple[bytes, bytes]:
    """The offsets topic's record of ``state`` (exactly once)."""
    return incremental_key(state.slot), json.dumps(state.as_json()).encode()


def parse_incremental_record(value: bytes) -> IncrementalState:
    return IncrementalState.from_json(json.loads(value))
