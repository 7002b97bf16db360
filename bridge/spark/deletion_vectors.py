"""Delta deletion vectors: reading the ones a table holds, writing new ones (Delta's protocol,
"Deletion Vector Format").

A deletion vector marks rows of one data file as deleted without rewriting the file: the set of
their row positions, a 64-bit Roaring bitmap. This module knows only the bytes:

* the bitmap: magic ``1681511377`` (little-endian int32), the number of 32-bit bitmaps
  (little-endian int64), then for each its key (the positions' high 32 bits, little-endian
  int32) and the portable serialization of a 32-bit Roaring bitmap (``pyroaring``, CRoaring);
* a DV file: a version byte (1), then for each bitmap its size (big-endian int32), the
  bitmap, and the CRC-32 of the bitmap (big-endian int32);
* a descriptor (the ``deletionVector`` of an ``add`` action): ``storageType`` ``u`` (a file
  named by a UUID, Z85-encoded, after an optional folder prefix), ``p`` (an absolute path) or
  ``i`` (the bitmap itself, Z85-encoded, in the log); ``offset`` points at the size field.

Data files hold far fewer than 2^32 rows, so the bitmaps written here have the one key 0; a
bitmap read with more keys is refused (:class:`DeletionVectorError`), not misread.
"""

from __future__ import annotations

import struct
import uuid
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

__all__ = [
    "DeletionVectorError",
    "NewDeletionVectors",
    "deleted_rows",
    "write_deletion_vectors",
    "z85_decode",
    "z85_encode",
]

_MAGIC = 1681511377
_FORMAT_VERSION = 1
_Z85 = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_VALUE = {c: i for i, c in enumerate(_Z85)}
_UUID_Z85_CHARS = 20


class DeletionVectorError(Exception):
    """A deletion vector this module cannot read exactly (its format, checksum or size)."""


def z85_encode(data: bytes) -> str:
    """ZeroMQ's Z85 (Delta's encoding of UUIDs and inline vectors); ``data`` a multiple of 4."""
    if len(data) % 4:
        raise ValueError(f"Z85 encodes multiples of 4 bytes, not {len(data)}")
    out = bytearray()
    for (word,) in struct.iter_unpack(">I", data):
        chunk = bytearray(5)
        for i in range(4, -1, -1):
            word, chunk[i] = divmod(word, 85)
        out += bytes(_Z85[c] for c in chunk)
    return out.decode("ascii")


def z85_decode(text: str) -> bytes:
    """The bytes ``text`` (a multiple of 5 Z85 characters) encodes."""
    raw = text.encode("ascii")
    if len(raw) % 5:
        raise DeletionVectorError(f"Z85 text of {len(raw)} characters is not a multiple of 5")
    out = bytearray()
    for start in range(0, len(raw), 5):
        word = 0
        for c in raw[start : start + 5]:
            if c not in _Z85_VALUE:
                raise DeletionVectorError(f"{chr(c)!r} is not a Z85 character")
            word = word * 85 + _Z85_VALUE[c]
        out += struct.pack(">I", word)
    return bytes(out)


def _bitmap_bytes(rows: Any) -> bytes:
    """A 64-bit bitmap (Delta's ``RoaringBitmapArray``, portable form) of ``rows`` (a
    pyroaring BitMap of positions below 2^32)."""
    return struct.pack("<Iqi", _MAGIC, 1, 0) + bytes(rows.serialize())


def _parse_bitmap(data: bytes, where: str) -> Any:
    from pyroaring import BitMap

    if len(data) < 12:
        raise DeletionVectorError(f"{where}: {len(data)} bytes is no deletion vector")
    magic, count = struct.unpack_from("<Iq", data)
    if magic != _MAGIC:
        raise DeletionVectorError(f"{where}: magic {magic}, not Delta's {_MAGIC}")
    if count == 0:
        return BitMap()
    (key,) = struct.unpack_from("<i", data, 12)
    if count != 1 or key != 0:
        raise DeletionVectorError(f"{where}: positions past 2^32 (bitmaps {count}, key {key})")
    return BitMap.deserialize(data[16:])


def _file_of(descriptor: Mapping[str, Any], table_root: Path) -> Path:
    kind, text = descriptor["storageType"], descriptor["pathOrInlineDv"]
    if kind == "p":
        parsed = urlparse(text)
        return Path(unquote(parsed.path if parsed.scheme else text))
    prefix, encoded = text[:-_UUID_Z85_CHARS], text[-_UUID_Z85_CHARS:]
    name = f"deletion_vector_{uuid.UUID(bytes=z85_decode(encoded))}.bin"
    return table_root / prefix / name if prefix else table_root / name


def deleted_rows(descriptor: Mapping[str, Any] | None, table_root: Path) -> Any:
    """The row positions ``descriptor`` marks deleted (a pyroaring BitMap; empty for None),
    checked against its size, checksum and cardinality."""
    from pyroaring import BitMap

    if not descriptor:
        return BitMap()
    kind, size = descriptor["storageType"], int(descriptor["sizeInBytes"])
    if kind == "i":
        data = z85_decode(descriptor["pathOrInlineDv"])[:size]
        where = "an inline deletion vector"
    elif kind in ("u", "p"):
        path = _file_of(descriptor, table_root)
        where = str(path)
        offset = int(descriptor.get("offset") or 0)
        with open(path, "rb") as f:
            f.seek(offset)
            frame = f.read(4 + size + 4)
        if len(frame) != size + 8:
            raise DeletionVectorError(f"{where}: truncated at offset {offset}")
        (stored,) = struct.unpack_from(">i", frame)
        data = frame[4 : 4 + size]
        (crc,) = struct.unpack_from(">I", frame, 4 + size)
        if stored != size or zlib.crc32(data) != crc:
            raise DeletionVectorError(f"{where}: size or checksum differs at offset {offset}")
    else:
        raise DeletionVectorError(f"storage type {kind!r} is not Delta's u, p or i")
    rows = _parse_bitmap(data, where)
    if len(rows) != int(descriptor["cardinality"]):
        raise DeletionVectorError(
            f"{where}: {len(rows)} rows, the log says {descriptor['cardinality']}"
        )
    return rows


@dataclass(frozen=True)
class NewDeletionVectors:
    """One DV file written, and the descriptor of each bitmap in it, in the order given."""

    path: Path
    descriptors: list[dict[str, Any]]


def write_deletion_vectors(table_root: Path, bitmaps: Sequence[Any]) -> NewDeletionVectors:
    """Write ``bitmaps`` (pyroaring BitMaps, none empty) to one new DV file at the table's
    root; returns their descriptors (storage type ``u``, no prefix)."""
    name = uuid.uuid4()
    path = table_root / f"deletion_vector_{name}.bin"
    descriptors = []
    out = bytearray([_FORMAT_VERSION])
    for rows in bitmaps:
        data = _bitmap_bytes(rows)
        descriptors.append(
            {
                "storageType": "u",
                "pathOrInlineDv": z85_encode(name.bytes),
                "offset": len(out),
                "sizeInBytes": len(data),
                "cardinality": len(rows),
            }
        )
        out += struct.pack(">i", len(data)) + data + struct.pack(">I", zlib.crc32(data))
    with open(path, "xb") as f:
        f.write(out)
    return NewDeletionVectors(path, descriptors)
