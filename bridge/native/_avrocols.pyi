def decode_columns(
    plan: bytes,
    column_kinds: bytes,
    precisions: tuple[int, ...],
    offsets: object,
    data: object,
    start: int,
    count: int,
    skip: int,
    /,
) -> list[tuple[bytes, bytes, bytes | None]]: ...
