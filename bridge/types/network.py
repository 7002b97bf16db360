"""Network addresses: inet, cidr, macaddr, macaddr8 — Avro strings in PostgreSQL's text form,
as Debezium sends them.

Binary values are formatted to exactly what the server's output function prints, so a column
reads the same whichever wire format the publication uses (``inet`` omits a full-length prefix,
``cidr`` never does; MAC addresses are lower-case, colon-separated).
"""

from __future__ import annotations

import ipaddress

from bridge.native import ops
from bridge.types.base import TypeRegistry, simple, utf8
from bridge.types.errors import ConversionError

_AF_INET = 2  # PostgreSQL's PGSQL_AF_INET
_AF_INET6 = 3  # PGSQL_AF_INET6


def _ipv6_text(addr: bytes) -> str:
    # inet_net_ntop (BIND's rules) prints an IPv4-mapped (::ffff:a.b.c.d) or IPv4-compatible
    # (::a.b.c.d, but not :: or ::1) address with a dotted quad; Python before 3.13 does not.
    if addr[:10] == bytes(10):
        words = addr[10:12], addr[12:14], addr[14:16]
        tail = str(ipaddress.IPv4Address(addr[12:16]))
        if words[0] == b"\xff\xff":
            return f"::ffff:{tail}"
        if words[0] == b"\0\0" and (words[1] != b"\0\0" or words[2] not in (b"\0\0", b"\0\1")):
            return f"::{tail}"
    return str(ipaddress.IPv6Address(addr))


def inet_from_binary(raw: bytes) -> str:
    family, bits, is_cidr, size = raw[0], raw[1], raw[2], raw[3]
    addr = bytes(raw[4 : 4 + size])
    if family == _AF_INET and size == 4:
        text, full = str(ipaddress.IPv4Address(addr)), 32
    elif family == _AF_INET6 and size == 16:
        text, full = _ipv6_text(addr), 128
    else:
        raise ConversionError("inet", f"unknown address family {family}", raw=raw)
    if is_cidr or bits != full:
        return f"{text}/{bits}"
    return text


def mac_from_binary(raw: bytes) -> str:
    return ":".join(f"{b:02x}" for b in raw)


def register_types(registry: TypeRegistry) -> None:
    # The text forms are the strings as sent: the C encoder copies them (after a UTF-8 check);
    # it does not format the binary forms.
    text = (ops.STRING, ops.NONE)
    registry.add_builtin("inet", simple("inet", "string", utf8, inet_from_binary, native=text))
    registry.add_builtin("cidr", simple("cidr", "string", utf8, inet_from_binary, native=text))
    registry.add_builtin("macaddr", simple("macaddr", "string", utf8, mac_from_binary, native=text))
    registry.add_builtin(
        "macaddr8", simple("macaddr8", "string", utf8, mac_from_binary, native=text)
    )
