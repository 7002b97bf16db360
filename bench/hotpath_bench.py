"""Benchmark: the producer's hot path without the stack — pgoutput bytes in, Kafka records out.

    .venv/bin/python bench/hotpath_bench.py [--rows 200000] [--rounds 5] [--tx 1000]
                                            [--table six|wide]

Generates the pgoutput bytes a server sends for ``--rows`` inserts into a table of
``bench/pipeline_bench.py``: ``--table six`` (the default), its 6-column table (bigint key,
text, numeric(12,2), timestamptz, bool, jsonb); ``--table wide``, its 13-column ``bench_wide``
(bigint key, interval, numeric without typmod, int[], text[], inet, uuid, jsonb, date, time,
timestamp, timestamptz, bytea), the values its INSERT writes as the server prints them. Text
format, ``--tx``-row transactions: Begin, Inserts, Commit after one Relation. It feeds them
through the real :class:`bridge.pipeline.Pipeline` — decoder, relation cache, events or insert
lane, Avro serializer — into a publisher that keeps nothing (deliveries acknowledged at each
poll). No PostgreSQL, Kafka or registry: what is measured is this process's CPU per change,
the part of ``pipeline_bench``'s figure that the code decides.

Three variants, each in its own interpreter (so ``PGBRIDGE_NATIVE=0`` takes effect at import):

- **python**: ``PGBRIDGE_NATIVE=0``, the pure-Python path;
- **native**: the C ``scan_tuple`` and ``encode_row`` (the path of ``main`` before the lane);
- **lane**: native plus the insert lane (``encode_insert``: one C call per insert).

Printed for each: changes/s (wall) and CPU microseconds per change (process CPU time,
``time.process_time``), the median over ``--rounds`` rounds, and the ratios. The variants
produce byte-identical records (tests/native/test_insert_lane.py); this only times them.

Then (``--table six`` only) the snapshot's row scan: the same rows as binary COPY rows (one
CopyData message each, as the server sends them) through :meth:`CopyBinaryParser.row`, with the
Python reader and with the C ``scan_copy_row``: rows/s and CPU microseconds per row
(tests/native/test_scan_copy_row.py proves them equal).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

OID = 16384
Column = tuple[int, str, int, int]  # flags (1 = key), name, type oid, typmod
SIX: tuple[Column, ...] = (
    (1, "id", 20, -1),
    (0, "name", 25, -1),
    (0, "amount", 1700, ((12 << 16) | 2) + 4),
    (0, "created", 1184, -1),
    (0, "active", 16, -1),
    (0, "doc", 3802, -1),
)
WIDE: tuple[Column, ...] = (
    (1, "id", 20, -1),
    (0, "iv", 1186, -1),
    (0, "num", 1700, -1),
    (0, "ints", 1007, -1),
    (0, "tags", 1009, -1),
    (0, "ip", 869, -1),
    (0, "u", 2950, -1),
    (0, "doc", 3802, -1),
    (0, "d", 1082, -1),
    (0, "tm", 1083, -1),
    (0, "ts", 1114, -1),
    (0, "tz", 1184, -1),
    (0, "raw", 17, -1),
)


def relation_message(columns: tuple[Column, ...]) -> bytes:
    out = bytearray(b"R" + struct.pack("!I", OID) + b"public\x00bench\x00d")
    out += struct.pack("!h", len(columns))
    for flags, name, oid, typmod in columns:
        out += struct.pack("!b", flags) + name.encode() + b"\x00" + struct.pack("!Ii", oid, typmod)
    return bytes(out)


def six_values(g: int) -> list[str]:
    """The row pipeline_bench's INSERT writes for ``g``, in text form."""
    seconds = 1_700_000_000 - g
    created = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(seconds)) + "+00"
    doc = json.dumps(
        {"sku": f"SKU-{g % 5000}", "qty": g % 7, "note": f"{g * 2654435761 % 2**128:032x}"}
    )
    return [
        str(g),
        f"customer {g}",
        f"{(g % 100000) / 100.0:.2f}",
        created,
        "t" if g % 3 == 0 else "f",
        doc,
    ]


def _numeric_quotient(g: int) -> str:
    """numeric_out of ``g * 1.000001 / 7``: numeric division's display scale (select_div_scale:
    at least 16 significant digits, base-10000 weights), rounded half away from zero."""
    dividend = Decimal(g) * Decimal("1.000001")
    int_digits = len(str(int(dividend)))
    weight = (int_digits - 1) // 4  # base-10000 weight of the first digit group
    first_group = int(str(int(dividend))[: int_digits - 4 * weight])
    qweight = weight - (1 if first_group <= 7 else 0)
    scale = max(16 - 4 * qweight, 6)
    quotient = (dividend / 7).quantize(Decimal(1).scaleb(-scale), rounding=ROUND_HALF_UP)
    return format(quotient, "f")


