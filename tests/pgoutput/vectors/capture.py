"""Capture pgoutput test vectors from real PostgreSQL servers.

Usage (as root or a normal user; the servers run as a non-root service user)::

    .venv/bin/python tests/pgoutput/vectors/capture.py          # PostgreSQL 13 to 18
    .venv/bin/python tests/pgoutput/vectors/capture.py 13 18    # only these

For each major version it starts a throwaway cluster (``bridge.devstack.postgres``), runs a set of
scenarios, each on its own slot, and reads the raw pgoutput bytes with
``pg_logical_slot_peek_binary_changes`` — one row per message, no replication connection needed.
It writes ``pg<major>.json`` next to this file.

Scenarios need the server features they use: messages and binary mode PostgreSQL 14, two-phase
PostgreSQL 15, streaming 14 (protocol 2), ``streaming = parallel`` 16 (protocol 4). PostgreSQL 18
no longer decodes a transaction that had already aborted when decoding reached it, so on 18 the
whole-transaction Stream Abort is covered by the older servers' vectors; the case's ``notes`` say
so.

Each message in a vector holds the payload in hex, the LSN and xid the server reported for it,
and ``expect``: what a correct decoder must find in it. Expectations are built from the SQL the
scenario ran (values, key columns, options, identities) and from values the server reported
through SQL functions (xids from ``pg_current_xact_id``/``pg_locks``, commit timestamps from
``pg_xact_commit_timestamp``, WAL positions from ``pg_current_wal_insert_lsn`` and the peek's own
``lsn`` column) — never from a decoder. Only the message byte of each payload is read here, to
line the expectations up with streamed chunks whose boundaries the server chooses.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import struct
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from bridge.devstack.postgres import PostgresCluster, ensure_postgres_binaries

HERE = Path(__file__).resolve().parent
PG_EPOCH = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
Expect = dict[str, Any]

# Enough rows of this size to pass logical_decoding_work_mem = 64kB several times over, so the
# server streams the transaction in more than one chunk.
BIG_ROWS = 800
FILLER = "x" * 20


def lsn_int(text: str) -> int:
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def pg_micros(ts: dt.datetime) -> int:
    delta = ts - PG_EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def text_col(value: object) -> list[Any]:
    """A TupleData column in text mode: ['t', text] ; None means SQL NULL."""
    return ["n", None] if value is None else ["t", str(value)]


# --- the server session -------------------------------------------------------------------------


@dataclass
class Server:
    conn: psycopg.Connection[Any]
    major: int
    proto: int
    relations: dict[str, int] = field(default_factory=dict)

    def one(self, sql: str, *params: Any) -> Any:
        row = self.conn.execute(sql, params or None).fetchone()
        assert row is not None
        return row[0]

    def run(self, sql: str) -> None:
        self.conn.execute(sql)

    def oid(self, table: str) -> int:
        if table not in self.relations:
            self.relations[table] = int(self.one("SELECT %s::regclass::oid", table))
        return self.relations[table]

    def xid(self) -> int:
        # txid_current() exists on every supported version; the low 32 bits are the wire xid.
        return int(self.one("SELECT txid_current()")) & 0xFFFF_FFFF

    def sub_xids(self, top: int) -> list[int]:
        """The xids this session holds besides ``top``: its open subtransactions."""
        rows = self.conn.execute(
            "SELECT transactionid::text FROM pg_locks WHERE locktype = 'transactionid'"
            " AND pid = pg_backend_pid()"
        ).fetchall()
        return sorted({int(r[0]) for r in rows} - {top})

    def wal(self) -> int:
        return lsn_int(self.one("SELECT pg_current_wal_insert_lsn()::text"))

    def clock(self) -> int:
        return pg_micros(self.one("SELECT clock_timestamp()"))

    def abort_bounds(self, abort: Callable[[], None]) -> list[int]:
        """[wal before, wal after, clock before, clock after] around ``abort``."""
        lsn0, ts0 = self.wal(), self.clock()
        abort()
        return [lsn0, self.wal(), ts0, self.clock()]

    def commit_ts(self, xid: int) -> int:
        return pg_micros(self.one("SELECT pg_xact_commit_timestamp(%s::text::xid)", str(xid)))


@dataclass
class Txn:
    """What the script knows about one transaction it ran."""

    xid: int
    wal_before_commit: int = 0
    wal_after_commit: int = 0
    commit_ts: int = 0


def commit(srv: Server, txn: Txn, sql: str = "COMMIT") -> Txn:
    txn.wal_before_commit = srv.wal()
    srv.run(sql)
    txn.wal_after_commit = srv.wal()
    txn.commit_ts = srv.commit_ts(txn.xid)
    return txn


def begin(srv: Server) -> Txn:
    srv.run("BEGIN")
    return Txn(srv.xid())


# --- expectations -----------------------------------------------------------------------------


def exp_begin(t: Txn) -> Expect:
    return {
        "type": "Begin",
        "xid": t.xid,
        "commit_ts": t.commit_ts,
        "final_lsn_between": [t.wal_before_commit, t.wal_after_commit],
    }


def exp_commit(t: Txn) -> Expect:
    # end_lsn is the position the peek reports for the Commit row; checked against it.
    return {
        "type": "Commit",
        "flags": 0,
        "commit_ts": t.commit_ts,
        "commit_lsn_between": [t.wal_before_commit, t.wal_after_commit],
        "end_lsn_is_row_lsn": True,
    }


def exp_relation(
    srv: Server,
    table: str,
    identity: str,
    columns: list[tuple[str, str, bool]],
    xid: int | None = None,
) -> Expect:
    """``columns``: (name, type name, part of the key)."""
    cols = []
    for name, typ, key in columns:
        type_oid, typmod = srv.conn.execute(
            "SELECT atttypid::int, atttypmod FROM pg_attribute"
            " WHERE attrelid = %s AND attname = %s",
            (srv.oid(table), name),
        ).fetchone() or (0, 0)
        assert int(srv.one("SELECT %s::regtype::oid::int", typ)) == type_oid, (table, name)
        cols.append({"name": name, "key": key, "type_oid": type_oid, "type_modifier": typmod})
    return {
        "type": "Relation",
        "xid": xid,
        "relation_oid": srv.oid(table),
        "namespace": "public",
        "relation_name": table,
        "replica_identity": identity,
        "columns": cols,
    }


def exp_row(
    kind: str,
    srv: Server,
    table: str,
    new: list[list[Any]] | None = None,
    old: list[list[Any]] | None = None,
    old_kind: str | None = None,
    xid: int | None = None,
) -> Expect:
    out: Expect = {"type": kind, "xid": xid, "relation_oid": srv.oid(table)}
    if kind in ("Insert", "Update"):
        out["new_tuple"] = new
    if kind in ("Update", "Delete"):
        out["old_kind"] = old_kind
        out["old_tuple"] = old
    return out


# --- scenarios ---------------------------------------------------------------------------------

SETUP = """
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE TABLE t_default (id int PRIMARY KEY, note text, flag bool, m mood);
CREATE TABLE t_full (id int, note text);
ALTER TABLE t_full REPLICA IDENTITY FULL;
CREATE TABLE t_index (id int NOT NULL, code text NOT NULL, note text);
CREATE UNIQUE INDEX t_index_code ON t_index (code);
ALTER TABLE t_index REPLICA IDENTITY USING INDEX t_index_code;
CREATE TABLE t_nothing (id int, note text);
ALTER TABLE t_nothing REPLICA IDENTITY NOTHING;
CREATE TABLE t_toast (id int PRIMARY KEY, counter int, big text);
ALTER TABLE t_toast ALTER COLUMN big SET STORAGE EXTERNAL;
CREATE TABLE t_parent (id int PRIMARY KEY);
CREATE TABLE t_child (id int PRIMARY KEY, parent_id int REFERENCES t_parent (id));
CREATE TABLE t_seq (id serial PRIMARY KEY);
CREATE TABLE t_big (id int PRIMARY KEY, filler text);
CREATE PUBLICATION p FOR TABLE t_default, t_full, t_index, t_toast, t_parent, t_child, t_seq,
    t_big;
