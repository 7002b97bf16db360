"""PostgreSQL's wire forms of the wide table's types, rendered here as the server writes them.

interval (``interval_out`` under ``IntervalStyle=postgres``, ``interval_send``), numeric
without typmod (``numeric_out`` / ``numeric_send``), one-dimensional arrays (``array_out``'s
quoting and escaping, ``array_send``) and inet (``inet_out`` / ``inet_send``), each as a
strategy of (text form, binary form) pairs for tests/native. Computed with plain integer
arithmetic and the standard library, not with bridge's converters, so that the tests compare
the C encoder and the Python path on the server's spellings rather than on each other's.
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Sequence
from decimal import Decimal

from hypothesis import strategies as st
from psycopg.adapt import PyFormat, Transformer

Pair = tuple[bytes, bytes]

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
US_PER_HOUR = 3_600_000_000

_NUMERIC_DUMPER = Transformer(None).get_dumper(Decimal(0), PyFormat.BINARY)


def _trunc_div(a: int, b: int) -> tuple[int, int]:
    """C's truncating division: (quotient, remainder), the remainder with a's sign."""
    q = abs(a) // b
    q = -q if a < 0 else q
    return q, a - q * b


# --- interval ----------------------------------------------------------------------------------


def interval_out(months: int, days: int, micros: int) -> bytes:
    """interval_out under IntervalStyle=postgres (EncodeInterval's INTSTYLE_POSTGRES branch):
    years, mons and days as signed counts (``+`` after a negative part), then the time
    ``[+-]HH:MM:SS[.f]`` when non-zero or when nothing else was printed."""
    if (months, days, micros) == (INT32_MAX, INT32_MAX, INT64_MAX):
        return b"infinity"
    if (months, days, micros) == (INT32_MIN, INT32_MIN, INT64_MIN):
        return b"-infinity"
    year, mon = _trunc_div(months, 12)
    hour, rest = _trunc_div(micros, US_PER_HOUR)
    minute, rest = _trunc_div(rest, 60_000_000)
    sec, fsec = _trunc_div(rest, 1_000_000)
    out = ""
    is_before = False
    is_zero = True
    for value, unit in ((year, "year"), (mon, "mon"), (days, "day")):
        if value == 0:
            continue
        plus = "+" if is_before and value > 0 else ""
        out += f"{'' if is_zero else ' '}{plus}{value} {unit}{'' if value == 1 else 's'}"
        is_before = value < 0
        is_zero = False
    if is_zero or hour or minute or sec or fsec:
        minus = hour < 0 or minute < 0 or sec < 0 or fsec < 0
        sign = "-" if minus else ("+" if is_before else "")
        out += f"{'' if is_zero else ' '}{sign}{abs(hour):02d}:{abs(minute):02d}:{abs(sec):02d}"
        if fsec:
            out += f".{abs(fsec):06d}".rstrip("0")
    return out.encode()


def interval_send(months: int, days: int, micros: int) -> bytes:
    return struct.pack(">qii", micros, days, months)


def interval_pair(parts: tuple[int, int, int]) -> Pair:
    return interval_out(*parts), interval_send(*parts)


def intervals(full_range: bool = False) -> st.SearchStrategy[Pair]:
    """Intervals whose MicroDuration fits a long (``full_range``: any months, days and
    microseconds PostgreSQL stores, many of which the Python path clamps)."""
    if full_range:
        parts = st.tuples(
            st.integers(INT32_MIN, INT32_MAX),
            st.integers(INT32_MIN, INT32_MAX),
            st.integers(INT64_MIN, INT64_MAX),
        )
    else:
        # |total| < 1.2e6 * 2.63e12 + 3.6e7 * 8.64e10 + 1e15 < 6.4e18
        parts = st.tuples(
            st.integers(-1_200_000, 1_200_000) | st.sampled_from([0, 1, -1, 11, 12, 13, -12, -13]),
            st.integers(-36_000_000, 36_000_000) | st.sampled_from([0, 1, -1, 30, 31]),
            st.integers(-(10**15), 10**15)
            | st.sampled_from([0, 1, -1, 999_999, 1_000_000, US_PER_HOUR, -US_PER_HOUR - 1]),
        )
    return parts.map(interval_pair)


# --- numeric -----------------------------------------------------------------------------------


def numeric_out(unscaled: int, dscale: int) -> bytes:
    """numeric_out of a finite numeric: ``dscale`` fraction digits (an unconstrained numeric
    keeps the display scale of its computation, trailing zeros included); no exponent ever
    (1E+5 prints 100000)."""
    sign = "-" if unscaled < 0 else ""
    digits = str(abs(unscaled)).rjust(dscale + 1, "0")
    if not dscale:
        return f"{sign}{digits}".encode()
    return f"{sign}{digits[:-dscale]}.{digits[-dscale:]}".encode()


def numeric_send(unscaled: int, dscale: int) -> bytes:
    dumped = _NUMERIC_DUMPER.dump(Decimal(unscaled).scaleb(-dscale))
    assert dumped is not None
    return bytes(dumped)


def numeric_pair(unscaled: int, dscale: int) -> Pair:
    return numeric_out(unscaled, dscale), numeric_send(unscaled, dscale)


def unconstrained_numerics(max_digits: int = 90) -> st.SearchStrategy[Pair]:
    """Numerics of up to ``max_digits`` digits with any display scale up to 30."""
    limit = 10**max_digits - 1
    unscaled = st.integers(-limit, limit) | st.integers(-(10**20), 10**20)
    edges = st.sampled_from([0, 1, -1, 127, 128, -128, -129, 255, 256, 10**18, -(10**38)])
    return st.builds(numeric_pair, unscaled | edges, st.integers(0, 30))


# --- arrays ------------------------------------------------------------------------------------

_ARRAY_SPECIAL = frozenset(b'{}",\\')
_ARRAY_SPACE = frozenset(b" \t\n\r\v\f")  # array_isspace


def array_item_out(text: bytes) -> bytes:
    """One element as array_out writes it: quoted when empty, NULL in any case, or holding a
    brace, comma, quote, backslash or white space; inside quotes ``"`` and ``\\`` get a
    backslash."""
    if (
        not text
        or text.lower() == b"null"
        or any(b in _ARRAY_SPECIAL or b in _ARRAY_SPACE for b in text)
    ):
        escaped = text.replace(b"\\", b"\\\\").replace(b'"', b'\\"')
        return b'"' + escaped + b'"'
    return text


def array_out(items: Sequence[bytes | None]) -> bytes:
    return b"{" + b",".join(b"NULL" if i is None else array_item_out(i) for i in items) + b"}"


def array_send(items: Sequence[bytes | None], element_oid: int) -> bytes:
    """array_send of a one-dimensional array (lower bound 1), or of an empty one (ndim 0)."""
    has_null = int(any(i is None for i in items))
    if not items:
        return struct.pack(">iiI", 0, 0, element_oid)
    out = bytearray(struct.pack(">iiIii", 1, has_null, element_oid, len(items), 1))
    for item in items:
        if item is None:
            out += struct.pack(">i", -1)
        else:
            out += struct.pack(">i", len(item)) + item
    return bytes(out)


def arrays(
    items: st.SearchStrategy[Pair], element_oid: int, max_size: int = 8
) -> st.SearchStrategy[Pair]:
    """Arrays of ``items`` (with NULL elements): (array_out, array_send)."""

    def render(elements: list[Pair | None]) -> Pair:
        text = array_out([None if e is None else e[0] for e in elements])
        binary = array_send([None if e is None else e[1] for e in elements], element_oid)
        return text, binary

    return st.lists(st.none() | items, max_size=max_size).map(render)


# --- inet --------------------------------------------------------------------------------------


def inet_pair(address: ipaddress.IPv4Address | ipaddress.IPv6Address, bits: int) -> Pair:
    """inet_out (the address, ``/bits`` unless the full length) and inet_send."""
    full = address.max_prefixlen
    text = str(address) if bits == full else f"{address}/{bits}"
    family = 2 if address.version == 4 else 3
    packed = address.packed
    return text.encode(), bytes((family, bits, 0, len(packed))) + packed


def inets() -> st.SearchStrategy[Pair]:
    v4 = st.builds(inet_pair, st.ip_addresses(v=4), st.sampled_from([32, 32, 24, 8, 0, 31]))
    # IPv6 without an embedded IPv4 form (inet_out spells those with a dotted quad): built
    # directly, a leading zero run of 10 bytes turned into a global-unicast prefix.
    v6 = st.ip_addresses(v=6).map(
        lambda a: a if a.packed[:10] != bytes(10) else ipaddress.IPv6Address(b"\x20" + a.packed[1:])
    )
    return v4 | st.builds(inet_pair, v6, st.sampled_from([128, 64, 48]))