def wide_values(g: int) -> list[str]:
    """The row pipeline_bench's WIDE_INSERT writes for ``g``, as the server prints it."""
    days, secs = g % 400, g % 86400
    clock = f"{secs // 3600:02d}:{secs // 60 % 60:02d}:{secs % 60:02d}"
    interval = f"{days} day{'' if days == 1 else 's'} {clock}" if days else clock
    md5 = hashlib.md5(str(g).encode()).hexdigest()
    ms = g % 1000
    ts = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(1_704_067_200 + g // 1000))
    ts += f".{ms:03d}".rstrip("0") if ms else ""
    now = 1_764_000_000.123456 - g
    tz = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(int(now))) + ".123456+00"
    return [
        str(g),
        interval,
        _numeric_quotient(g),
        f"{{{g % 10},{g % 100},{g % 1000}}}",
        f"{{a{g % 7},b{g % 11}}}",
        f"10.{g % 256}.{g // 256 % 256}.1",
        f"{md5[:8]}-{md5[8:12]}-{md5[12:16]}-{md5[16:20]}-{md5[20:]}",
        json.dumps({"k": g % 5000}),
        time.strftime("%Y-%m-%d", time.gmtime(1_704_067_200 + (g % 3650) * 86400)),
        clock,
        ts,
        tz,
        "\\x" + md5,
    ]


def insert_message(g: int, table: str = "six") -> bytes:
    """The row of ``g`` in ``table`` as pgoutput's text TupleData of an Insert."""
    values = wide_values(g) if table == "wide" else six_values(g)
    out = bytearray(b"I" + struct.pack("!I", OID) + b"N" + struct.pack("!h", len(values)))
    for v in values:
        raw = v.encode()
        out += b"t" + struct.pack("!i", len(raw)) + raw
    return bytes(out)


def stream(rows: int, tx_rows: int, table: str = "six") -> list[bytes]:
    messages = [relation_message(WIDE if table == "wide" else SIX)]
    lsn = 0x1000000
    commit_ts = 800_000_000_000_000
    for start in range(0, rows, tx_rows):
        lsn += 0x10000
        xid = 1000 + start // tx_rows
        messages.append(b"B" + struct.pack("!qqi", lsn, commit_ts, xid))
        end = min(rows, start + tx_rows) + 1
        messages += [insert_message(g, table) for g in range(start + 1, end)]
        messages.append(b"C" + struct.pack("!bqqq", 0, lsn, lsn + 0x30, commit_ts))
    return messages


class _Source:
    def __init__(self, payloads: list[bytes]) -> None:
        from bridge.pgoutput import Decoder
        from bridge.pgoutput.lsn import Lsn

        self._payloads = payloads
        self._decode = Decoder(1).decode
        self._start = Lsn(0)
        self.message_lsn = 0

    @property
    def start_lsn(self) -> Any:
        return self._start

    def messages(self) -> Iterator[Any]:
        # As the replication source: each message's WAL position set as it is yielded.
        decode = self._decode
        for n, payload in enumerate(self._payloads):
            self.message_lsn = 0x1_0000_0000 + 40 * n
            yield decode(payload)

    def acknowledge(self, flush_lsn: Any) -> None:
        pass

    def close(self) -> None:
        pass


class _Registrar:
    on_wait: Callable[[], None] | None = None

    def register_relation(self, schemas: Any) -> Any:
        from bridge.sink.registry import RegisteredSchemas

        return RegisteredSchemas(1 if schemas.key_schema is not None else None, 2)

    def register(self, subject: str, schema: Any, *, table: str = "?") -> int:
        return 3


class _Publisher:
    """Keeps nothing; acknowledges every record at the next poll, as a fast broker would."""

    on_wait: Callable[[], None] | None = None

    def __init__(self) -> None:
        self._pending: list[Callable[[], None]] = []
        self.nbytes = 0

    def publish(self, topic: str, key: Any, value: Any, on_delivered: Callable[[], None]) -> None:
        self._pending.append(on_delivered)
        self.nbytes += len(value) if value else 0

    def send_pending(self) -> None:
        pass

    def poll(self, timeout: float = 0.0) -> int:
        pending, self._pending = self._pending, []
        for callback in pending:
            callback()
        return len(pending)

    def flush(self, timeout: float) -> int:
        self.poll()
        return 0

    def close(self, timeout: float = 30.0) -> int:
        return 0


