"""Signals without a signal table: signed logical decoding messages.

Where no signal table is configured (``signal.data.collection``), pgbridge carries its signals
(the incremental snapshot's watermarks, the snapshots it asks for itself: a table DDL
rewrote, a table published while running; Kafka-channel signals; ``pgbridge snapshot``) as
transactional logical decoding messages, ``pg_logical_emit_message(true, 'pgbridge.signal',
…)``. They reach the stream at their commit's place, as an insert into a signal table would,
and nothing is written to the database's tables. pgoutput carries messages from PostgreSQL 14
on; on 13 incremental snapshots need the signal table.

Any role that can connect may emit a logical message, so each one carries an HMAC-SHA256 of
its id, type and data under a key kept in ``state.dir`` (``signal-key-<slot>``, mode 0600):
the bridge acts only on messages signed with its key, and ``pgbridge snapshot`` run where that
file is readable signs with it. A message with the prefix and a bad or missing signature is
logged and ignored.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import uuid
from pathlib import Path
from typing import Any, Final

import psycopg

from bridge.signals import Signal, SignalError, parse_signal

__all__ = [
    "MIN_SERVER_VERSION",
    "PREFIX",
    "decode",
    "emit",
    "emit_to",
    "encode",
    "key_path",
    "load_key",
    "load_or_create_key",
]

#: The prefix of pgbridge's signal messages.
PREFIX: Final = "pgbridge.signal"
#: pgoutput's ``messages`` option is new in PostgreSQL 14.
MIN_SERVER_VERSION: Final = 140000


def key_path(state_dir: Path, slot: str) -> Path:
    return state_dir.expanduser() / f"signal-key-{slot}"


def load_key(path: Path) -> bytes | None:
    """The signing key, if this host has one for the slot."""
    try:
        return bytes.fromhex(path.read_text().strip())
    except FileNotFoundError:
        return None
    except ValueError as exc:
        raise SignalError(str(path), f"the signal key file is not hex: {exc}") from None


def load_or_create_key(path: Path) -> bytes:
    """The slot's signing key, created (0600) on first use. Kept across restarts: a signal
    replayed from the slot after a crash must still verify."""
    key = load_key(path)
    if key is not None:
        return key
    path.parent.mkdir(parents=True, exist_ok=True)
    key = secrets.token_bytes(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(key.hex() + "\n")
    return key


def _mac(key: bytes, signal_id: str, signal_type: str, data: dict[str, Any]) -> str:
    body = json.dumps([signal_id, signal_type, data], sort_keys=True, separators=(",", ":"))
    return hmac.new(key, body.encode(), hashlib.sha256).hexdigest()


def encode(key: bytes, signal_id: str, signal_type: str, data: dict[str, Any]) -> str:
    return json.dumps(
        {
            "id": signal_id,
            "type": signal_type,
            "data": data,
            "mac": _mac(key, signal_id, signal_type, data),
        }
    )


def decode(key: bytes, content: bytes) -> Signal:
    """The signal a message carries; :class:`SignalError` if it is malformed or not signed
    with ``key``."""
    try:
        fields = json.loads(content)
    except ValueError as exc:
        raise SignalError("<message>", f"not JSON: {exc}") from None
    if not isinstance(fields, dict):
        raise SignalError("<message>", "not a JSON object")
    signal_id, signal_type, data = fields.get("id"), fields.get("type"), fields.get("data")
    if not isinstance(signal_id, str) or not isinstance(signal_type, str):
        raise SignalError("<message>", "without id or type")
    if not isinstance(data, dict):
        raise SignalError(signal_id, "data must be a JSON object")
    mac = fields.get("mac")
    if not isinstance(mac, str) or not hmac.compare_digest(
        mac, _mac(key, signal_id, signal_type, data)
    ):
        raise SignalError(signal_id, "not signed with this bridge's key: ignored")
    return parse_signal(signal_id, signal_type, json.dumps(data))


def emit(
    conn: psycopg.Connection[Any],
    key: bytes,
    signal_type: str,
    data: dict[str, Any] | None = None,
    signal_id: str | None = None,
) -> str:
    """Emit one signed signal message in its own transaction (``conn`` in autocommit); its id."""
    signal_id = signal_id or uuid.uuid4().hex
    conn.execute(
        "SELECT pg_logical_emit_message(true, %s, %s)",
        (PREFIX, encode(key, signal_id, signal_type, data or {})),
    )
    return signal_id


def emit_to(dsn: str, key_file: Path, signal_type: str, data: dict[str, Any]) -> str:
    """``pgbridge snapshot`` without a signal table: one signed message; its id."""
    key = load_key(key_file)
    if key is None:
        raise SignalError(
            "pgbridge snapshot",
            f"no signal table (signal.data.collection) and no signal key at {key_file}: run "
            "this where pgbridge run keeps its state (state.dir), or configure a signal table",
        )
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            if conn.info.server_version < MIN_SERVER_VERSION:
                raise SignalError(
                    "pgbridge snapshot",
                    "PostgreSQL 13 gives pgoutput no logical messages: configure a signal "
                    "table (signal.data.collection)",
                )
            return emit(conn, key, signal_type, data)
    except psycopg.Error as exc:
        raise SignalError("pgbridge snapshot", str(exc).strip().splitlines()[0]) from exc