-- NOTHING cannot publish updates or deletes: the server would refuse them.
-- Created here, before any slot: on PostgreSQL 13 its catalog write would otherwise show up as an
-- empty transaction (newer servers skip those).
SELECT pg_replication_origin_create('node_a');
CREATE PUBLICATION p_ins FOR TABLE t_nothing WITH (publish = 'insert, truncate');
"""

T_DEFAULT_COLS = [
    ("id", "int4", True),
    ("note", "text", False),
    ("flag", "bool", False),
    ("m", "mood", False),
]


def scenario_dml(srv: Server) -> list[Expect]:
    """Insert, update without and with a key change, delete; a Type message for the enum."""
    t = begin(srv)
    srv.run("INSERT INTO t_default VALUES (1, 'one', true, 'happy'), (2, NULL, false, 'sad')")
    srv.run("UPDATE t_default SET note = 'uno' WHERE id = 1")
    srv.run("UPDATE t_default SET id = 10 WHERE id = 2")
    srv.run("DELETE FROM t_default WHERE id = 10")
    commit(srv, t)
    mood = int(srv.one("SELECT 'mood'::regtype::oid::int"))

    def key_only(k: int) -> list[list[Any]]:
        return [text_col(k), ["n", None], ["n", None], ["n", None]]

    return [
        exp_begin(t),
        {"type": "Type", "xid": None, "type_oid": mood, "namespace": "public", "type_name": "mood"},
        exp_relation(srv, "t_default", "d", T_DEFAULT_COLS),
        exp_row(
            "Insert",
            srv,
            "t_default",
            new=[text_col(1), text_col("one"), ["t", "t"], ["t", "happy"]],
        ),
        exp_row(
            "Insert", srv, "t_default", new=[text_col(2), ["n", None], ["t", "f"], ["t", "sad"]]
        ),
        exp_row(
            "Update",
            srv,
            "t_default",
            new=[text_col(1), text_col("uno"), ["t", "t"], ["t", "happy"]],
        ),
        exp_row(
            "Update",
            srv,
            "t_default",
            old_kind="K",
            old=key_only(2),
            new=[text_col(10), ["n", None], ["t", "f"], ["t", "sad"]],
        ),
        exp_row("Delete", srv, "t_default", old_kind="K", old=key_only(10)),
        exp_commit(t),
    ]


def scenario_replica_identity(srv: Server) -> list[Expect]:
    """REPLICA IDENTITY FULL (old row 'O'), USING INDEX ('K' on the index columns), NOTHING."""
    out: list[Expect] = []
    t = begin(srv)
    srv.run("INSERT INTO t_full VALUES (1, 'a')")
    srv.run("UPDATE t_full SET note = 'b'")
    srv.run("DELETE FROM t_full")
    commit(srv, t)
    out += [
        exp_begin(t),
        exp_relation(srv, "t_full", "f", [("id", "int4", True), ("note", "text", True)]),
        exp_row("Insert", srv, "t_full", new=[text_col(1), text_col("a")]),
        exp_row(
            "Update",
            srv,
            "t_full",
            old_kind="O",
            old=[text_col(1), text_col("a")],
            new=[text_col(1), text_col("b")],
        ),
        exp_row("Delete", srv, "t_full", old_kind="O", old=[text_col(1), text_col("b")]),
        exp_commit(t),
    ]
    t = begin(srv)
    srv.run("INSERT INTO t_index VALUES (1, 'c1', 'n')")
    srv.run("UPDATE t_index SET note = 'm'")  # index columns unchanged: no old tuple
    srv.run("UPDATE t_index SET code = 'c2'")  # index columns changed: old key
    srv.run("DELETE FROM t_index")
    commit(srv, t)
    idx_cols = [("id", "int4", False), ("code", "text", True), ("note", "text", False)]
    out += [
        exp_begin(t),
        exp_relation(srv, "t_index", "i", idx_cols),
        exp_row("Insert", srv, "t_index", new=[text_col(1), text_col("c1"), text_col("n")]),
        exp_row("Update", srv, "t_index", new=[text_col(1), text_col("c1"), text_col("m")]),
        exp_row(
            "Update",
            srv,
            "t_index",
            old_kind="K",
            old=[["n", None], text_col("c1"), ["n", None]],
            new=[text_col(1), text_col("c2"), text_col("m")],
        ),
        exp_row(
            "Delete", srv, "t_index", old_kind="K", old=[["n", None], text_col("c2"), ["n", None]]
        ),
        exp_commit(t),
    ]
    t = begin(srv)
    srv.run("INSERT INTO t_nothing VALUES (1, 'z')")
    srv.run("UPDATE t_nothing SET note = 'y'")  # not published by p_ins
    commit(srv, t)
    out += [
        exp_begin(t),
        exp_relation(srv, "t_nothing", "n", [("id", "int4", False), ("note", "text", False)]),
        exp_row("Insert", srv, "t_nothing", new=[text_col(1), text_col("z")]),
        exp_commit(t),
    ]
    return out


def scenario_truncate(srv: Server) -> list[Expect]:
    """TRUNCATE plain, then CASCADE with RESTART IDENTITY, in separate transactions."""
    srv.run("INSERT INTO t_parent VALUES (1)")
    srv.run("INSERT INTO t_child VALUES (1, 1)")
    srv.run("INSERT INTO t_seq DEFAULT VALUES")
    # Those inserts (one autocommit transaction each) are captured too.
    out: list[Expect] = []
    t1 = begin(srv)
    srv.run("TRUNCATE t_seq")
    commit(srv, t1)
    t2 = begin(srv)
    srv.run("TRUNCATE t_parent RESTART IDENTITY CASCADE")
    commit(srv, t2)
    parent = [("id", "int4", True)]
    child = [("id", "int4", True), ("parent_id", "int4", False)]
    seq = [("id", "int4", True)]
    out += [
        {"type": "Begin"},
        exp_relation(srv, "t_parent", "d", parent),
        exp_row("Insert", srv, "t_parent", new=[text_col(1)]),
        {"type": "Commit"},
        {"type": "Begin"},
        exp_relation(srv, "t_child", "d", child),
        exp_row("Insert", srv, "t_child", new=[text_col(1), text_col(1)]),
        {"type": "Commit"},
        {"type": "Begin"},
        exp_relation(srv, "t_seq", "d", seq),
        exp_row("Insert", srv, "t_seq", new=[text_col(1)]),
        {"type": "Commit"},
        # TRUNCATE gives the table a new file, which invalidates the server's cache entry, so
        # the Relation is sent again before each Truncate.
        exp_begin(t1),
        exp_relation(srv, "t_seq", "d", seq),
        {"type": "Truncate", "xid": None, "options": 0, "relation_oids": [srv.oid("t_seq")]},
        exp_commit(t1),
        exp_begin(t2),
        exp_relation(srv, "t_parent", "d", parent),
        exp_relation(srv, "t_child", "d", child),
        {
            "type": "Truncate",
            "xid": None,
            "options": 3,  # CASCADE | RESTART IDENTITY
            "relation_oids_any_order": [srv.oid("t_parent"), srv.oid("t_child")],
        },
        exp_commit(t2),
    ]
    return out


def scenario_toast(srv: Server) -> list[Expect]:
    """An update that leaves a TOASTed column alone: the server sends it as 'u'."""
    t0 = begin(srv)
    # STORAGE EXTERNAL: stored out of line uncompressed, so 5000 bytes are surely TOASTed.
    srv.run(f"INSERT INTO t_toast VALUES (1, 0, '{'b' * 5000}')")
    commit(srv, t0)
    t = begin(srv)
    srv.run("UPDATE t_toast SET counter = counter + 1")
    commit(srv, t)
    cols = [("id", "int4", True), ("counter", "int4", False), ("big", "text", False)]
    return [
        exp_begin(t0),
        exp_relation(srv, "t_toast", "d", cols),
        exp_row("Insert", srv, "t_toast", new=[text_col(1), text_col(0), text_col("b" * 5000)]),
        exp_commit(t0),
        exp_begin(t),
        exp_row("Update", srv, "t_toast", new=[text_col(1), text_col(1), ["u", None]]),
        exp_commit(t),
    ]


def scenario_origin(srv: Server) -> list[Expect]:
    """A transaction replayed from another node: an Origin message follows Begin."""
    srv.run("SELECT pg_replication_origin_session_setup('node_a')")
    t = begin(srv)
    srv.run("SELECT pg_replication_origin_xact_setup('0/ABCDEF0', now())")
    srv.run("INSERT INTO t_default VALUES (7, 'from a', NULL, NULL)")
    commit(srv, t)
    srv.run("SELECT pg_replication_origin_session_reset()")
    return [
        exp_begin(t),
        {"type": "Origin", "commit_lsn": lsn_int("0/ABCDEF0"), "name": "node_a"},
        {"type": "Type"},
        exp_relation(srv, "t_default", "d", T_DEFAULT_COLS),
        exp_row(
            "Insert",
            srv,
            "t_default",
            new=[text_col(7), text_col("from a"), ["n", None], ["n", None]],
        ),
        exp_commit(t),
    ]


def scenario_messages(srv: Server) -> list[Expect]:
    """pg_logical_emit_message, transactional (inside Begin/Commit) and not (on its own)."""
    # The function returns the end of the message's WAL record; the message carries its start.
    before_nt = srv.wal()
    end_nt = lsn_int(srv.one("SELECT pg_logical_emit_message(false, 'audit', 'now')::text"))
    t = begin(srv)
    before_t = srv.wal()
    end_t = lsn_int(
        srv.one(r"SELECT pg_logical_emit_message(true, 'pfx', '\x00ff10'::bytea)::text")
    )
    commit(srv, t)
    return [
        {
            "type": "Message",
            "xid": None,
            "transactional": False,
            "lsn_between": [before_nt, end_nt],
            "prefix": "audit",
            "content_hex": b"now".hex(),
        },
        exp_begin(t),
        {
            "type": "Message",
            "xid": None,
            "transactional": True,
            "lsn_between": [before_t, end_t],
            "prefix": "pfx",
            "content_hex": "00ff10",
        },
        exp_commit(t),
    ]


def scenario_binary(srv: Server) -> list[Expect]:
    """Binary mode: values in their types' send format."""
    t = begin(srv)
    srv.run("INSERT INTO t_default VALUES (300, 'bin', true, 'ok')")
    commit(srv, t)
    return [
        exp_begin(t),
        {"type": "Type"},
        exp_relation(srv, "t_default", "d", T_DEFAULT_COLS),
        exp_row(
            "Insert",
            srv,
            "t_default",
            new=[
                ["b", struct.pack("!i", 300).hex()],
                ["b", b"bin".hex()],
                ["b", "01"],
                ["b", b"ok".hex()],
            ],
        ),
        exp_commit(t),
    ]


