"""Test harness for the bridge on the real stack: a scratch database, a running pipeline, and an
independent consumer that rebuilds tables from the topics.

The consumer uses only plain confluent-kafka, the registry's schemas and fastavro, the way a
user's consumer would, never pgbridge's own code. Records are decoded with fastavro and each
schema's parse cached (Confluent's ``AvroDeserializer`` spends ~0.3 ms per record on its rule
and migration machinery: two minutes of a 400,000-row test); the first record of every schema
is decoded by the ``AvroDeserializer`` too, and must come out the same.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

import fastavro
import psycopg
from confluent_kafka.admin import AdminClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from bridge.config import BridgeConfig, load_config
from bridge.devstack.postgres import PostgresCluster, ensure_postgres_binaries
from bridge.devstack.stack import StackInfo
from bridge.pgoutput.lsn import Lsn
from bridge.pipeline import Pipeline
from bridge.runner import build_pipeline
from bridge.sink.registry import DESERIALIZER_CONF, registry_client
from bridge.sink.topic_reader import read_topic as read_to_end


@contextmanager
def scratch_database(stack: StackInfo) -> Iterator[str]:
    """A new database; its slots are dropped and it is removed afterwards."""
    name = f"e2e_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(stack.postgres_dsn(), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield stack.postgres_dsn(name)
    finally:
        with psycopg.connect(stack.postgres_dsn(), autocommit=True) as admin:
            for (slot,) in admin.execute(
                "SELECT slot_name FROM pg_replication_slots WHERE database = %s", (name,)
            ).fetchall():
                admin.execute(
                    "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
                    "WHERE slot_name = %s AND active_pid IS NOT NULL",
                    (slot,),
                )
                for _ in range(50):
                    try:
                        admin.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
                        break
                    except psycopg.errors.ObjectInUse:
                        time.sleep(0.1)
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def bridge_settings(stack: StackInfo, dsn: str, prefix: str, **extra: str) -> dict[str, str]:
    return {
        "database.dsn": dsn,
        "topic.prefix": prefix,
        "slot.name": prefix.replace("-", "_"),
        "publication.name": f"{prefix.replace('-', '_')}_pub",
        "kafka.bootstrap.servers": stack.bootstrap_servers,
        "schema.registry.url": stack.registry_url,
        "status.update.interval.ms": "500",
        **extra,
    }


def bridge_config(stack: StackInfo, dsn: str, prefix: str, **extra: str) -> BridgeConfig:
    return load_config(None, {}, bridge_settings(stack, dsn, prefix, **extra))


class RunningBridge:
    """``pgbridge run``'s pipeline on a thread."""

    def __init__(self, config: BridgeConfig) -> None:
        self.pipeline: Pipeline = build_pipeline(config)
        self._stop = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="bridge", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self.pipeline.run(self._stop)
        except BaseException as exc:  # surfaced by wait_confirmed/stop
            self.error = exc

    def wait_confirmed(self, lsn: Lsn, timeout: float = 120.0) -> None:
        """Until the tracker's flush position reaches ``lsn`` (everything before is in Kafka)."""
        deadline = time.monotonic() + timeout
        while self.pipeline.tracker.flush_lsn < lsn:
            if self.error is not None:
                raise self.error
            if time.monotonic() > deadline:
                raise TimeoutError(f"flush at {self.pipeline.tracker.flush_lsn}, waited for {lsn}")
            time.sleep(0.1)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
        if self.error is not None:
            raise self.error


