from typing import Any

def encode_row(
    buffer: bytes,
    kinds: bytes,
    spans: tuple[int, ...],
    row_plan: bytes,
    key_plan: bytes | None,
    /,
) -> tuple[bytes, bytes | None] | None: ...
def scan_tuple(
    buffer: bytes, pos: int, end: int, /
) -> tuple[bytes, tuple[int, ...], int] | None: ...
def encode_insert(
    buffer: bytes,
    kinds: bytes,
    spans: tuple[int, ...],
    row_plan: bytes,
    key_plan: bytes | None,
    key_header: bytes | None,
    value_head: bytes,
    source: tuple[bytes, bytes, bytes, bytes],
    lsn: int,
    seq: int,
    tail: bytes,
    /,
) -> tuple[bytes | None, bytes] | None: ...
def scan_copy_row(
    data: bytes, ncols: int, kinds: bytes, /
) -> tuple[bytes, tuple[int, ...]] | None: ...
def encode_copy_row(
    data: bytes,
    kinds: bytes,
    row_plan: bytes,
    key_plan: bytes | None,
    key_header: bytes | None,
    value_head: bytes,
    source_prefix: bytes,
    seq: int,
    tail: bytes,
    /,
) -> tuple[bytes | None, bytes] | None: ...
def encode_copy_rows(
    frames: list[bytes],
    start: int,
    items: list[Any] | bytearray,
    max_rows: int,
    max_bytes: int,
    kinds: bytes,
    row_plan: bytes,
    key_plan: bytes | None,
    key_header: bytes | None,
    value_head: bytes,
    source_prefix: bytes,
    seq: int,
    tail: bytes,
    /,
) -> tuple[int, int]: ...
def unpack_records(
    pack: bytes | bytearray, start: int, stop: int, /
) -> list[tuple[bytes | None, bytes]]: ...
def encode_source(source: tuple[bytes, bytes, bytes, bytes], lsn: int, /) -> bytes: ...
def configure_messages(tuple_type: type, insert_type: type, /) -> None: ...
def decode_insert(payload: bytes, in_stream: bool, /) -> Any: ...
def encode_insert_frames(
    frames: list[bytes],
    start: int,
    min_rows: int,
    max_rows: int,
    pack: bytearray,
    oid: int,
    row_plan: bytes,
    key_plan: bytes | None,
    key_header: bytes | None,
    value_head: bytes,
    source: tuple[bytes, bytes, bytes, bytes],
    seq: int,
    tail: bytes,
    /,
) -> tuple[int, int]: ...