def scenario_two_phase(srv: Server) -> list[Expect]:
    """PREPARE TRANSACTION then COMMIT PREPARED, and one ROLLBACK PREPARED."""
    t1 = begin(srv)
    srv.run("INSERT INTO t_default VALUES (21, 'prepared', true, NULL)")
    before1 = srv.wal()
    srv.run("PREPARE TRANSACTION 'gid-commit'")
    after1 = srv.wal()
    commit(srv, t1, "COMMIT PREPARED 'gid-commit'")
    t2 = begin(srv)
    srv.run("INSERT INTO t_default VALUES (22, 'rolled back', false, NULL)")
    before2 = srv.wal()
    srv.run("PREPARE TRANSACTION 'gid-rollback'")
    after2 = srv.wal()
    srv.run("ROLLBACK PREPARED 'gid-rollback'")
    after_rb = srv.wal()
    return [
        {
            "type": "BeginPrepare",
            "xid": t1.xid,
            "gid": "gid-commit",
            "prepare_lsn_between": [before1, after1],
        },
        {"type": "Type"},
        exp_relation(srv, "t_default", "d", T_DEFAULT_COLS),
        exp_row(
            "Insert",
            srv,
            "t_default",
            new=[text_col(21), text_col("prepared"), ["t", "t"], ["n", None]],
        ),
        {
            "type": "Prepare",
            "xid": t1.xid,
            "gid": "gid-commit",
            "flags": 0,
            "prepare_lsn_between": [before1, after1],
            "end_lsn_is_row_lsn": True,
        },
        {
            "type": "CommitPrepared",
            "xid": t1.xid,
            "gid": "gid-commit",
            "flags": 0,
            "commit_ts": t1.commit_ts,
            "commit_lsn_between": [t1.wal_before_commit, t1.wal_after_commit],
            "end_lsn_is_row_lsn": True,
        },
        {
            "type": "BeginPrepare",
            "xid": t2.xid,
            "gid": "gid-rollback",
            "prepare_lsn_between": [before2, after2],
        },
        exp_row(
            "Insert",
            srv,
            "t_default",
            new=[text_col(22), text_col("rolled back"), ["t", "f"], ["n", None]],
        ),
        {
            "type": "Prepare",
            "xid": t2.xid,
            "gid": "gid-rollback",
            "flags": 0,
            "prepare_lsn_between": [before2, after2],
            "end_lsn_is_row_lsn": True,
        },
        {
            "type": "RollbackPrepared",
            "xid": t2.xid,
            "gid": "gid-rollback",
            "flags": 0,
            "prepare_end_lsn_between": [before2, after2],
            "rollback_end_lsn_between": [after2, after_rb],
            "rollback_end_lsn_is_row_lsn": True,
        },
    ]


