"""Unit tests of the pgoutput decoder: each message layout, the stream state, and malformed input.

Payloads are spelled out byte by byte here (not produced by the test encoder) where the layout is
the point, so a shared misreading of the spec by encoder and decoder would still be caught.
"""

from __future__ import annotations

import struct
import tracemalloc

import pytest

from bridge.pgoutput import DecodeError, Decoder
from bridge.pgoutput.lsn import Lsn
from bridge.pgoutput.messages import (
    Begin,
    BeginPrepare,
    ColumnKind,
    Commit,
    CommitPrepared,
    Delete,
    Insert,
    Message,
    Origin,
    Prepare,
    Relation,
    ReplicaIdentity,
    RollbackPrepared,
    StreamAbort,
    StreamCommit,
    StreamPrepare,
    StreamStart,
    StreamStop,
    Truncate,
    Type,
    Update,
)

from .encoder import encode, encode_tuple

LSN_A = 0x16_B374D848
LSN_B = 0x16_B374D900
TS = 785_000_000_123_456  # 2024-11-15 in microseconds since 2000-01-01


def _stream_decoder(version: int = 2, xid: int = 777, **kw: bool) -> Decoder:
    d = Decoder(version, **kw)
    d.decode(b"S" + struct.pack("!IB", xid, 1))
    return d


# --- transaction framing -------------------------------------------------------------------


def test_begin_decodes_fields() -> None:
    msg = Decoder().decode(b"B" + struct.pack("!QqI", LSN_A, TS, 4242))
    assert msg == Begin(Lsn(LSN_A), TS, 4242)
    assert isinstance(msg, Begin) and str(msg.final_lsn) == "16/B374D848"


def test_commit_decodes_fields() -> None:
    msg = Decoder().decode(b"C" + struct.pack("!BQQq", 0, LSN_A, LSN_B, TS))
    assert msg == Commit(0, Lsn(LSN_A), Lsn(LSN_B), TS)


def test_origin_decodes_lsn_and_name() -> None:
    msg = Decoder().decode(b"O" + struct.pack("!Q", LSN_A) + b"node_a\x00")
    assert msg == Origin(Lsn(LSN_A), "node_a")


# --- catalog -------------------------------------------------------------------------------


RELATION_BODY = (
    struct.pack("!I", 16384)
    + b"public\x00orders\x00"
    + b"i"
    + struct.pack("!H", 2)
    + b"\x01id\x00"
    + struct.pack("!Ii", 23, -1)
    + b"\x00note\x00"
    + struct.pack("!Ii", 1043, 68)
)


def test_relation_decodes_columns_and_identity() -> None:
    msg = Decoder().decode(b"R" + RELATION_BODY)
    assert isinstance(msg, Relation)
    assert (msg.xid, msg.relation_oid, msg.namespace, msg.relation_name) == (
        None,
        16384,
        "public",
        "orders",
    )
    assert msg.replica_identity is ReplicaIdentity.INDEX
    assert [(c.name, c.is_key, c.type_oid, c.type_modifier) for c in msg.columns] == [
        ("id", True, 23, -1),
        ("note", False, 1043, 68),
    ]


def test_relation_carries_xid_inside_stream() -> None:
    msg = _stream_decoder().decode(b"R" + struct.pack("!I", 991) + RELATION_BODY)
    assert isinstance(msg, Relation) and msg.xid == 991 and msg.relation_name == "orders"


def test_relation_rejects_unknown_replica_identity() -> None:
    bad = RELATION_BODY.replace(b"\x00i\x00\x02", b"\x00x\x00\x02")
    with pytest.raises(DecodeError, match="replica identity") as info:
        Decoder().decode(b"R" + bad)
    assert info.value.message_type == "Relation"


def test_type_decodes_fields() -> None:
    msg = Decoder().decode(b"Y" + struct.pack("!I", 50001) + b"public\x00mood\x00")
    assert msg == Type(None, 50001, "public", "mood")


