"""The optional C accelerators of the row hot path (``_speedups.c``).

- :func:`scan_tuple`: a TupleData's column layout, for :mod:`bridge.pgoutput`'s decoder;
- :func:`decode_insert`: a whole Insert message as the decoder's ``Insert`` and ``TupleData``
  objects (their classes given once by the decoder through :func:`configure_messages`);
- :func:`encode_row`: pgoutput TupleData straight to Avro bytes, for
  :class:`bridge.schema.RowEncoder` (its plans: :mod:`bridge.native.plan`);
- :func:`encode_insert`: pgoutput TupleData straight to the framed key and envelope value of an
  insert, for :class:`bridge.sink.serializer.InsertLane`;
- :func:`encode_source`: the envelope's source block of one change from its cached parts, for
  :class:`bridge.sink.serializer.SourceParts`;
- :func:`scan_copy_row`: one binary COPY row's layout, for
  :class:`bridge.snapshot.copy_binary.CopyBinaryParser`;
- :func:`encode_copy_row`: one binary COPY row straight to the framed key and envelope value of
  its snapshot (``r``) record, for :class:`bridge.sink.serializer.CopyLane`;
  :func:`encode_copy_rows` the same for a block of COPY messages in one call (the snapshot's
  workers, :mod:`bridge.snapshot.reader`), as tuples or packed into one ``bytearray``
  (``packed.h``: no Python object per record; :func:`unpack_records` reads them back, and
  ``bridge.native._kafka.produce_packed`` hands them to librdkafka);
- :func:`encode_insert_frames`: a run of Inserts of one table straight from the replication
  stream's XLogData frames to packed records, for
  :meth:`bridge.sink.serializer.InsertLane.encode_frames` (the pipeline's insert runs).

Built when the package is installed (``pip install -e .`` compiles it; a machine without a C
compiler gets the pure-Python paths, same output). Neither decides anything: for any input
they do not handle exactly they answer ``None`` and the Python code runs, which also raises
the precise typed errors. ``PGBRIDGE_NATIVE=0`` turns them off, e.g. to compare the paths.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bridge.native.switches import NATIVE, enabled

EncodeRow = Callable[
    [bytes, bytes, tuple[int, ...], bytes, bytes | None], tuple[bytes, bytes | None] | None
]
ScanTuple = Callable[[bytes, int, int], tuple[bytes, tuple[int, ...], int] | None]
EncodeInsert = Callable[
    [
        bytes,
        bytes,
        tuple[int, ...],
        bytes,
        bytes | None,
        bytes | None,
        bytes,
        tuple[bytes, bytes, bytes, bytes],  # bridge.sink.serializer.SourceParts
        int,
        int,
        bytes,
    ],
    tuple[bytes | None, bytes] | None,
]
EncodeSource = Callable[[tuple[bytes, bytes, bytes, bytes], int], bytes]
DecodeInsert = Callable[[bytes, bool], Any]
ConfigureMessages = Callable[[type, type], None]
ScanCopyRow = Callable[[bytes, int, bytes], tuple[bytes, tuple[int, ...]] | None]
EncodeCopyRow = Callable[
    [bytes, bytes, bytes, bytes | None, bytes | None, bytes, bytes, int, bytes],
    tuple[bytes | None, bytes] | None,
]
EncodeCopyRows = Callable[
    [
        list[bytes],
        int,
        list[Any] | bytearray,
        int,
        int,
        bytes,
        bytes,
        bytes | None,
        bytes | None,
        bytes,
        bytes,
        int,
        bytes,
    ],
    tuple[int, int],
]
EncodeInsertFrames = Callable[
    [
        list[bytes],
        int,
        int,
        int,
        bytearray,
        int,
        bytes,
        bytes | None,
        bytes | None,
        bytes,
        tuple[bytes, bytes, bytes, bytes],
        int,
        bytes,
    ],
    tuple[int, int],
]
UnpackRecords = Callable[[bytes | bytearray, int, int], list[tuple[bytes | None, bytes]]]

encode_row: EncodeRow | None
scan_tuple: ScanTuple | None
encode_insert: EncodeInsert | None
encode_source: EncodeSource | None
decode_insert: DecodeInsert | None
configure_messages: ConfigureMessages | None
scan_copy_row: ScanCopyRow | None
encode_copy_row: EncodeCopyRow | None
encode_copy_rows: EncodeCopyRows | None
encode_insert_frames: EncodeInsertFrames | None
unpack_records: UnpackRecords | None
try:
    from bridge.native._speedups import (
        configure_messages,
        decode_insert,
        encode_copy_row,
        encode_copy_rows,
        encode_insert,
        encode_insert_frames,
        encode_row,
        encode_source,
        scan_copy_row,
        scan_tuple,
        unpack_records,
    )
except ImportError:  # not built (no compiler at install time)
    encode_row = scan_tuple = encode_insert = scan_copy_row = encode_copy_row = None
    encode_copy_rows = encode_source = decode_insert = configure_messages = None
    unpack_records = encode_insert_frames = None

if not enabled(NATIVE):  # the pure-Python path, by choice (bridge.native.switches)
    encode_row = scan_tuple = encode_insert = scan_copy_row = encode_copy_row = None
    encode_copy_rows = encode_source = decode_insert = configure_messages = None
    unpack_records = encode_insert_frames = None

#: True when the C accelerators are in use.
ENABLED = encode_row is not None

__all__ = [
    "ENABLED",
    "ConfigureMessages",
    "DecodeInsert",
    "EncodeCopyRow",
    "EncodeCopyRows",
    "EncodeInsert",
    "EncodeInsertFrames",
    "EncodeRow",
    "EncodeSource",
    "ScanCopyRow",
    "ScanTuple",
    "UnpackRecords",
    "configure_messages",
    "decode_insert",
    "encode_copy_row",
    "encode_copy_rows",
    "encode_insert",
    "encode_insert_frames",
    "encode_row",
    "encode_source",
    "scan_copy_row",
    "scan_tuple",
    "unpack_records",
]