@dataclass
class StreamPlan:
    """A streamed transaction: its xids and the rows each (sub)transaction inserted, in order."""

    top: Txn
    rows: list[tuple[int, int]]  # (xid that inserted it, id), in WAL order
    end: str  # "commit", "abort", "prepare"
    aborted_sub: int | None = None
    gid: str | None = None
    # WAL position and clock before and after the (sub)transaction's abort: where the abort LSN
    # and timestamp of a protocol 4 ``streaming = parallel`` Stream Abort must lie.
    abort_bounds: list[int] = field(default_factory=list)
    message: dict[str, Any] = field(default_factory=dict)  # where the message's LSN must lie


MESSAGE_ROW = -1  # in StreamPlan.rows: the place of the logical message


def _insert_big(srv: Server, first: int, count: int) -> list[int]:
    srv.run(
        f"INSERT INTO t_big SELECT g, '{FILLER}' || g FROM generate_series({first},"
        f" {first + count - 1}) g"
    )
    return list(range(first, first + count))


def run_streaming(srv: Server, two_phase: bool) -> list[StreamPlan]:
    plans: list[StreamPlan] = []
    # 1. A big transaction with an aborted subtransaction, committed.
    t = begin(srv)
    ids = _insert_big(srv, 1, BIG_ROWS)
    # A transactional message inside the streamed transaction: it carries the Xid too.
    before = srv.wal()
    end = lsn_int(srv.one("SELECT pg_logical_emit_message(true, 'big', 'inside')::text"))
    message = {"lsn_between": [before, end]}
    srv.run("SAVEPOINT s1")
    sub_ids = _insert_big(srv, 100_001, BIG_ROWS)
    (sub,) = srv.sub_xids(t.xid)
    sub_abort = srv.abort_bounds(lambda: srv.run("ROLLBACK TO SAVEPOINT s1"))
    # ROLLBACK TO keeps the savepoint, so these rows belong to a new subtransaction.
    more = _insert_big(srv, 200_001, 10)
    (sub2,) = srv.sub_xids(t.xid)
    commit(srv, t)
    rows = [(t.xid, i) for i in ids] + [(t.xid, MESSAGE_ROW)]
    rows += [(sub, i) for i in sub_ids] + [(sub2, i) for i in more]
    plans.append(
        StreamPlan(t, rows, "commit", aborted_sub=sub, abort_bounds=sub_abort, message=message)
    )
    # 2. A big transaction rolled back as a whole.
    t = begin(srv)
    ids = _insert_big(srv, 300_001, BIG_ROWS)
    bounds = srv.abort_bounds(lambda: srv.run("ROLLBACK"))
    plans.append(StreamPlan(t, [(t.xid, i) for i in ids], "abort", abort_bounds=bounds))
    # 3. A big prepared transaction: Stream Prepare, then Commit Prepared.
    if two_phase:
        t = begin(srv)
        ids = _insert_big(srv, 400_001, BIG_ROWS)
        srv.run("PREPARE TRANSACTION 'gid-big'")
        commit(srv, t, "COMMIT PREPARED 'gid-big'")
        plans.append(StreamPlan(t, [(t.xid, i) for i in ids], "prepare", gid="gid-big"))
    return plans