# --- data ----------------------------------------------------------------------------------


def test_insert_keeps_values_as_spans_into_payload() -> None:
    payload = (
        b"I"
        + struct.pack("!I", 16384)
        + b"N"
        + struct.pack("!H", 4)
        + b"t"
        + struct.pack("!i", 2)
        + b"42"
        + b"n"
        + b"u"
        + b"b"
        + struct.pack("!i", 4)
        + b"\x00\x00\x00\x2a"
    )
    msg = Decoder().decode(payload)
    assert isinstance(msg, Insert)
    t = msg.new_tuple
    assert t.buffer is payload  # no copy of the message
    assert t.kinds == b"tnub"
    assert t.values() == (b"42", None, None, b"\x00\x00\x00\x2a")
    assert [t.kind(i) for i in range(4)] == [
        ColumnKind.TEXT,
        ColumnKind.NULL,
        ColumnKind.UNCHANGED_TOAST,
        ColumnKind.BINARY,
    ]
    assert t.is_unchanged_toast(2) and not t.is_unchanged_toast(1)


def test_insert_accepts_empty_text_value() -> None:
    payload = b"I" + struct.pack("!I", 1) + b"N" + encode_tuple([("t", b"")])
    msg = Decoder().decode(payload)
    assert isinstance(msg, Insert) and msg.new_tuple.values() == (b"",)


def test_insert_copies_mutable_buffers() -> None:
    payload = bytearray(b"I" + struct.pack("!I", 1) + b"N" + encode_tuple([("t", b"ab")]))
    msg = Decoder().decode(payload)  # type: ignore[arg-type]
    payload[-1] = ord("z")
    assert isinstance(msg, Insert) and msg.new_tuple.values() == (b"ab",)


def test_insert_carries_xid_inside_stream() -> None:
    payload = b"I" + struct.pack("!II", 555, 16384) + b"N" + encode_tuple([("t", b"1")])
    msg = _stream_decoder().decode(payload)
    assert isinstance(msg, Insert) and (msg.xid, msg.relation_oid) == (555, 16384)


def test_update_without_old_tuple() -> None:
    payload = b"U" + struct.pack("!I", 7) + b"N" + encode_tuple([("t", b"1"), ("u", None)])
    msg = Decoder().decode(payload)
    assert isinstance(msg, Update)
    assert (msg.old_kind, msg.old_tuple) == (None, None)
    assert msg.new_tuple.values() == (b"1", None) and msg.new_tuple.is_unchanged_toast(1)


@pytest.mark.parametrize("kind", ["K", "O"])
def test_update_with_old_tuple(kind: str) -> None:
    payload = (
        b"U"
        + struct.pack("!I", 7)
        + kind.encode()
        + encode_tuple([("t", b"1"), ("n", None)])
        + b"N"
        + encode_tuple([("t", b"2"), ("t", b"x")])
    )
    msg = Decoder().decode(payload)
    assert isinstance(msg, Update) and msg.old_kind == kind and msg.old_tuple is not None
    assert msg.old_tuple.values() == (b"1", None)
    assert msg.new_tuple.values() == (b"2", b"x")


def test_update_rejects_missing_new_tuple() -> None:
    payload = b"U" + struct.pack("!I", 7) + b"K" + encode_tuple([("t", b"1")])
    with pytest.raises(DecodeError, match="truncated") as info:
        Decoder().decode(payload)
    assert info.value.offset == len(payload)


@pytest.mark.parametrize("kind", ["K", "O"])
def test_delete_decodes_old_tuple(kind: str) -> None:
    payload = b"D" + struct.pack("!I", 9) + kind.encode() + encode_tuple([("t", b"5")])
    msg = Decoder().decode(payload)
    assert isinstance(msg, Delete)
    assert (msg.xid, msg.relation_oid, msg.old_kind) == (None, 9, kind)
    assert msg.old_tuple.values() == (b"5",) and msg.old_tuple.buffer is payload