def one_round(payloads: list[bytes], lane: bool) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds, published records) of one pass through a new Pipeline."""
    from bridge import native
    from bridge.events import EventBuilder
    from bridge.pipeline import Pipeline, PipelineOptions
    from bridge.sink.serializer import EnvelopeSerializer, SourceSettings

    if not lane:
        native.encode_insert = None
    pipeline = Pipeline(
        _Source(payloads),  # type: ignore[arg-type]
        EventBuilder("bench"),
        _Registrar(),  # type: ignore[arg-type]
        EnvelopeSerializer(SourceSettings(topic_prefix="bench", database="bench")),
        _Publisher(),
        PipelineOptions(messages_topic="bench.messages"),
    )
    cpu0, t0 = time.process_time(), time.perf_counter()
    pipeline.run()
    return time.perf_counter() - t0, time.process_time() - cpu0, pipeline.events_published


def copy_rows(rows: int) -> list[bytes]:
    """The rows as binary COPY rows (the snapshot selects numeric and jsonb as text)."""
    out = []
    for g in range(1, rows + 1):
        doc = json.dumps({"sku": f"SKU-{g % 5000}", "qty": g % 7, "note": f"{g:032x}"})
        values = [
            struct.pack("!q", g),
            f"customer {g}".encode(),
            f"{(g % 100000) / 100.0:.2f}".encode(),
            struct.pack("!q", (1_700_000_000 - g - 946_684_800) * 1_000_000),
            b"\x01" if g % 3 == 0 else b"\x00",
            doc.encode(),
        ]
        row = bytearray(struct.pack("!h", len(values)))
        for v in values:
            row += struct.pack("!i", len(v)) + v
        out.append(bytes(row))
    return out


def copy_round(messages: list[bytes], use_c: bool) -> tuple[float, float, int]:
    from bridge import native
    from bridge.snapshot.copy_binary import COPY_SIGNATURE, CopyBinaryParser

    saved = native.scan_copy_row
    if not use_c:
        native.scan_copy_row = None
    try:
        parser = CopyBinaryParser(6, "bench", b"bbtbbt")
        parser.feed(COPY_SIGNATURE + bytes(8))
        row = parser.row
        cpu0, t0 = time.process_time(), time.perf_counter()
        for message in messages:
            row(message)
        return time.perf_counter() - t0, time.process_time() - cpu0, parser.rows
    finally:
        native.scan_copy_row = saved


def copy_bench(rows: int, rounds: int) -> None:
    from bridge import native

    messages = copy_rows(rows)
    summary = {}
    for name, use_c in (("python", False), ("native", True)):
        if use_c and native.scan_copy_row is None:
            print("COPY row scan, native: the C extension is not built; skipped")
            return
        copy_round(messages[:5000], use_c)
        results = [copy_round(messages, use_c) for _ in range(rounds)]
        wall = statistics.median(r[0] for r in results)
        cpu = statistics.median(r[1] for r in results)
        summary[name] = cpu / rows * 1e6
        print(
            f"COPY row scan, {name:>6}: {rows / wall:>10,.0f} rows/s   "
            f"CPU {summary[name]:5.2f} us/row"
        )
    print(
        f"COPY row scan, native / python CPU per row: {summary['native'] / summary['python']:.2f}"
    )


def child(variant: str, rows: int, rounds: int, tx_rows: int, table: str) -> None:
    payloads = stream(rows, tx_rows, table)
    one_round(payloads[: min(len(payloads), 5000)], variant == "lane")  # warm-up
    results = [one_round(payloads, variant == "lane") for _ in range(rounds)]
    from bridge import native

    print(json.dumps({"results": results, "native": native.ENABLED}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tx", type=int, default=1000, help="rows per transaction")
    parser.add_argument(
        "--table",
        choices=["six", "wide"],
        default="six",
        help="six: the 6-column table; wide: the 13-column type zoo table (bench_wide)",
    )
    parser.add_argument("--child", choices=["python", "native", "lane"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.rows, args.rounds, args.tx, args.table)
        return
    shape = "13 columns of bench_wide" if args.table == "wide" else "6 columns"
    print(
        f"{args.rows:,} inserts ({shape}, text format, {args.tx}-row transactions), "
        f"{args.rounds} rounds per variant, median; Python {sys.version.split()[0]}, "
        f"{os.cpu_count()} cores"
    )
    summary: dict[str, tuple[float, float]] = {}
    for variant in ("python", "native", "lane"):
        env = dict(os.environ)
        env["PGBRIDGE_NATIVE"] = "0" if variant == "python" else "1"
        command = [sys.executable, __file__, "--child", variant, "--rows", str(args.rows)]
        command += ["--rounds", str(args.rounds), "--tx", str(args.tx), "--table", args.table]
        out = subprocess.run(
            command,
            check=True,
            capture_output=True,
            text=True,
            env=env,
        ).stdout
        answer = json.loads(out.strip().splitlines()[-1])
        if variant != "python" and not answer["native"]:
            print(f"{variant:>7}: the C extension is not built (pip install -e .); skipped")
            continue
        results = answer["results"]
        wall = statistics.median(r[0] for r in results)
        cpu = statistics.median(r[1] for r in results)
        records = results[0][2]
        rate, us = records / wall, cpu / records * 1e6
        summary[variant] = (rate, us)
        print(f"{variant:>7}: {rate:>10,.0f} changes/s   CPU {us:5.2f} us/change")
    if "native" in summary and "lane" in summary:
        (n_rate, n_us), (l_rate, l_us) = summary["native"], summary["lane"]
        print(
            f"lane / native: {l_rate / n_rate:.2f}x changes/s, "
            f"CPU per change {l_us:.2f} vs {n_us:.2f} us ({l_us / n_us:.2f})"
        )
    if "python" in summary and "lane" in summary:
        (p_rate, p_us), (l_rate, l_us) = summary["python"], summary["lane"]
        print(f"lane / python: {l_rate / p_rate:.2f}x changes/s, CPU {l_us:.2f} vs {p_us:.2f} us")
    if args.table == "six":
        copy_bench(args.rows, args.rounds)


if __name__ == "__main__":
    main()