def align_streaming(
    srv: Server, plans: list[StreamPlan], rows: list[dict[str, Any]], parallel: bool = False
) -> list[str]:
    """Attach expectations to streamed chunks. Only the message byte is read, to know which of
    the expected messages (StreamStart, Relation, Insert, StreamStop, ...) comes next."""
    big_cols = [("id", "int4", True), ("filler", "text", False)]
    pos = 0
    notes = []
    for plan in plans:
        top = plan.top.xid
        if pos < len(rows) and rows[pos]["xid"] != top:
            # The peek's own xid column says the next chunk is another transaction's. PostgreSQL
            # 18 skips transactions that had already aborted when decoding reached them.
            assert plan.end == "abort", f"nothing streamed for transaction {top}"
            notes.append(f"transaction {top} had aborted before decoding: server sent nothing")
            continue
        pending = list(plan.rows)
        first = True
        while pos < len(rows):
            tag = bytes.fromhex(rows[pos]["hex"][:2])
            r = rows[pos]
            if tag == b"S":
                r["expect"] = {"type": "StreamStart", "xid": top, "first_segment": first}
                first = False
            elif tag == b"E":
                r["expect"] = {"type": "StreamStop"}
            elif tag == b"R":
                # The Relation carries the xid of the (sub)transaction whose change made the
                # server send it: the next row.
                r["expect"] = exp_relation(srv, "t_big", "d", big_cols, xid=pending[0][0])
            elif tag == b"M":
                xid, ident = pending.pop(0)
                assert ident == MESSAGE_ROW, ident
                # The server sends the top-level Xid for messages (their own (sub)transaction's
                # for row changes).
                r["expect"] = {
                    "type": "Message",
                    "xid": top,
                    "transactional": True,
                    "prefix": "big",
                    "content_hex": b"inside".hex(),
                    **plan.message,
                }
            elif tag == b"I":
                xid, ident = pending.pop(0)
                r["expect"] = exp_row(
                    "Insert",
                    srv,
                    "t_big",
                    xid=xid,
                    new=[text_col(ident), text_col(f"{FILLER}{ident}")],
                )
            elif tag == b"A":
                sub = plan.aborted_sub if plan.end == "commit" else top
                r["expect"] = {"type": "StreamAbort", "xid": top, "subxid": sub}
                if parallel:
                    lsn0, lsn1, ts0, ts1 = plan.abort_bounds
                    r["expect"]["abort_lsn_between"] = [lsn0, lsn1]
                    r["expect"]["abort_ts_between"] = [ts0, ts1]
                if plan.end == "abort":
                    pos += 1
                    break
                # Rows of the aborted subtransaction not streamed yet are never sent.
                pending = [p for p in pending if p[0] != plan.aborted_sub]
            elif tag == b"c":
                r["expect"] = {
                    "type": "StreamCommit",
                    "xid": top,
                    "flags": 0,
                    "commit_ts": plan.top.commit_ts,
                    "commit_lsn_between": [plan.top.wal_before_commit, plan.top.wal_after_commit],
                    "end_lsn_is_row_lsn": True,
                }
                pos += 1
                break
            elif tag == b"p":
                r["expect"] = {
                    "type": "StreamPrepare",
                    "xid": top,
                    "gid": plan.gid,
                    "flags": 0,
                    "end_lsn_is_row_lsn": True,
                }
            elif tag == b"K":
                r["expect"] = {
                    "type": "CommitPrepared",
                    "xid": top,
                    "gid": plan.gid,
                    "commit_ts": plan.top.commit_ts,
                    "end_lsn_is_row_lsn": True,
                }
                pos += 1
                break
            else:
                raise AssertionError(f"unexpected message {tag!r} in streamed transaction {top}")
            pos += 1
        assert (
            not pending or plan.end == "abort" or all(p[0] == plan.aborted_sub for p in pending)
        ), pending
    assert pos == len(rows), f"{len(rows) - pos} messages after the streamed transactions"
    return notes


