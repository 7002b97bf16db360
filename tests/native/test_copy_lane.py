"""The C snapshot lane (:func:`bridge.native.encode_copy_row`,
:class:`bridge.sink.serializer.CopyLane`) against the general path.

What users rely on: a snapshot row that takes the lane is published as exactly the key and value
bytes the serializer writes for the ``r`` event the snapshot builds of the same COPY row (parsed
by :class:`~bridge.snapshot.copy_binary.CopyBinaryParser`, encoded by the table's RowEncoder),
with the same ``seq`` and ``source.snapshot`` marker; whatever is not exactly one whole row
(the header's message, the trailer, a short or long row) is declined for the parser to judge.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st

from bridge import native
from bridge.events import ChangeEvent, TxContext
from bridge.pgoutput.lsn import Lsn
from bridge.pgoutput.messages import TupleData
from bridge.snapshot.copy_binary import CopyBinaryParser, encode_copy_binary
from tests.examples import examples
from tests.native.test_insert_lane import (
    IDS,
    decode_source,
    fixed_clock,
    general,
    serializer_for,
)
from tests.native.test_rowavro import TABLES, Table, native_only, rows
from tests.rows import pack_records

TX = TxContext(
    4242, Lsn(0x1_0000_2000), 800_000_000_000_000, None, "true", last_commit_lsn=Lsn(0x1_0000_2000)
)
HEADER_LEN = 19  # signature, flags, extension length (no extension)


def copy_row(row: TupleData) -> tuple[bytes, bytes]:
    """(the CopyData message of ``row`` as the server sends it, the kinds it is selected with):
    a column that is NULL here is selected in binary form."""
    fields: list[bytes | None] = []
    kinds = bytearray()
    for i, kind in enumerate(row.kinds):
        if kind == ord("n"):
            fields.append(None)
            kinds.append(ord("b"))
        else:
            start, end = row.spans[2 * i], row.spans[2 * i + 1]
            fields.append(bytes(row.buffer[start:end]))
            kinds.append(kind)
    stream = encode_copy_binary([fields])
    return stream[HEADER_LEN:-2], bytes(kinds)


def general_record(
    table: Table, message: bytes, kinds: bytes, seq: int, marker: str
) -> tuple[bytes | None, bytes] | None:
    """What the snapshot's ordinary path publishes for the row (None: the converters refuse
    it, and the lane must decline it too)."""
    schemas = table.schemas
    parser = CopyBinaryParser(len(kinds), "public.zoo", kinds)
    (parsed,) = parser.feed(encode_copy_binary([]).replace(b"\xff\xff", b"") + message)
    after, toast = schemas.encoder.encode(parsed)
    tx = replace(TX, snapshot=marker)
    # As bridge.snapshot.reader builds it: a snapshot row is at the consistent point.
    lsn = int(TX.commit_lsn)
    event = ChangeEvent("r", schemas, tx, seq, None, after, tuple(toast) if toast else (), lsn)
    return general(serializer_for(schemas), event)


def native_row(table: Table) -> TupleData:
    """A row of ``table`` that the C encoder takes whole (the first one drawn: shrinking it
    would cost seconds and prove nothing more)."""
    row, _ = find(rows(table), lambda drawn: drawn[1], settings=_FIRST_FOUND)
    return row


_FIRST_FOUND = settings(database=None, phases=[Phase.generate], derandomize=True)


@native_only
@pytest.mark.parametrize("table_name", sorted(TABLES))
@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_copy_lane_record_equals_serializer_record(table_name: str, data: Any) -> None:
    table = TABLES[table_name]
    row, expect_native = data.draw(rows(table))
    seq = data.draw(st.sampled_from([0, 1, 0x1FFF, (3 << 52) | (7 << 32) | 99, 2**62]))
    marker = data.draw(st.sampled_from(["first", "true", "last"]))
    message, kinds = copy_row(row)
    schemas = table.schemas
    serializer = serializer_for(schemas)
    lane = serializer.copy_lane(schemas, IDS, TX)
    assert lane is not None
    with fixed_clock():
        record = lane.encode(message, kinds, seq, marker)
        expected = general_record(table, message, kinds, seq, marker)
    if expect_native:
        assert record is not None, "the lane declined a row the C encoder takes"
    if record is not None:
        assert record == expected
    if expected is not None:
        # A snapshot row is at the consistent point: lsn and both elements of sequence.
        source = decode_source(schemas, expected[1])
        point = int(TX.commit_lsn)
        assert (source["lsn"], source["sequence"]) == (point, f'["{point}","{point}"]')


@native_only
def test_copy_lane_declines_what_is_not_one_whole_row() -> None:
    table = TABLES["composite_pk"]
    serializer = serializer_for(table.schemas)
    lane = serializer.copy_lane(table.schemas, IDS, TX)
    assert lane is not None
    row = native_row(table)
    message, kinds = copy_row(row)
    assert lane.encode(message, kinds, 1) is not None
    header = encode_copy_binary([]).replace(b"\xff\xff", b"")
    for garbage in (
        header + message,  # the first message: the header rides with the first row
        b"\xff\xff",  # the trailer
        message[:-1],  # short
        message + b"\x00",  # long
        b"\x00\x01" + message[2:],  # another field count
        message[:2] + b"\xff\xff\xff\xfe" + message[6:],  # a negative length other than -1
        b"",
    ):
        assert lane.encode(garbage, kinds, 1) is None


@native_only
def test_copy_lane_declines_a_null_key_column() -> None:
    """A NULL where the key is NOT NULL (the server never sends it): declined, so that the
    converters raise the typed error rather than a key being written from nothing."""
    table = TABLES["composite_pk"]
    lane = serializer_for(table.schemas).copy_lane(table.schemas, IDS, TX)
    assert lane is not None
    row = native_row(table)
    _, kinds = copy_row(row)
    fields: list[bytes | None] = [
        None if kind == ord("n") else bytes(row.buffer[row.spans[2 * i] : row.spans[2 * i + 1]])
        for i, kind in enumerate(row.kinds)
    ]
    fields[2] = None  # i4, a primary key column
    message = encode_copy_binary([fields])[HEADER_LEN:-2]
    assert lane.encode(message, kinds, 1) is None


@native_only
def test_copy_rows_encodes_a_block_as_the_lane_encodes_each_row() -> None:
    """A block of COPY messages in one call: the same records as one call per row (seq one
    more per row), appended in order; it stops before the first message the lane declines,
    and at the batch's bounds (rows, bytes of messages), leaving the rest to the caller."""
    table = TABLES["composite_pk"]
    lane = serializer_for(table.schemas).copy_lane(table.schemas, IDS, TX)
    assert lane is not None and native.encode_copy_rows is not None
    row = native_row(table)
    message, kinds = copy_row(row)
    block = [message] * 5 + [b"\xff\xff"] + [message] * 2  # the trailer in the middle
    tail, prefix = lane.tail(), lane.prefixes["true"]

    def rows_from(start: int, max_rows: int = 100, max_bytes: int = 1 << 20) -> tuple[Any, ...]:
        assert native.encode_copy_rows is not None
        items: list[Any] = ["before"]
        taken, nbytes = native.encode_copy_rows(
            block, start, items, max_rows, max_bytes, kinds, lane.row_plan, lane.key_plan,
            lane.key_header, lane.value_head, prefix, 40, tail,
        )  # fmt: skip
        return taken, nbytes, items

    one_by_one = [lane.encode(message, kinds, 40 + i, tail=tail) for i in range(5)]
    assert rows_from(0) == (5, 5 * len(message), ["before", *one_by_one])
    assert rows_from(2) == (3, 3 * len(message), ["before", *one_by_one[:3]])
    assert rows_from(5)[:2] == (0, 0)  # the trailer: the parser's
    assert rows_from(6)[:2] == (2, 2 * len(message))
    assert rows_from(8)[:2] == (0, 0)  # the end of the block
    assert rows_from(0, max_rows=2)[:2] == (2, 2 * len(message))
    assert rows_from(0, max_bytes=len(message) + 1)[:2] == (2, 2 * len(message))
    assert rows_from(0, max_bytes=1)[:2] == (1, len(message))  # at least one row


