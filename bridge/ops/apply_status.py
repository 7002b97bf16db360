"""How far the Spark apply job is behind Kafka, per table, read from its streaming checkpoint.

The job's position is what its last *committed* micro-batch read to: Spark writes a batch's
Kafka offsets to ``<checkpoint>/offsets/<batch>`` before running it and ``commits/<batch>``
once it is applied (for this job: every table's MERGE done), so the offsets of the highest
committed batch are what is applied. A topic the checkpoint does not name yet (a table created
since) is behind by all its records. Reads files only, with or without the job running; the
checkpoint must be on a file system this machine mounts (elsewhere, the job's own
``pgbridge_apply_topic_lag_records`` metric says the same).

Which tables the job holds (bridge.spark.set_aside: a batch of theirs failed, their records
wait in order in the dead-letter table) is read from its dead-letter table, with delta-rs
(``pgbridge_apply_tables_held`` is the job's own gauge).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bridge.errors import PgBridgeError

__all__ = [
    "ApplyCheckpointError",
    "ApplyDeadLetterError",
    "ApplyPosition",
    "HeldTable",
    "apply_lag",
    "read_apply_position",
    "read_held_tables",
]

#: Kafka offsets by topic, then partition.
Offsets = dict[str, dict[int, int]]


class ApplyCheckpointError(PgBridgeError):
    """The path is not a readable Spark streaming checkpoint."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"apply checkpoint {path}: {reason}")
        self.path = path


class ApplyDeadLetterError(PgBridgeError):
    """The path is not the apply job's dead-letter table (a Delta table)."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"apply dead-letter table {path}: {reason}")
        self.path = path


@dataclass(frozen=True, slots=True)
class ApplyPosition:
    """The last committed batch (None: none yet), when it started, and what it read to."""

    batch: int | None
    batch_time_ms: int | None = None
    offsets: Offsets = field(default_factory=dict)


def _batch_ids(folder: Path) -> list[int]:
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit())


def read_apply_position(checkpoint: str) -> ApplyPosition:
    """The applied position recorded in the streaming checkpoint at ``checkpoint``."""
    if "://" in checkpoint and not checkpoint.startswith("file:"):
        raise ApplyCheckpointError(
            checkpoint,
            "not on a local file system; the running job's pgbridge_apply_topic_lag_records "
            "metric has the same figures",
        )
    root = Path(checkpoint.removeprefix("file://").removeprefix("file:"))
    offsets_dir, commits_dir = root / "offsets", root / "commits"
    if not offsets_dir.is_dir() or not commits_dir.is_dir():
        raise ApplyCheckpointError(checkpoint, "no offsets/ and commits/: not a Spark checkpoint")
    committed = _batch_ids(commits_dir)
    if not committed:
        return ApplyPosition(None)
    batch = committed[-1]
    try:
        lines = (offsets_dir / str(batch)).read_text().splitlines()
        metadata = json.loads(lines[1])
        # One line per source: its offset as JSON, or "-" for a source without one yet.
        sources = [json.loads(line) for line in lines[2:] if line.strip() not in ("", "-")]
    except (OSError, IndexError, ValueError) as exc:
        raise ApplyCheckpointError(checkpoint, f"offsets of batch {batch}: {exc}") from exc
    offsets: Offsets = {}
    for source in sources:
        if isinstance(source, dict):  # Kafka's form: {topic: {partition: offset}}
            for topic, partitions in source.items():
                if isinstance(partitions, dict):
                    offsets[topic] = {int(p): int(o) for p, o in partitions.items()}
    return ApplyPosition(batch, _int_or_none(metadata.get("batchTimestampMs")), offsets)


def _int_or_none(value: Any) -> int | None:
    return int(value) if isinstance(value, int | str) and str(value).isdigit() else None


def apply_lag(
    position: ApplyPosition, watermarks: Mapping[str, Mapping[int, tuple[int, int]]]
) -> dict[str, int]:
    """Per topic, the records in Kafka beyond what the job applied: per partition, its end
    offset minus the applied offset (or its earliest offset, where the job has not read it or
    retention removed what it had read to), summed over the topic's partitions."""
    lag: dict[str, int] = {}
    for topic, partitions in watermarks.items():
        applied = position.offsets.get(topic, {})
        lag[topic] = sum(
            max(0, high - max(low, applied.get(partition, low)))
            for partition, (low, high) in partitions.items()
        )
    return lag


@dataclass(frozen=True, slots=True)
class HeldTable:
    """A table the apply job holds: the first batch that set it aside, its records waiting."""

    since_batch: int
    records: int


def read_held_tables(dead_letter: str) -> dict[str, HeldTable]:
    """The tables the apply job holds, by topic, from its dead-letter table (none without
    one). Raises :class:`ApplyDeadLetterError` for a path that is not a Delta table."""
    from deltalake.exceptions import TableNotFoundError

    from bridge.spark.errors import first_line
    from bridge.spark.set_aside import held_per_topic, read_set_aside

    if not Path(dead_letter).exists() and "://" not in dead_letter:
        return {}  # no record was ever dead-lettered
    try:
        rows = read_set_aside(dead_letter)
    except TableNotFoundError:
        raise ApplyDeadLetterError(dead_letter, "not a Delta table") from None
    except Exception as exc:  # delta-rs cannot reach it from here (credentials, a scheme)
        raise ApplyDeadLetterError(dead_letter, f"cannot be read here: {first_line(exc)}") from exc
    return {
        topic: HeldTable(since, records) for topic, (since, records) in held_per_topic(rows).items()
    }
