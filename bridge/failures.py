"""The one failure policy: what happens to a change whose values cannot be converted.

Converters and encoders raise typed errors (:class:`~bridge.types.errors.ConversionError`,
:class:`~bridge.sink.avro_writer.AvroWriteError`); they never decide what to do about them. This
module does, once, from configuration, with Debezium's ``event.processing.failure.handling.mode``:

- ``fail``: the typed error stops the bridge; nothing past the last delivered transaction is
  confirmed, so the change is read again after a fix and a restart.
- ``warn`` (pgbridge's default): the change goes to the dead-letter topic instead of its table's
  topic, with a warning naming table, column, LSN and reason; the stream goes on.
- ``skip``: the same, logged at debug level only.

A dead-lettered change is never dropped silently: its record (:func:`dead_letter_record`) holds
the table, the operation, the position ``(commit_lsn, seq)``, the reason and the raw text of every
column as the server sent it, and it is acknowledged like any other record, so the slot does not
move past it until Kafka has it. ``warn`` is the default because one odd value should not stop
the capture of a whole database: while the bridge is stopped the slot retains WAL on the primary
until its disk fills, and every other table's consumers starve. Users who prefer stopping set
``fail``.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from bridge.pgoutput.messages import TupleData

logger = logging.getLogger(__name__)

FailureMode = Literal["fail", "warn", "skip"]
FAILURE_MODES: Final = ("fail", "warn", "skip")

#: Dead-lettered changes since start, by table: read by the metrics endpoint.
DEAD_LETTERED: Counter[str] = Counter()


@dataclass(frozen=True, slots=True)
class FailurePolicy:
    """``mode`` as above; ``dead_letter_topic`` receives the changes that ``warn``/``skip``
    set aside (one segment after the topic prefix, so it never looks like a table topic)."""

    mode: FailureMode = "warn"
    dead_letter_topic: str | None = None

    def __post_init__(self) -> None:
        if self.mode not in FAILURE_MODES:
            raise ValueError(f"failure mode {self.mode!r} is not one of {FAILURE_MODES}")
        if self.mode != "fail" and not self.dead_letter_topic:
            raise ValueError("a dead-letter topic is required unless the mode is 'fail'")

    @property
    def stops(self) -> bool:
        return self.mode == "fail"

    def report(self, table: str, where: str, error: Exception) -> None:
        """Log (per mode) and count one change set aside."""
        DEAD_LETTERED[table] += 1
        level = logging.WARNING if self.mode == "warn" else logging.DEBUG
        logger.log(
            level,
            "%s at %s: %s; sent to the dead-letter topic %s",
            table,
            where,
            error,
            self.dead_letter_topic,
        )


def raw_text(data: TupleData | None) -> list[str | None] | None:
    """The values of a TupleData as text: text-format values as sent, binary ones as
    ``\\x<hex>`` (bytea's escape), NULL as ``None``, an unchanged TOASTed value as Debezium's
    placeholder. Pure and total: it is what reaches the dead-letter topic when nothing else can
    be read."""
    if data is None:
        return None
    values: list[str | None] = []
    buffer, spans = data.buffer, data.spans
    for i, kind in enumerate(data.kinds):
        raw = bytes(buffer[spans[2 * i] : spans[2 * i + 1]])
        if kind == 0x74:  # 't'
            values.append(raw.decode("utf-8", errors="backslashreplace"))
        elif kind == 0x62:  # 'b'
            values.append("\\x" + raw.hex())
        elif kind == 0x75:  # 'u'
            values.append("__debezium_unavailable_value")
        else:
            values.append(None)
    return values


def _named(
    columns: tuple[str, ...],
    row: TupleData | Mapping[str, Any] | None,
    withheld: frozenset[str] = frozenset(),
) -> dict[str, Any] | None:
    """The row by column name, as text; the columns column controls withhold left out."""
    if row is None:
        return None
    if not isinstance(row, TupleData):  # converted values (an encoder refused them): as text
        return {
            name: None if value is None else str(value)
            for name, value in row.items()
            if name not in withheld
        }
    values = raw_text(row)
    assert values is not None
    if len(values) != len(columns):  # a malformed tuple: keep every value, by position
        if withheld:  # which are withheld cannot be told: none is shown
            return {}
        return {str(i): v for i, v in enumerate(values)}
    return {c: v for c, v in zip(columns, values, strict=True) if c not in withheld}


def dead_letter_record(
    *,
    table: str,
    topic: str,
    op: str,
    commit_lsn: int,
    seq: int,
    xid: int,
    columns: tuple[str, ...],
    before: TupleData | Mapping[str, Any] | None,
    after: TupleData | Mapping[str, Any] | None,
    error: Exception,
    withheld: frozenset[str] = frozenset(),
) -> tuple[bytes, bytes]:
    """(key, value) of a dead-letter record: the key is the table's name, the value a JSON
    document (plain JSON so that any tool reads it, even when the cause is a schema problem).
    ``withheld``: the columns column controls keep out of Kafka, left out of the document."""
    column = getattr(error, "column", None)
    document: Mapping[str, Any] = {
        "table": table,
        "topic": topic,
        "op": op,
        "commit_lsn": commit_lsn,
        "lsn": f"{commit_lsn >> 32:X}/{commit_lsn & 0xFFFFFFFF:X}",
        "seq": seq,
        "xid": xid,
        "column": column,
        "error": type(error).__name__,
        "reason": str(error),
        "before": _named(columns, before, withheld),
        "after": _named(columns, after, withheld),
        "ts_ms": time.time_ns() // 1_000_000,
    }
    return table.encode(), json.dumps(document, ensure_ascii=False).encode()
