"""Fuzzing the pgoutput decoder: random and mutated inputs must raise DecodeError or decode.

Run as a script for long campaigns (``python -m tests.pgoutput.fuzz --count 1000000``, or with
the file path); ``test_fuzz.py`` runs a short one on every test run and the long one under
``-m slow``. Deterministic for a given seed, so a failure can be replayed.

Seeds are valid messages of every type from the test encoder (and the captured vectors when
present); mutations are the ones that find bugs in length-prefixed binary formats: bit flips,
truncation, insertion, interesting integers written over length fields, message-byte swaps and
splices of two messages.
"""

from __future__ import annotations

import argparse
import json
import random
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    __package__ = "tests.pgoutput"

from bridge.pgoutput import DecodeError, Decoder, Lsn, StreamStart
from bridge.pgoutput.messages import (
    Begin,
    BeginPrepare,
    Commit,
    CommitPrepared,
    Delete,
    Insert,
    LogicalMessage,
    Message,
    Origin,
    Prepare,
    Relation,
    RelationColumn,
    ReplicaIdentity,
    RollbackPrepared,
    StreamAbort,
    StreamCommit,
    StreamPrepare,
    StreamStop,
    Truncate,
    TupleData,
    Type,
    Update,
)

from .encoder import encode, make_tuple

VECTORS = Path(__file__).parent / "vectors"
TAGS = b"BCORYIUDTMSEcAbPKrp"
INTERESTING = [0, 1, 2, 0x7F, 0x80, 0xFF, 0x7FFF, 0xFFFF, 0x7FFF_FFFF, 0x8000_0000, 0xFFFF_FFFF]


def random_message(rng: random.Random, xid: int | None) -> LogicalMessage:
    """One valid message of a random type; ``xid`` for the ones that carry it in a stream."""
    lsn = Lsn(rng.getrandbits(64))
    ts = rng.getrandbits(63)
    name = rng.choice(["", "public", "ns", "ünïcode", "x" * 40])

    def tup() -> TupleData:
        return make_tuple(
            [
                (k, rng.randbytes(rng.randint(0, 9)) if k in "tb" else None)
                for k in rng.choices("nutb", k=rng.randint(0, 7))
            ]
        )

    choices: list[Callable[[], LogicalMessage]] = [
        lambda: Begin(lsn, ts, rng.getrandbits(32)),
        lambda: Commit(0, lsn, lsn, ts),
        lambda: Origin(lsn, name),
        lambda: Relation(
            xid,
            rng.getrandbits(32),
            name,
            name,
            rng.choice(list(ReplicaIdentity)),
            tuple(
                RelationColumn(rng.getrandbits(1), name, 23, -1) for _ in range(rng.randint(0, 5))
            ),
        ),
        lambda: Type(xid, rng.getrandbits(32), name, name),
        lambda: Insert(xid, rng.getrandbits(32), tup()),
        lambda: Update(xid, 1, rng.choice(["K", "O"]), tup(), tup()),
        lambda: Update(xid, 1, None, None, tup()),
        lambda: Delete(xid, 1, rng.choice(["K", "O"]), tup()),
        lambda: Truncate(xid, rng.randint(0, 3), tuple(range(rng.randint(0, 4)))),
        lambda: Message(xid, rng.random() < 0.5, lsn, name, rng.randbytes(rng.randint(0, 20))),
        lambda: StreamStart(rng.getrandbits(32), rng.random() < 0.5),
        lambda: StreamStop(),
        lambda: StreamCommit(1, 0, lsn, lsn, ts),
        lambda: StreamAbort(1, 2),
        lambda: StreamAbort(1, 2, lsn, ts),
        lambda: BeginPrepare(lsn, lsn, ts, 5, name),
        lambda: Prepare(0, lsn, lsn, ts, 5, name),
        lambda: CommitPrepared(0, lsn, lsn, ts, 5, name),
        lambda: RollbackPrepared(0, lsn, lsn, ts, ts, 5, name),
        lambda: StreamPrepare(0, lsn, lsn, ts, 5, name),
    ]
    return rng.choice(choices)()