def test_delete_rejects_new_tuple_marker() -> None:
    payload = b"D" + struct.pack("!I", 9) + b"N" + encode_tuple([("t", b"5")])
    with pytest.raises(DecodeError, match="expected 'K' or 'O'"):
        Decoder().decode(payload)


@pytest.mark.parametrize(
    ("options", "cascade", "restart"),
    [(0, False, False), (1, True, False), (2, False, True), (3, True, True)],
)
def test_truncate_decodes_options(options: int, cascade: bool, restart: bool) -> None:
    msg = Decoder().decode(b"T" + struct.pack("!iBII", 2, options, 100, 200))
    assert msg == Truncate(None, options, (100, 200))
    assert isinstance(msg, Truncate)
    assert (msg.cascade, msg.restart_identity) == (cascade, restart)


@pytest.mark.parametrize("transactional", [True, False])
def test_message_decodes_prefix_and_content(transactional: bool) -> None:
    payload = (
        b"M"
        + struct.pack("!BQ", int(transactional), LSN_A)
        + b"audit\x00"
        + struct.pack("!i", 3)
        + b"\x00\xff!"
    )
    assert Decoder().decode(payload) == Message(
        None, transactional, Lsn(LSN_A), "audit", b"\x00\xff!"
    )


# --- streaming -----------------------------------------------------------------------------


def test_stream_start_and_stop_track_in_stream() -> None:
    d = Decoder(2)
    assert not d.in_stream
    assert d.decode(b"S" + struct.pack("!IB", 900, 1)) == StreamStart(900, True)
    assert d.in_stream
    assert d.decode(b"E") == StreamStop()
    assert not d.in_stream
    assert d.decode(b"S" + struct.pack("!IB", 900, 0)) == StreamStart(900, False)


def test_stream_start_rejects_nested_start_and_keeps_state() -> None:
    d = _stream_decoder()
    with pytest.raises(DecodeError, match="inside an open stream"):
        d.decode(b"S" + struct.pack("!IB", 901, 1))
    assert d.in_stream


def test_stream_stop_rejects_stop_outside_stream() -> None:
    with pytest.raises(DecodeError, match="without a Stream Start"):
        Decoder(2).decode(b"E")


def test_stream_commit_decodes_fields() -> None:
    msg = Decoder(2).decode(b"c" + struct.pack("!IBQQq", 900, 0, LSN_A, LSN_B, TS))
    assert msg == StreamCommit(900, 0, Lsn(LSN_A), Lsn(LSN_B), TS)


def test_stream_abort_decodes_xids() -> None:
    assert Decoder(2).decode(b"A" + struct.pack("!II", 900, 901)) == StreamAbort(900, 901)


def test_stream_abort_parallel_decodes_abort_lsn_and_ts() -> None:
    d = Decoder(4, streaming_parallel=True)
    msg = d.decode(b"A" + struct.pack("!IIQq", 900, 900, LSN_A, TS))
    assert msg == StreamAbort(900, 900, Lsn(LSN_A), TS)


def test_stream_abort_without_parallel_rejects_abort_lsn() -> None:
    with pytest.raises(DecodeError, match="16 trailing bytes"):
        Decoder(4).decode(b"A" + struct.pack("!IIQq", 900, 900, LSN_A, TS))


def test_stream_abort_parallel_rejects_short_form() -> None:
    with pytest.raises(DecodeError, match="truncated"):
        Decoder(4, streaming_parallel=True).decode(b"A" + struct.pack("!II", 900, 900))


def test_message_outside_stream_has_no_xid_inside_stream_has_one() -> None:
    body = struct.pack("!BQ", 1, LSN_A) + b"p\x00" + struct.pack("!i", 0)
    msg = _stream_decoder(xid=31).decode(b"M" + struct.pack("!I", 31) + body)
    assert isinstance(msg, Message) and msg.xid == 31 and msg.content == b""