# --- driver ------------------------------------------------------------------------------------

CASES: list[tuple[str, str, Callable[[Server], list[Expect]], int, dict[str, str]]] = [
    ("dml", scenario_dml.__doc__ or "", scenario_dml, 13, {}),
    (
        "replica_identity",
        scenario_replica_identity.__doc__ or "",
        scenario_replica_identity,
        13,
        {"publication_names": "p,p_ins"},
    ),
    ("truncate", scenario_truncate.__doc__ or "", scenario_truncate, 13, {}),
    ("toast", scenario_toast.__doc__ or "", scenario_toast, 13, {}),
    ("origin", scenario_origin.__doc__ or "", scenario_origin, 13, {}),
    ("messages", scenario_messages.__doc__ or "", scenario_messages, 14, {"messages": "true"}),
    ("binary", scenario_binary.__doc__ or "", scenario_binary, 14, {"binary": "true"}),
    ("two_phase", scenario_two_phase.__doc__ or "", scenario_two_phase, 15, {"two_phase": "true"}),
]


def max_proto(major: int) -> int:
    return {13: 1, 14: 2, 15: 3}.get(major, 4)


def peek(srv: Server, slot: str, options: dict[str, str]) -> list[dict[str, Any]]:
    args: list[str] = []
    for k, v in options.items():
        args += [k, v]
    placeholders = ", ".join(["%s"] * len(args))
    rows = srv.conn.execute(
        f"SELECT lsn::text, xid::text, data FROM pg_logical_slot_peek_binary_changes("
        f"%s, NULL, NULL, {placeholders})",
        [slot, *args],
    ).fetchall()
    return [
        {"lsn": lsn_int(lsn), "xid": int(xid), "hex": bytes(data).hex()} for lsn, xid, data in rows
    ]