def seed_corpus(rng: random.Random, size: int = 400) -> list[bytes]:
    corpus = [
        encode(random_message(rng, rng.choice([None, rng.getrandbits(32)]))) for _ in range(size)
    ]
    for path in sorted(VECTORS.glob("pg*.json")):
        for case in json.loads(path.read_text())["cases"]:
            # Every distinct message shape, not all 800 rows of a streamed transaction.
            seen: set[str] = set()
            for m in case["messages"]:
                if m["expect"]["type"] not in seen or rng.random() < 0.01:
                    seen.add(m["expect"]["type"])
                    corpus.append(bytes.fromhex(m["hex"]))
    return corpus


def mutate(rng: random.Random, data: bytes, corpus: list[bytes]) -> bytes:
    b = bytearray(data)
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        op = rng.randrange(9)
        if op == 0 and b:  # flip one bit
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
        elif op == 1 and b:  # truncate
            del b[rng.randrange(len(b)) :]
        elif op == 2:  # insert random bytes
            i = rng.randint(0, len(b))
            b[i:i] = rng.randbytes(rng.randint(1, 8))
        elif op == 3 and len(b) >= 4:  # an interesting 32-bit integer over a length field
            i = rng.randrange(len(b) - 3)
            b[i : i + 4] = struct.pack("!I", rng.choice(INTERESTING))
        elif op == 4 and len(b) >= 2:  # an interesting 16-bit integer (column counts)
            i = rng.randrange(len(b) - 1)
            b[i : i + 2] = struct.pack("!H", rng.choice(INTERESTING) & 0xFFFF)
        elif op == 5 and b:  # another message byte
            b[0] = rng.choice(TAGS)
        elif op == 6:  # splice with another message
            other = rng.choice(corpus)
            b = b[: rng.randint(0, len(b))] + other[rng.randint(0, len(other)) :]
        elif op == 7 and b:  # replace a byte with a tuple kind or marker
            b[rng.randrange(len(b))] = rng.choice(b"nutbKON\x00\xff")
        elif op == 8 and b:  # delete a byte
            del b[rng.randrange(len(b))]
    return bytes(b)


@dataclass
class FuzzResult:
    inputs: int = 0
    decoded: int = 0
    decode_errors: int = 0
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0


def run_fuzz(count: int, seed: int = 0) -> FuzzResult:
    """Feed ``count`` inputs to decoders of every protocol version, in and out of a stream."""
    rng = random.Random(seed)
    corpus = seed_corpus(rng)
    result = FuzzResult()
    started = time.perf_counter()
    decoders = [Decoder(1), Decoder(2), Decoder(3), Decoder(4), Decoder(4, streaming_parallel=True)]
    enter = encode(StreamStart(1, True))
    for n in range(count):
        r = rng.random()
        if r < 0.1:  # pure noise behind a valid message byte
            data = bytes([rng.choice(TAGS)]) + rng.randbytes(rng.randint(0, 40))
        elif r < 0.15:
            data = rng.randbytes(rng.randint(0, 40))
        else:
            data = mutate(rng, rng.choice(corpus), corpus)
        d = decoders[n % len(decoders)]
        # Half of the time inside a stream, so the Xid-prefixed layouts get fuzzed too.
        if d.protocol_version >= 2 and (n // len(decoders)) % 2 == 1 and not d.in_stream:
            d.decode(enter)
        before = d.in_stream
        try:
            msg = d.decode(data)
            result.decoded += 1
            # Whatever decodes must be exactly what the bytes said: re-encoding it gives the
            # input back. (Message and Stream Start keep only one bit of a flags byte.)
            if not isinstance(msg, Message | StreamStart) and encode(msg) != data:
                result.failures.append(f"decoded {msg!r} does not re-encode to {data.hex()}")
        except DecodeError:
            result.decode_errors += 1
            if d.in_stream != before:
                result.failures.append(f"state changed on error: {data.hex()}")
        except Exception as exc:  # anything else escaping the decoder is a bug
            result.failures.append(
                f"{type(exc).__name__}: {exc} on v{d.protocol_version} "
                f"in_stream={before}: {data.hex()}"
            )
            if len(result.failures) >= 20:
                break
        result.inputs += 1
    result.seconds = time.perf_counter() - started
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    r = run_fuzz(args.count, args.seed)
    print(
        f"inputs={r.inputs} decoded={r.decoded} decode_errors={r.decode_errors} "
        f"failures={len(r.failures)} seconds={r.seconds:.1f} seed={args.seed}"
    )
    for f in r.failures:
        print(f)
    return 1 if r.failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
