"""Unit tests for pgoutput option negotiation and the START_REPLICATION command."""

from __future__ import annotations

import pytest

from bridge.pgoutput.lsn import Lsn
from bridge.source.errors import ServerVersionError
from bridge.source.protocol import negotiate, quote_ident, quote_literal


@pytest.mark.parametrize(
    ("version", "proto", "streaming", "messages", "origin"),
    [
        (130023, 1, False, False, False),
        (140024, 2, True, True, False),
        (150019, 3, True, True, False),
        (160015, 4, True, True, True),
        (180006, 4, True, True, True),
        (190000, 4, True, True, True),
    ],
)
def test_negotiate_picks_highest_protocol_and_supported_options(
    version: int, proto: int, streaming: bool, messages: bool, origin: bool
) -> None:
    options = negotiate(version, ("p",), binary=True)
    assert options.proto_version == proto
    assert options.streaming is streaming
    assert options.messages is messages
    assert options.origin_any is origin
    assert options.binary is (version >= 140000)


def test_negotiate_rejects_server_older_than_13() -> None:
    with pytest.raises(ServerVersionError) as info:
        negotiate(120017, ("p",))
    assert info.value.server_version_num == 120017
    assert info.value.minimum == 130000


def test_negotiate_streaming_can_be_turned_off() -> None:
    assert negotiate(170000, ("p",), streaming=False).streaming is False


def test_start_replication_command_on_16_has_every_option() -> None:
    command = negotiate(160000, ("p",)).start_replication("s", Lsn.parse("16/B374D848"))
    assert command == (
        b"START_REPLICATION SLOT \"s\" LOGICAL 16/B374D848 (proto_version '4', "
        b"publication_names '\"p\"', messages 'true', streaming 'on', origin 'any')"
    )


def test_start_replication_command_on_13_is_minimal() -> None:
    command = negotiate(130000, ("a", "b")).start_replication("s", Lsn(0))
    assert command == (
        b"START_REPLICATION SLOT \"s\" LOGICAL 0/0 (proto_version '1', "
        b'publication_names \'"a","b"\')'
    )


def test_quote_helpers_escape_quotes() -> None:
    assert quote_ident('we"ird') == '"we""ird"'
    assert quote_literal("it's") == "'it''s'"
    command = negotiate(140000, ('p"q',)).start_replication("s", Lsn(1))
    assert b'publication_names \'"p""q"\'' in command
