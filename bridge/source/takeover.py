"""Taking over from a Debezium PostgreSQL connector: where its stored offsets say it stopped.

A Debezium connector keeps its position in Kafka Connect's offsets (the distributed worker's
``offset.storage.topic``, or the standalone worker's ``offset.storage.file.filename``), under
the key ``["<connector name>", {"server": "<topic.prefix>"}]``, with the value's ``lsn_commit``:
the end of the last transaction it completely processed (its COMMIT message's position). The
connector confirms that position to its slot only after Kafka Connect has flushed the offsets,
so the slot may still be behind it. pgbridge, given the same slot, publication and topic
prefix, starts streaming at the later of the two (:attr:`DebeziumOffset.resume_lsn`):
PostgreSQL then skips the transactions committed before it, so nothing Debezium delivered and
committed is sent again, nothing after it is missed, and a transaction Debezium had only
partly sent when it stopped is sent again whole (at most that one repeated).

Pure but for reading the offsets: :func:`offsets_from_file` (the Java-serialised map the
standalone worker writes) and :func:`offsets_from_topic` give ``(key, value)`` JSON pairs;
:func:`debezium_offset` picks the connector's.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bridge.errors import PgBridgeError
from bridge.pgoutput.lsn import Lsn

logger = logging.getLogger(__name__)

OffsetEntry = tuple[Any, Any]  # (key JSON, value JSON; None for a deleted offset)


class TakeoverError(PgBridgeError):
    """Debezium's offsets cannot be read, or do not give a position pgbridge can start from;
    ``where`` names the offsets (topic or file)."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"taking over from Debezium ({where}): {message}")
        self.where = where


@dataclass(frozen=True, slots=True)
class DebeziumOffset:
    """One Debezium connector's stored position."""

    connector: str
    server: str  # its topic.prefix
    lsn_commit: Lsn | None  # end of the last completely processed transaction
    lsn: Lsn | None  # the last change it sent
    tx_id: int | None

    @property
    def resume_lsn(self) -> Lsn:
        """Where pgbridge starts: after the last transaction Debezium committed; without one
        (it never committed a transaction), its last change's position, whose transaction is
        then sent again whole."""
        position = self.lsn_commit if self.lsn_commit is not None else self.lsn
        assert position is not None  # checked by debezium_offset
        return position


def offsets_from_file(path: Path) -> list[OffsetEntry]:
    """The entries of a standalone worker's offsets file: a Java-serialised
    ``HashMap<byte[], byte[]>`` of JSON keys and values. Each byte array is stored as a 4-byte
    big-endian length and its bytes; the JSON arrays (keys) and objects (values) are read in
    the order they appear, a key followed by its value."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TakeoverError(str(path), f"cannot read the offsets file: {exc.strerror}") from None
    found: list[Any] = []
    i = 4
    while i < len(data):
        if data[i] in b"[{":
            size = int.from_bytes(data[i - 4 : i], "big")
            if 0 < size <= len(data) - i:
                try:
                    found.append(json.loads(data[i : i + size]))
                    i += size
                    continue
                except ValueError:
                    pass
        i += 1
    entries: list[OffsetEntry] = []
    for key, value in itertools.pairwise(found):
        if isinstance(key, list) and (isinstance(value, dict) or value is None):
            entries.append((key, value))
    return entries


def offsets_from_topic(
    bootstrap_servers: str, topic: str, client: Mapping[str, str] | None = None
) -> list[OffsetEntry]:
    """Every record of Kafka Connect's offsets topic, in order (a later value of a key
    replaces an earlier one; a tombstone removes it). ``client``: extra librdkafka settings
    (TLS, SASL), as the bridge's producer has them."""
    from bridge.sink.topic_reader import TopicReadError, read_topic

    entries: list[OffsetEntry] = []
    try:
        for message in read_topic(bootstrap_servers, topic, client, timeout=30.0):
            key, value = message.key(), message.value()
            if key is not None:
                entries.append((json.loads(key), None if value is None else json.loads(value)))
    except TopicReadError as exc:
        reason = exc.reason
        if reason == "no such topic":
            reason = "no such topic (Kafka Connect's offsets)"
        raise TakeoverError(f"topic {topic}", reason) from None
    return entries


def debezium_offset(
    entries: Iterable[OffsetEntry], server: str, connector: str | None, where: str
) -> DebeziumOffset:
    """The stored position of the Debezium connector whose ``topic.prefix`` is ``server``
    (named ``connector``, or the only one with that prefix); :class:`TakeoverError` when there
    is none, several, or its initial snapshot was not finished."""
    latest: dict[str, Mapping[str, Any]] = {}
    for key, value in entries:
        if not (isinstance(key, list) and len(key) == 2 and isinstance(key[1], dict)):
            continue
        name, partition = key
        if partition.get("server") != server or (connector and name != connector):
            continue
        if value is None:
            latest.pop(str(name), None)
        else:
            latest[str(name)] = value
    if not latest:
        named = f"connector {connector!r} with " if connector else "a connector with "
        raise TakeoverError(where, f"no offsets of {named}topic.prefix {server!r}")
    if len(latest) > 1:
        raise TakeoverError(
            where,
            f"connectors {sorted(latest)} all have topic.prefix {server!r}; name one "
            "(debezium.connector.name)",
        )
    ((name, value),) = latest.items()
    snapshot = value.get("snapshot")  # "INITIAL" (Debezium 2+) or true while it snapshots
    finished = value.get("snapshot_completed") or value.get("last_snapshot_record")
    if snapshot not in (None, False, "false", "FALSE") and not finished:
        raise TakeoverError(
            where,
            f"connector {name!r} stopped in its initial snapshot; let it finish, or start "
            "pgbridge on a slot of its own (its initial snapshot copies the tables)",
        )
    lsn_commit, lsn = _lsn(value.get("lsn_commit")), _lsn(value.get("lsn"))
    if lsn_commit is None and lsn is None:
        raise TakeoverError(where, f"connector {name!r}'s offsets hold no LSN: {dict(value)}")
    tx_id = value.get("txId")
    return DebeziumOffset(
        name, server, lsn_commit, lsn, int(tx_id) if isinstance(tx_id, int) else None
    )


def _lsn(value: Any) -> Lsn | None:
    return Lsn(int(value)) if isinstance(value, int) and value > 0 else None