@native_only
@pytest.mark.parametrize("table_name", ["composite_pk", "full"])
def test_copy_rows_packs_the_records_it_would_append_as_tuples(table_name: str) -> None:
    """Into a bytearray, a block's records are packed back to back (packed.h: no Python object
    per record), byte for byte the tuples the list form gets, keyless records included, after
    what the buffer held; unpack_records reads any range of them back."""
    table = TABLES[table_name]
    lane = serializer_for(table.schemas).copy_lane(table.schemas, IDS, TX)
    assert lane is not None and native.encode_copy_rows is not None
    assert native.unpack_records is not None
    message, kinds = copy_row(native_row(table))
    block = [message] * 4 + [b"\xff\xff"]
    tail, prefix = lane.tail(), lane.prefixes["true"]
    args = (4, 1 << 20, kinds, lane.row_plan, lane.key_plan, lane.key_header, lane.value_head,
            prefix, 7, tail)  # fmt: skip
    as_tuples: list[Any] = []
    assert native.encode_copy_rows(block, 0, as_tuples, *args) == (4, 4 * len(message))
    assert (as_tuples[0][0] is None) == (table_name == "full")  # "full": no message key
    pack = bytearray(b"held")
    assert native.encode_copy_rows(block, 0, pack, *args) == (4, 4 * len(message))
    assert pack == b"held" + pack_records(as_tuples)
    packed = pack_records(as_tuples)
    assert native.unpack_records(packed, 0, 4) == as_tuples
    assert native.unpack_records(packed, 3, 4) == as_tuples[3:]
    with pytest.raises(ValueError, match="end at record 4"):
        native.unpack_records(packed, 0, 5)
    with pytest.raises(ValueError):
        native.unpack_records(packed[:-1], 0, 4)  # a truncated last record


def test_copy_lane_only_with_the_accelerator() -> None:
    table = TABLES["full"]
    lane = serializer_for(table.schemas).copy_lane(table.schemas, IDS, TX)
    assert (lane is not None) == (native.encode_copy_row is not None)