def test_truncate_carries_xid_inside_stream() -> None:
    msg = _stream_decoder().decode(b"T" + struct.pack("!IiBI", 77, 1, 0, 100))
    assert msg == Truncate(77, 0, (100,))


def test_type_carries_xid_inside_stream() -> None:
    msg = _stream_decoder().decode(b"Y" + struct.pack("!II", 77, 60000) + b"s\x00t\x00")
    assert msg == Type(77, 60000, "s", "t")


# --- two-phase -----------------------------------------------------------------------------


def test_begin_prepare_decodes_fields() -> None:
    payload = b"b" + struct.pack("!QQqI", LSN_A, LSN_B, TS, 12) + b"gid-1\x00"
    assert Decoder(3).decode(payload) == BeginPrepare(Lsn(LSN_A), Lsn(LSN_B), TS, 12, "gid-1")


@pytest.mark.parametrize(
    ("tag", "cls"), [(b"P", Prepare), (b"K", CommitPrepared), (b"p", StreamPrepare)]
)
def test_prepare_family_decodes_fields(tag: bytes, cls: type) -> None:
    payload = tag + struct.pack("!BQQqI", 0, LSN_A, LSN_B, TS, 12) + b"g\x00"
    assert Decoder(3).decode(payload) == cls(0, Lsn(LSN_A), Lsn(LSN_B), TS, 12, "g")


def test_rollback_prepared_decodes_fields() -> None:
    payload = b"r" + struct.pack("!BQQqqI", 0, LSN_A, LSN_B, TS, TS + 5, 12) + b"g\x00"
    assert Decoder(3).decode(payload) == RollbackPrepared(
        0, Lsn(LSN_A), Lsn(LSN_B), TS, TS + 5, 12, "g"
    )


# --- protocol versions and API misuse --------------------------------------------------------


@pytest.mark.parametrize(("payload", "needed"), [(b"E", 2), (b"b" + bytes(28) + b"\x00", 3)])
def test_decoder_rejects_messages_newer_than_protocol(payload: bytes, needed: int) -> None:
    with pytest.raises(DecodeError, match=f"needs protocol version {needed}"):
        Decoder(needed - 1).decode(payload)


@pytest.mark.parametrize("version", [0, 5, -1])
def test_decoder_rejects_unknown_protocol_version(version: int) -> None:
    with pytest.raises(ValueError, match="protocol_version"):
        Decoder(version)


def test_decoder_rejects_parallel_before_protocol_4() -> None:
    with pytest.raises(ValueError, match="streaming_parallel"):
        Decoder(3, streaming_parallel=True)


def test_decoder_exposes_configuration() -> None:
    d = Decoder(4, streaming_parallel=True)
    assert (d.protocol_version, d.streaming_parallel, d.in_stream) == (4, True, False)


# --- malformed input -----------------------------------------------------------------------


def _insert(tuple_bytes: bytes) -> bytes:
    return b"I" + struct.pack("!I", 1) + b"N" + tuple_bytes


