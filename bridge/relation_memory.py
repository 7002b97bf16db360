"""What the bridge knew of each table's relation, kept across restarts.

DDL that rewrites a table's rows without sending them (``ALTER COLUMN … TYPE … USING``, a
volatile ``ADD COLUMN … DEFAULT``, ``RENAME TO``) is recognised by comparing a table's new
Relation message with the version the bridge knew (:mod:`bridge.events`). After a restart the
running bridge knows none, so DDL made while it was down came as the first Relation, with
nothing to compare: the consumers kept the rows' old values, silently. This file holds, per
relation OID, what the comparison needs of the last version the bridge *delivered*: a version
is written only once the slot is confirmed past the message that brought it, so a restart,
which replays from the confirmed position, compares each replayed Relation with the version
in force there (never with a newer one, which would look like a change back).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bridge.snapshot.state import write_json_atomically

__all__ = ["RelationMemory", "RememberedRelation", "relation_memory_file"]

logger = logging.getLogger(__name__)

_VERSION = 1
_UNREADABLE = "ignoring %s (%s): DDL made while the bridge was down is not seen"


def relation_memory_file(state_dir: Path, slot: str) -> Path:
    return state_dir.expanduser() / f"relations-{slot}.json"  # the default is under ~


@dataclass(frozen=True, slots=True)
class RememberedRelation:
    """A table version as the rewrite check compares it (bridge.events)."""

    namespace: str
    relation_name: str
    table: str  # schema.table, for messages
    topic: str
    columns: tuple[tuple[str, int], ...]  # (name, type OID), in the relation's order
    attnums: tuple[int | None, ...]  # the value schema's columns' numbers (None: unknown)

    def as_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "relation_name": self.relation_name,
            "table": self.table,
            "topic": self.topic,
            "columns": [list(c) for c in self.columns],
            "attnums": list(self.attnums),
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> RememberedRelation:
        return cls(
            str(raw["namespace"]),
            str(raw["relation_name"]),
            str(raw["table"]),
            str(raw["topic"]),
            tuple((str(name), int(oid)) for name, oid in raw["columns"]),
            tuple(None if n is None else int(n) for n in raw["attnums"]),
        )


class RelationMemory:
    """The versions delivered (:attr:`known`, from the file) and those seen since, each
    written once the slot is confirmed past it (:meth:`acknowledged`)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.known: dict[int, RememberedRelation] = _load(path)
        self._pending: list[tuple[int, int, RememberedRelation]] = []  # (lsn, oid, version)

    def saw(self, lsn: int, oid: int, version: RememberedRelation) -> None:
        """The stream (or the snapshot, at 0) brought ``version`` of relation ``oid`` at
        ``lsn``."""
        self._pending.append((lsn, oid, version))

    def acknowledged(self, flush_lsn: int) -> None:
        """The slot is confirmed to ``flush_lsn``: versions seen before it are written."""
        pending = self._pending
        if not pending or pending[0][0] > flush_lsn:
            return
        changed = False
        while pending and pending[0][0] <= flush_lsn:
            _, oid, version = pending.pop(0)
            if self.known.get(oid) != version:
                self.known[oid] = version
                changed = True
        if changed:
            try:
                write_json_atomically(self.path, _as_json(self.known))
            except OSError as exc:  # a check that helps, not a position: the stream goes on
                logger.warning("could not keep the tables' relations in %s: %s", self.path, exc)


def _as_json(known: dict[int, RememberedRelation]) -> dict[str, Any]:
    return {
        "version": _VERSION,
        "relations": {str(oid): version.as_json() for oid, version in sorted(known.items())},
    }


def _load(path: Path) -> dict[int, RememberedRelation]:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        logger.warning(
            "ignoring %s (%s): DDL made while the bridge was down is not seen", path, exc
        )
        return {}
    if not isinstance(raw, dict) or raw.get("version") != _VERSION:
        return {}
    try:
        return {
            int(oid): RememberedRelation.from_json(version)
            for oid, version in raw.get("relations", {}).items()
        }
    except (KeyError, TypeError, ValueError) as exc:
        logger.warning(
            "ignoring %s (%s): DDL made while the bridge was down is not seen", path, exc
        )
        return {}