def free_port() -> int:
    """A loopback TCP port nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def mark(dsn: str) -> Lsn:
    """Commit a marker transaction and return an LSN inside it.

    Once the bridge confirms past that LSN, every transaction committed before the marker is in
    Kafka. (The WAL end is no target: aborted transactions and other databases write WAL that
    no transaction of ours ends at.)
    """
    with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction():
        row = conn.execute(
            "SELECT pg_logical_emit_message(true, 'pgbridge-test', 'mark')::text"
        ).fetchone()
    assert row is not None
    return Lsn.parse(row[0])


def topics_with_prefix(bootstrap: str, prefix: str) -> list[str]:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    return sorted(t for t in md.topics if t.startswith(prefix + "."))


#: Debezium's semantic types and the standard Avro logical type of the same bytes: how a reader
#: of Debezium's wire form (pgbridge's default) gets dates, times and UUIDs as Python values,
#: the same ones pgbridge's ``avro`` form gives fastavro directly.
_SEMANTIC_LOGICAL = {
    ("io.debezium.time.Date", "int"): "date",
    ("io.debezium.time.MicroTime", "long"): "time-micros",
    ("io.debezium.time.MicroTimestamp", "long"): "local-timestamp-micros",
    ("io.debezium.data.Uuid", "string"): "uuid",
}
_ZONED = "io.debezium.time.ZonedTimestamp"


def _logical(node: Any) -> Any:
    """``node`` with the logical types of :data:`_SEMANTIC_LOGICAL` added (same bytes)."""
    if isinstance(node, list):
        return [_logical(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _logical(v) if k in ("type", "items", "values") else v for k, v in node.items()}
    if isinstance(out.get("fields"), list):
        out["fields"] = [{**f, "type": _logical(f["type"])} for f in out["fields"]]
    kind = out.get("type")
    if "logicalType" not in out and isinstance(kind, str):
        logical = _SEMANTIC_LOGICAL.get((str(out.get("connect.name")), kind))
        if logical is not None:
            out["logicalType"] = logical
    return out


def _zoned_fields(schema: Any) -> dict[str, bool]:
    """The fields of a key record, or of an envelope's rows, that hold Debezium's
    ZonedTimestamp: name -> whether an array of them."""

    def zoned(node: Any) -> bool:
        return isinstance(node, dict) and node.get("connect.name") == _ZONED

    def branch(node: Any) -> Any:
        if isinstance(node, list):
            others = [b for b in node if b != "null"]
            return others[0] if len(others) == 1 else None
        return node

    if not isinstance(schema, dict) or schema.get("type") != "record":
        return {}
    row = schema
    for field in schema["fields"]:
        if field["name"] == "before":  # an envelope: its rows' record
            row = branch(field["type"])
    found: dict[str, bool] = {}
    for column in row["fields"] if isinstance(row, dict) else []:
        kind = branch(column["type"])
        items = kind.get("items") if isinstance(kind, dict) and kind["type"] == "array" else None
        if zoned(kind) or zoned(branch(items)):
            found[column["name"]] = not zoned(kind)
    return found


def _instant(text: str | None) -> Any:
    """A ZonedTimestamp as the aware UTC datetime pgbridge's ``instant`` form reads as; text
    Python's datetime cannot hold (``infinity``, years beyond 1..9999) as it is."""
    if text is None:
        return None
    try:
        return dt.datetime.fromisoformat(text)
    except ValueError:
        return text


class _Decoder:
    """Confluent-framed Avro -> Python values, a parsed writer schema per schema id; checked
    against Confluent's ``AvroDeserializer`` on each schema's first record. Debezium's wire form
    is read as such a consumer reads it: semantic types as their logical types, ZonedTimestamp
    as an aware datetime."""

    def __init__(self, registry_url: str | Mapping[str, Any], topic: str) -> None:
        self._registry = registry_client(registry_url)
        self._reference = AvroDeserializer(self._registry, conf=DESERIALIZER_CONF)
        self._topic = topic
        self._schemas: dict[int, tuple[Any, dict[str, bool]]] = {}

    def __call__(self, data: bytes | None, field: MessageField) -> Any:
        if data is None:
            return None
        assert len(data) > 5 and data[0] == 0, f"{self._topic}: not Confluent framing"
        schema_id = int.from_bytes(data[1:5], "big")
        known = self._schemas.get(schema_id)
        if known is None:
            schema = self._registry.get_schema(schema_id)
            assert schema.schema_str is not None
            writer = json.loads(schema.schema_str)
            value = fastavro.schemaless_reader(
                io.BytesIO(data[5:]), fastavro.parse_schema(writer), None
            )
            reference = self._reference(data, SerializationContext(self._topic, field))
            # repr: NaN (the type zoo's extreme values) is not equal to itself
            assert repr(value) == repr(reference), f"{self._topic}: schema {schema_id} differs"
            known = (fastavro.parse_schema(_logical(writer)), _zoned_fields(writer))
            self._schemas[schema_id] = known
        parsed, zoned = known
        value = fastavro.schemaless_reader(io.BytesIO(data[5:]), parsed, None)
        if zoned and isinstance(value, dict):
            is_envelope = field is MessageField.VALUE and "before" in value
            for image in (value["before"], value["after"]) if is_envelope else (value,):
                for name, is_array in zoned.items() if image else ():
                    held = image.get(name)
                    if is_array and held is not None:
                        image[name] = [_instant(t) for t in held]
                    else:
                        image[name] = _instant(held)
        return value