@pytest.mark.parametrize(
    ("payload", "reason", "offset"),
    [
        (b"", "empty message", 0),
        (b"Z", "unknown message byte b'Z'", 0),
        (b"B" + bytes(19), "truncated", 20),
        (b"B" + bytes(21), "1 trailing bytes", 21),
        (b"C" + bytes(26), "1 trailing bytes", 26),
        (b"O" + bytes(8) + b"abc", "unterminated string", 9),
        (b"O" + bytes(8) + b"\xff\x00", "not valid UTF-8", 9),
        (_insert(struct.pack("!H", 1) + b"x"), "unknown tuple column kind b'x'", 8),
        (_insert(struct.pack("!H", 1) + b"t" + struct.pack("!i", -1)), "negative column length", 9),
        (
            _insert(struct.pack("!H", 1) + b"t" + struct.pack("!i", 0x7FFFFFFF) + b"ab"),
            "column length 2147483647 exceeds the 2 bytes left",
            9,
        ),
        (_insert(struct.pack("!H", 2) + b"n"), "column count 2 exceeds the 1 bytes left", 6),
        (_insert(struct.pack("!H", 0xFFFF)), "column count 65535 exceeds", 6),
        (_insert(struct.pack("!H", 1) + b"n" + b"?"), "1 trailing bytes", 9),
        (_insert(struct.pack("!H", 2) + b"t" + struct.pack("!i", 0) + b"t"), "truncated", 14),
        (b"I" + struct.pack("!I", 1) + b"K" + encode_tuple([]), "expected 'N'", 5),
        (b"I" + struct.pack("!I", 1), "truncated", 5),
        (b"T" + struct.pack("!iB", 0x7FFFFFFF, 0), "relation count 2147483647 exceeds", 1),
        (b"T" + struct.pack("!iB", -3, 0), "negative relation count", 1),
        (b"T" + struct.pack("!iBI", 0, 0, 5), "4 trailing bytes", 6),
        (
            b"M" + struct.pack("!BQ", 1, 0) + b"p\x00" + struct.pack("!i", 0x7FFFFFFF),
            "content length 2147483647 exceeds the 0 bytes left",
            12,
        ),
        (
            b"M" + struct.pack("!BQ", 1, 0) + b"p\x00" + struct.pack("!i", -5),
            "negative content length",
            12,
        ),
        (
            b"M" + struct.pack("!BQ", 1, 0) + b"p\x00" + struct.pack("!i", 0) + b"x",
            "1 trailing bytes",
            16,
        ),
        (b"R" + struct.pack("!I", 1) + b"s\x00t\x00d" + struct.pack("!H", 3), "truncated", 12),
        (b"Y" + struct.pack("!I", 1) + b"s\x00t", "unterminated string", 7),
    ],
)
def test_decoder_raises_decode_error_on_malformed_input(
    payload: bytes, reason: str, offset: int
) -> None:
    with pytest.raises(DecodeError) as info:
        Decoder(2).decode(payload)
    assert reason in info.value.reason
    assert info.value.offset == offset
    assert info.value.message_type in str(info.value)


def test_decoder_error_names_message_type() -> None:
    with pytest.raises(DecodeError) as info:
        Decoder().decode(b"U" + struct.pack("!I", 1) + b"N" + struct.pack("!H", 1) + b"q")
    assert info.value.message_type == "Update"


def test_decoder_round_trips_encoder_for_smoke() -> None:
    # Guards the encoder used by the property tests against drifting from the fixed layouts above.
    msg = Begin(Lsn(LSN_A), TS, 1)
    assert encode(msg) == b"B" + struct.pack("!QqI", LSN_A, TS, 1)


LYING_LENGTHS = [
    _insert(struct.pack("!H", 1) + b"t" + struct.pack("!i", 0x7FFFFFFF) + b"x"),
    _insert(struct.pack("!H", 0xFFFF) + b"t" + struct.pack("!i", 1) + b"x"),
    b"T" + struct.pack("!iB", 0x7FFFFFFF, 0) + bytes(8),
    b"M" + struct.pack("!BQ", 1, 0) + b"p\x00" + struct.pack("!i", 0x7FFFFFFF) + b"abc",
    b"R" + struct.pack("!I", 1) + b"s\x00t\x00d" + struct.pack("!H", 0xFFFF) + b"\x00c\x00",
    b"U" + struct.pack("!I", 1) + b"O" + struct.pack("!H", 0xFFFF) + b"n" * 10,
]


@pytest.mark.parametrize("payload", LYING_LENGTHS)
def test_decoder_lying_length_allocates_nothing_large(payload: bytes) -> None:
    tracemalloc.start()
    try:
        with pytest.raises(DecodeError):
            Decoder().decode(payload)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * 1024  # a decoder and an error, not a lying 2 GB or 65,535-column header
