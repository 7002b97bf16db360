from collections.abc import Callable
from typing import Any

def bind_library(path: str, /) -> None: ...
def topic_handle(producer: Any, name: str, /) -> object: ...
def release_topic(capsule: object, /) -> None: ...
def murmur2_partition(key: bytes, partitions: int, /) -> int: ...
def produce(
    producer: Any,
    topic: object,
    records: list[tuple[bytes | None, bytes | None]],
    start: int,
    partitions: int,
    null_key_partition: int,
    marker: Marker,
    /,
) -> tuple[int, int | None, int]: ...
def produce_packed(
    producer: Any,
    topic: object,
    pack: bytearray,
    first: int,
    stop: int,
    start: int,
    partitions: int,
    null_key_partition: int,
    marker: Marker,
    /,
) -> tuple[int, int | None, int]: ...

class Marker:
    def __init__(
        self, callable: Callable[[Any, Any], None], cleared: list[BaseException], /
    ) -> None: ...
    def __call__(self, err: Any, msg: Any, /) -> None: ...