def read_topic(
    bootstrap: str, registry_url: str | Mapping[str, Any], topic: str
) -> list[tuple[Any, Any]]:
    """Every (key, value) of a topic, Avro-decoded with the registry's schemas (its URL or
    client settings); None for tombstones."""
    decode = _Decoder(registry_url, topic)
    return [
        (decode(key, MessageField.KEY), decode(value, MessageField.VALUE))
        for key, value in raw_records(bootstrap, topic)
    ]


def placed_values(
    bootstrap: str, registry_url: str | Mapping[str, Any], topic: str
) -> list[tuple[str, Any]]:
    """Every record's value, decoded, with where and when Kafka took it
    (``"partition/offset at HH:MM:SS.mmm"``, the producer's timestamp): which producer wrote a
    record, when a test asks."""
    decode = _Decoder(registry_url, topic)
    placed = []
    for m in read_to_end(bootstrap, topic, timeout=5.0):
        ms = m.timestamp()[1]
        at = time.strftime("%H:%M:%S", time.localtime(ms / 1000)) + f".{ms % 1000:03d}"
        placed.append(
            (f"{m.partition()}/{m.offset()} at {at}", decode(m.value(), MessageField.VALUE))
        )
    return placed


def raw_records(bootstrap: str, topic: str) -> list[tuple[bytes | None, bytes | None]]:
    """Every (key, value) of a topic as bytes, partition by partition, in offset order."""
    return [(m.key(), m.value()) for m in read_to_end(bootstrap, topic, timeout=5.0)]


def row_image(row: dict[str, Any]) -> str:
    """A hashable, comparable image of a whole row (tables without a key are multisets)."""
    return repr(sorted((k, normalize(v)) for k, v in row.items()))


class _Multiset:
    """The rows of a table without a key: identical rows are distinct copies, keyed
    ``(image, copy number)``, so the rebuilt table compares with :func:`source_rows`' ``()``."""

    @staticmethod
    def add(rows: dict[tuple[Any, ...], dict[str, Any]], row: dict[str, Any]) -> None:
        image = row_image(row)
        n = 0
        while (image, n) in rows:
            n += 1
        rows[(image, n)] = row

    @staticmethod
    def remove(rows: dict[tuple[Any, ...], dict[str, Any]], row: dict[str, Any]) -> None:
        image = row_image(row)
        n = 0
        while (image, n + 1) in rows:
            n += 1
        rows.pop((image, n), None)


def rebuild_tables(
    bootstrap: str,
    registry_url: str,
    prefix: str,
    exclude: Callable[[str], bool] | None = None,
) -> dict[str, dict[tuple[Any, ...], dict[str, Any]]]:
    """Apply every change event in (commit LSN, seq) order: ``{schema.table: {key: row}}``;
    a table without a key (null message keys) is a multiset keyed ``(row image, copy)``.

    Duplicates (after a restart) are harmless: events are applied by position, and a position
    seen twice is applied once.
    """
    events: list[tuple[int, int, str, dict[str, Any] | None, dict[str, Any]]] = []
    for topic in topics_with_prefix(bootstrap, prefix):
        if topic.count(".") < prefix.count(".") + 2:
            continue  # <prefix>.messages, <prefix>.dead_letter, <prefix>.transaction
        if exclude is not None and exclude(topic):
            continue
        for key, value in read_topic(bootstrap, registry_url, topic):
            if value is None:
                continue  # tombstone
            src = value["source"]
            events.append(
                (src["commit_lsn"], src["seq"], f"{src['schema']}.{src['table']}", key, value)
            )
    events.sort(key=lambda e: (e[0], e[1]))
    tables: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = {}
    seen: set[tuple[int, int, str]] = set()
    for commit_lsn, seq, table, key, value in events:
        if (commit_lsn, seq, table) in seen:
            continue
        seen.add((commit_lsn, seq, table))
        rows = tables.setdefault(table, {})
        op = value["op"]
        if op == "t":
            rows.clear()
        elif key is None:  # no key: the whole row identifies one copy
            if op in ("u", "d"):
                _Multiset.remove(rows, dict(value["before"]))
            if op in ("c", "u", "r"):
                _Multiset.add(rows, dict(value["after"]))
        elif op in ("c", "u", "r"):
            after = dict(value["after"])
            previous = rows.get(tuple(key.values()), {})
            for column in value.get("unchanged_toast_columns", ()):
                after[column] = previous.get(column)  # not sent because it did not change
            rows[tuple(key.values())] = after
        elif op == "d":
            rows.pop(tuple(key.values()), None)
    return tables


