"""Negotiation of pgoutput options from the server version, and the replication commands.

pgoutput's options grew with each release; asking for one the server lacks fails the whole
START_REPLICATION, so the options are derived from ``server_version_num``:

=========  =============  =========================================================
PG major   proto_version  options
=========  =============  =========================================================
13         1              (no streaming, no messages, no binary)
14         2              streaming 'on', messages, binary
15         3              same (protocol 3 adds two-phase messages, not requested)
16+        4              same, plus origin 'any'
=========  =============  =========================================================

``streaming 'parallel'`` (16+) is not used: it only adds the abort LSN and timestamp to Stream
Abort so that a subscriber can apply streams in parallel workers. pgbridge writes one ordered
stream to Kafka and replays a streamed transaction at its commit anyway, so it would gain
nothing. ``two_phase`` is never requested: without it the server decodes a prepared
transaction as an ordinary one when COMMIT PREPARED runs and sends nothing for ROLLBACK
PREPARED, which is exactly the commit-order stream downstream wants, with no pending state to
keep across restarts. ``origin 'any'`` keeps changes that arrived from other replication
origins (the server's default, stated explicitly).

Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from bridge.pgoutput.lsn import Lsn
from bridge.source.errors import ServerVersionError

__all__ = ["MINIMUM_SERVER_VERSION", "StreamOptions", "negotiate", "quote_ident", "quote_literal"]

#: PostgreSQL 13: the oldest release still supported upstream when pgbridge was written.
MINIMUM_SERVER_VERSION = 130000


@dataclass(frozen=True, slots=True)
class StreamOptions:
    """What START_REPLICATION asks pgoutput for."""

    proto_version: int
    publication_names: tuple[str, ...]
    messages: bool
    binary: bool
    streaming: bool
    origin_any: bool

    def start_replication(self, slot_name: str, start_lsn: Lsn) -> bytes:
        """The START_REPLICATION command for ``slot_name`` from ``start_lsn``."""
        pubs = ",".join(quote_ident(p) for p in self.publication_names)
        options = [
            f"proto_version '{self.proto_version}'",
            f"publication_names {quote_literal(pubs)}",
        ]
        if self.messages:
            options.append("messages 'true'")
        if self.binary:
            options.append("binary 'true'")
        if self.streaming:
            options.append("streaming 'on'")
        if self.origin_any:
            options.append("origin 'any'")
        command = (
            f"START_REPLICATION SLOT {quote_ident(slot_name)} LOGICAL {start_lsn} "
            f"({', '.join(options)})"
        )
        return command.encode()


def negotiate(
    server_version_num: int,
    publication_names: tuple[str, ...],
    *,
    binary: bool = False,
    streaming: bool = True,
) -> StreamOptions:
    """The highest protocol and the options this server supports.

    Raises :class:`ServerVersionError` below PostgreSQL 13. ``binary`` and ``streaming`` are
    what the user would like; they are dropped where the server cannot do them (13).
    """
    if server_version_num < MINIMUM_SERVER_VERSION:
        raise ServerVersionError(server_version_num, MINIMUM_SERVER_VERSION)
    major = server_version_num // 10000
    proto = {13: 1, 14: 2, 15: 3}.get(major, 4)
    return StreamOptions(
        proto_version=proto,
        publication_names=publication_names,
        messages=major >= 14,  # the 'messages' option is new in 14; 13 rejects it
        binary=binary and major >= 14,
        streaming=streaming and proto >= 2,
        origin_any=major >= 16,
    )


def quote_ident(name: str) -> str:
    """``name`` as a double-quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def quote_literal(text: str) -> str:
    """``text`` as a single-quoted SQL string literal (standard_conforming_strings)."""
    return "'" + text.replace("'", "''") + "'"