def make_slot(srv: Server, slot: str, two_phase: bool) -> None:
    if srv.major >= 14:
        srv.run(
            f"SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput', false,"
            f" {'true' if two_phase else 'false'})"
        )
    else:
        srv.run(f"SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput')")


def capture_version(major: str, work: Path) -> dict[str, Any]:
    bindir = ensure_postgres_binaries(major)
    settings = {"track_commit_timestamp": "on", "logical_decoding_work_mem": "'64kB'"}
    with (
        PostgresCluster(bindir, base_dir=work / f"pg{major}", settings=settings) as pg,
        psycopg.connect(pg.dsn("postgres"), autocommit=True) as conn,
    ):
        srv = Server(conn, int(major), max_proto(int(major)))
        version = srv.one("SHOW server_version")
        srv.run(SETUP)
        base = {"proto_version": str(srv.proto), "publication_names": "p"}
        cases = []
        for name, desc, fn, min_major, extra in CASES:
            if srv.major < min_major:
                continue
            opts = {**base, **extra}
            two_phase = "two_phase" in extra
            make_slot(srv, name, two_phase)
            expects = fn(srv)
            rows = peek(srv, name, opts)
            assert len(rows) == len(expects), (name, len(rows), len(expects), rows)
            for r, e in zip(rows, expects, strict=True):
                r["expect"] = e
            srv.run(f"SELECT pg_drop_replication_slot('{name}')")
            srv.run("TRUNCATE t_default, t_full, t_index, t_nothing, t_toast, t_big")
            cases.append(
                {
                    "name": name,
                    "description": " ".join(desc.split()),
                    "options": opts,
                    "messages": rows,
                }
            )
        if srv.major >= 14:
            two_phase = srv.major >= 15
            name = "streaming"
            make_slot(srv, name, two_phase)
            plans = run_streaming(srv, two_phase)
            opts = {**base, "streaming": "true", "messages": "true"}
            if two_phase:
                opts["two_phase"] = "true"
            srv.run("SET logical_decoding_work_mem = '64kB'")
            rows = peek(srv, name, opts)
            notes = align_streaming(srv, plans, rows)
            cases.append(
                {
                    "name": "streaming",
                    "description": "Large transactions past logical_decoding_work_mem, streamed: "
                    "one committed with a logical message and an aborted subtransaction, one "
                    "aborted as a whole"
                    + (", one prepared (Stream Prepare) then committed" if two_phase else ""),
                    "options": opts,
                    "notes": notes,
                    "messages": rows,
                }
            )
            if srv.major >= 16:
                # Protocol 4's parallel mode adds the abort LSN and time to Stream Abort. Apply
                # workers ask for it; the SQL interface passes the option through the same way.
                opts = {**opts, "streaming": "parallel"}
                rows = peek(srv, name, opts)
                notes = align_streaming(srv, plans, rows, parallel=True)
                cases.append(
                    {
                        "name": "streaming_parallel",
                        "description": "The same streamed transactions with streaming = parallel:"
                        " Stream Abort carries the abort LSN and timestamp",
                        "options": opts,
                        "notes": notes,
                        "messages": rows,
                    }
                )
            srv.run(f"SELECT pg_drop_replication_slot('{name}')")
    return {
        "server_version": version,
        "major": int(major),
        "proto_version": srv.proto,
        "captured_by": "tests/pgoutput/vectors/capture.py",
        "cases": cases,
    }


def dump(data: dict[str, Any]) -> str:
    """JSON with one message per line: readable in a diff, a fraction of indent's size."""
    cases = []
    for case in data["cases"]:
        head = json.dumps({k: v for k, v in case.items() if k != "messages"})[:-1]
        msgs = ",\n".join("   " + json.dumps(m) for m in case["messages"])
        cases.append(f'  {head}, "messages": [\n{msgs}\n  ]}}')
    head = json.dumps({k: v for k, v in data.items() if k != "cases"})[:-1]
    return f'{head}, "cases": [\n' + ",\n".join(cases) + "\n]}\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("versions", nargs="*", default=["13", "14", "15", "16", "17", "18"])
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="pgbridge-vectors-", dir="/tmp") as tmp:
        Path(tmp).chmod(0o755)  # the server runs as another user
        for major in args.versions:
            data = capture_version(major, Path(tmp))
            out = HERE / f"pg{major}.json"
            out.write_text(dump(data))
            n = sum(len(c["messages"]) for c in data["cases"])
            print(
                f"PostgreSQL {data['server_version']}: {len(data['cases'])} cases, {n} messages"
                f" -> {out}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