def normalize(value: Any) -> Any:
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.UTC)
    if isinstance(value, Decimal):
        return value.normalize()
    return value


def source_rows(
    dsn: str, table: str, key: tuple[str, ...], where: str | None = None
) -> dict[tuple[Any, ...], dict[str, Any]]:
    """The table's rows by key (those matching ``where``, if given); ``key=()`` for a table
    without one (a multiset, as :func:`rebuild_tables` keys it)."""
    condition = f" WHERE {where}" if where else ""
    with psycopg.connect(dsn) as conn, conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
        rows = cur.execute(f"SELECT * FROM {table}{condition}").fetchall()
    if not key:
        multiset: dict[tuple[Any, ...], dict[str, Any]] = {}
        for r in rows:
            _Multiset.add(multiset, {k: normalize(v) for k, v in r.items()})
        return multiset
    return {tuple(r[k] for k in key): {k: normalize(v) for k, v in r.items()} for r in rows}


def normalized(
    rows: dict[tuple[Any, ...], dict[str, Any]],
) -> dict[tuple[Any, ...], dict[str, Any]]:
    return {k: {c: normalize(v) for c, v in r.items()} for k, r in rows.items()}


def table_differences(
    got: dict[tuple[Any, ...], dict[str, Any]],
    expected: dict[tuple[Any, ...], dict[str, Any]],
    limit: int = 10,
) -> str:
    """The keys on which two rebuilt tables differ, each with both rows: a failure message that
    names the rows, not a pretty-printed diff of thousands whose tail is all a CI log keeps."""
    differing = sorted(
        (k for k in got.keys() | expected.keys() if got.get(k) != expected.get(k)), key=repr
    )
    shown = [f"{k}: got {got.get(k)!r}, expected {expected.get(k)!r}" for k in differing[:limit]]
    more = f" (and {len(differing) - limit} more)" if len(differing) > limit else ""
    return f"{len(differing)} of {len(expected)} rows differ{more}: " + "; ".join(shown)


class BridgeProcess:
    """``pgbridge run`` as a separate process, configured with ``--set`` flags."""

    def __init__(self, settings: dict[str, str], log_path: str) -> None:
        args = [sys.executable, "-m", "bridge.cli", "run"]
        for key, value in settings.items():
            args += ["--set", f"{key}={value}"]
        self.log_path = log_path
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)

    def kill(self) -> None:
        self.proc.kill()  # SIGKILL: no flush, no goodbye
        self.proc.wait(30)

    def terminate(self, timeout: float = 60.0) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def log(self) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as fh:
            return fh.read()


def slot_confirmed(dsn: str, slot: str) -> Lsn:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
            (slot,),
        ).fetchone()
    return Lsn.parse(row[0]) if row and row[0] else Lsn(0)


def wait_slot_confirmed(
    dsn: str, slot: str, lsn: Lsn, process: BridgeProcess, timeout: float = 120
) -> None:
    deadline = time.monotonic() + timeout
    while slot_confirmed(dsn, slot) < lsn:
        if process.proc.poll() is not None:
            raise RuntimeError(
                f"pgbridge run exited {process.proc.returncode}:\n{process.log()[-3000:]}"
            )
        if time.monotonic() > deadline:
            raise TimeoutError(f"slot {slot} at {slot_confirmed(dsn, slot)}, waited for {lsn}")
        time.sleep(0.2)


