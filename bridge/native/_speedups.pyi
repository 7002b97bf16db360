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
