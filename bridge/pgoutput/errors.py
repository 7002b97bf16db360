"""The decoder's one error type: the peer (or a file) sent bytes that are not valid pgoutput."""

from __future__ import annotations

from bridge.errors import PgBridgeError


class DecodeError(PgBridgeError):
    """Malformed replication data.

    ``message_type`` names the message being decoded (``Insert``, ``XLogData``, …), ``offset`` the
    byte offset within it where decoding failed, ``reason`` what was wrong.
    """

    def __init__(self, message_type: str, offset: int, reason: str) -> None:
        super().__init__(f"malformed {message_type} message at byte {offset}: {reason}")
        self.message_type = message_type
        self.offset = offset
        self.reason = reason