def wait_streaming(dsn: str, slot: str, process: BridgeProcess, timeout: float = 120) -> None:
    """Until ``pgbridge run`` streams (its snapshot done) and confirmed a change made now.
    (A mark made before the slot exists proves nothing: a slot is created confirmed at its
    consistent point, past that mark, while its snapshot may still be copying.)"""
    deadline = time.monotonic() + timeout
    while "streaming slot" not in process.log():
        if process.proc.poll() is not None:
            raise RuntimeError(f"pgbridge run exited:\n{process.log()[-3000:]}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"pgbridge run never started streaming:\n{process.log()[-3000:]}")
        time.sleep(0.2)
    wait_slot_confirmed(dsn, slot, mark(dsn), process, max(1.0, deadline - time.monotonic()))


def run_until_exit(values: Mapping[str, str], timeout: float = 60) -> tuple[int, str, float]:
    """``pgbridge run --set key=value …`` until it exits: (exit code, output, seconds)."""
    command = [sys.executable, "-m", "bridge.cli", "run"]
    for key, value in values.items():
        command += ["--set", f"{key}={value}"]
    started = time.monotonic()
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    return result.returncode, result.stdout + result.stderr, time.monotonic() - started


def assert_refused(
    values: Mapping[str, str], expected: str, secrets: Iterable[str] = (), within: float = 30
) -> str:
    """``pgbridge run`` with ``values`` stops by itself within ``within`` seconds, failing,
    with ``expected`` in its output and neither a traceback nor any of ``secrets``."""
    code, output, seconds = run_until_exit(values, timeout=180)
    assert code != 0, output[-3000:]
    assert expected in output, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    for secret in secrets:
        assert secret not in output
    assert seconds < within, f"{seconds:.0f} s to give up"
    return output


def wait_for(predicate: Any, process: BridgeProcess, what: str, timeout: float = 120) -> None:
    """Until ``predicate()``; an error with the log's tail if the process exits or time runs
    out first."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if process.proc.poll() is not None:
            raise RuntimeError(
                f"pgbridge exited while waiting for {what}:\n{process.log()[-4000:]}"
            )
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}:\n{process.log()[-4000:]}")
        time.sleep(0.02)


@contextmanager
def streaming_bridge(values: Mapping[str, str], log_path: str) -> Iterator[BridgeProcess]:
    """``pgbridge run`` as a process, handed over once it streams; stopped with SIGTERM when
    the block ends (its clean exit asserted), killed if the block failed."""
    process = BridgeProcess(dict(values), log_path)
    try:
        wait_for(lambda: "to topics" in process.log(), process, "streaming")
        yield process
        assert process.terminate() == 0, process.log()[-3000:]
    finally:
        if process.proc.poll() is None:
            process.kill()


class OtherPostgres:
    """The stack with another PostgreSQL server in place of its own."""

    def __init__(self, stack: StackInfo, cluster: PostgresCluster) -> None:
        self.bootstrap_servers = stack.bootstrap_servers
        self.registry_url = stack.registry_url
        self._cluster = cluster

    def postgres_dsn(self, dbname: str = "postgres") -> str:
        return self._cluster.dsn(dbname)


@contextmanager
def postgres(stack: StackInfo, version: str) -> Iterator[Any]:
    """The stack itself for its own PostgreSQL major, else a throwaway cluster of ``version``."""
    if version in ("stack", stack.postgres_major):
        yield stack
        return
    base = Path(tempfile.mkdtemp(prefix=f"pgbridge-pg{version}-", dir="/tmp"))
    base.chmod(0o755)  # PostgreSQL runs as a non-root account
    cluster = PostgresCluster(ensure_postgres_binaries(version), base_dir=base)
    try:
        cluster.start()
        yield OtherPostgres(stack, cluster)
    finally:
        cluster.destroy()


def scrape_metrics(port: int, expected: str, timeout: float = 10) -> str:
    """The bridge's Prometheus page once it shows ``expected`` (or at the deadline, for the
    caller's assertion to report): the bridge hands its counts to Prometheus at most every half
    second, so the page may trail the slot's confirmed position by that much."""
    deadline = time.monotonic() + timeout
    while True:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
            page: str = reply.read().decode()
        if expected in page or time.monotonic() > deadline:
            return page
        time.sleep(0.2)
