"""The snapshot's typed errors: each names the table (and chunk) it happened on."""

from __future__ import annotations

from bridge.errors import PgBridgeError

__all__ = [
    "SnapshotError",
    "SnapshotImportError",
    "SnapshotPermissionError",
    "SnapshotStateMismatchError",
    "SnapshotTableChangedError",
    "SnapshotTableError",
    "SnapshotTimeoutError",
]


class SnapshotError(PgBridgeError):
    """Base of the snapshot's errors. Nothing of the failing chunk was recorded as done: a
    restart copies it again."""


class SnapshotTableError(SnapshotError):
    """Something is wrong with one table; ``table`` names it (``schema.table``), ``chunk`` the
    chunk when one was being copied, ``sqlstate`` the server's code when it said."""

    def __init__(
        self, table: str, message: str, *, chunk: int | None = None, sqlstate: str | None = None
    ) -> None:
        where = f"table {table}" + (f" chunk {chunk}" if chunk is not None else "")
        super().__init__(f"snapshot of {where}: {message}")
        self.table = table
        self.chunk = chunk
        self.sqlstate = sqlstate


class SnapshotTableChangedError(SnapshotTableError):
    """The table was dropped, or rewritten (ALTER TABLE, TRUNCATE, VACUUM FULL, CLUSTER) after
    the snapshot was taken and before it could be locked: the snapshot cannot read it."""


class SnapshotPermissionError(SnapshotTableError):
    """The role may not read the table (42501)."""


class SnapshotTimeoutError(SnapshotTableError):
    """A statement was cancelled: ``statement_timeout`` or ``lock_timeout`` (57014, 55P03)."""


class SnapshotImportError(SnapshotError):
    """The exported snapshot could not be imported (its creating connection is gone, or it is
    too old): ``snapshot`` names it."""

    def __init__(self, snapshot: str, message: str) -> None:
        super().__init__(f"cannot import snapshot {snapshot}: {message}")
        self.snapshot = snapshot


class SnapshotStateMismatchError(SnapshotError):
    """The state file does not belong to the slot as it is now; ``path`` names the file."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"snapshot state file {path}: {message}")
        self.path = path
