"""The apply job under faults, one after another, under a steady writer; at the end every Delta
table equals its source table, row for row (no row lost, none twice, none resurrected).

``pgbridge run`` streams four tables of a scratch database (a keyed table that gains a column
mid-run, an insert-mostly log, a table without a key (a multiset, truncated now and then) and
one with a composite key and names Avro refuses) to a broker of the rig's own, and ``pgbridge
apply`` (the CLI, in its own process and JVM) applies them to Delta. Faults:

- ``apply SIGKILL``: the job killed at a random moment (mid-batch, mid-commit or idle);
- ``apply SIGKILL after a MERGE``: killed after a table's commit and before the checkpoint's
  (the job restarted with its crash failpoint, bridge.spark.applier.PAUSE_AFTER_MERGE_ENV);
- ``apply SIGTERM``: stopped as systemd or Kubernetes stop it; it must exit 0 within
  ``STOP_TIMEOUT_S``, without a traceback;
- ``broker SIGKILL``: the broker gone longer than the job's Kafka timeouts, then back; the job
  must ride through (bridge.spark.restarts), not end;
- ``a table's disk full (restart)``: the job restarted with every write under one table's
  path (the keyless, truncated one) failing with ENOSPC (tests/integration/full_disk.c,
  preloaded into the job's Python process and its JVM) until that table is set aside and held
  (bridge.spark.set_aside) while the others go on; then stopped, and started with space
  again: its start applies the held records in order (bridge.spark.replay);
- ``a table's disk full (kept running)``: the same, but space comes back while the job runs
  (``--held-retry-interval 10 s``): it applies the held records itself, without a restart.

Each restart takes one of ``PROFILES`` at random (every table through the driver, through
Spark, or large batches through the task lane): a restart with other settings must not
change what the tables hold. After each fault the time until the job commits a batch again is
reported. ``tests/integration/test_apply_soak.py`` runs each fault once (``make test-long``);
``make soak-apply`` runs random faults (``python -m tests.integration.apply_soak --minutes
10``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from bridge.devstack.kafka import SHORT_LIVED_JVM_OPTIONS, KafkaBroker
from bridge.devstack.stack import LocalStack, StackInfo
from bridge.spark.applier import PAUSE_AFTER_MERGE_ENV
from bridge.spark.config import ApplyConfig
from tests.integration.bridge_harness import RunningBridge, bridge_config, mark, scratch_database
from tests.integration.faults import broker_outage
from tests.integration.full_disk import build_shim
from tests.integration.test_delta_e2e import comparable

FAULTS = (
    "apply SIGKILL",
    "apply SIGKILL after a MERGE",
    "apply SIGTERM",
    "broker SIGKILL",
    "a table's disk full (restart)",
    "a table's disk full (kept running)",
)
#: The table whose disk fills in "a table's disk full" (no other table's path starts so).
#: How often the job tries a held table again in "a table's disk full (kept running)".
HELD_RETRY = ("--held-retry-interval", "10 s")
FULL_TABLE = "tags"
OUTAGE_S = 12.0  # the broker's: past the job's Kafka timeouts (KAFKA_OPTIONS)
STOP_TIMEOUT_S = 60.0
CATCH_UP_S = 240.0
#: Short Kafka client timeouts, so that Spark's Kafka source gives up within seconds of an
#: outage and the job restarts its query (bridge.spark.restarts) rather than waiting minutes.
KAFKA_OPTIONS = ("default.api.timeout.ms=4000", "request.timeout.ms=3000")
#: Settings a restarted job may take: each table's batch written by the driver with delta-rs
#: (the defaults), every table by Spark's jobs, batches of new keys by the task lane.
PROFILES: dict[str, tuple[str, ...]] = {
    "defaults": (),
    "spark": ("--driver-write-rows", "0"),
    "task lane": ("--lane-min-records", "200"),
}

SCHEMA = """
CREATE TABLE accounts (id int PRIMARY KEY, balance numeric(12,2) NOT NULL, note text,
                       updated timestamptz NOT NULL DEFAULT now());
CREATE TABLE events (id bigserial PRIMARY KEY, account int NOT NULL, kind text NOT NULL,
                     payload jsonb);
CREATE TABLE tags (account int, tag text);
ALTER TABLE tags REPLICA IDENTITY FULL;
CREATE TABLE "Order Lines" ("Order" int, "line#" int, "qty-ordered" int,
                            PRIMARY KEY ("Order", "line#"));
"""
#: Each table with the columns identifying a row (none: a multiset).
TABLES = {"accounts": ("id",), "events": ("id",), "tags": (), "Order Lines": ("Order", "line#")}


@dataclass(slots=True)
class FaultResult:
    fault: str
    profile: str  # the settings of the job restarted after it
    recover_s: float | None = None  # from the fault's end until the job committed a batch


class Writer:
    """Small transactions on the four tables, a burst of a few thousand events now and then, a
    rolled-back transaction, a TRUNCATE of the keyless table, and one ADD COLUMN halfway."""

    def __init__(self, dsn: str, seed: int) -> None:
        self.dsn = dsn
        self.rng = random.Random(seed)
        self.accounts: set[int] = set()
        self.lines: set[tuple[int, int]] = set()
        self.next_account = 1
        self.transactions = 0
        self.altered = threading.Event()
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="writer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def finish(self) -> None:
        self.stop.set()
        self._thread.join(60)
        if self.error is not None:
            raise self.error

    def alter(self) -> None:
        """Asks for the mid-run schema change (applied by the writer, between transactions)."""
        self.altered.set()

    def _run(self) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                altered = False
                while not self.stop.is_set():
                    if self.altered.is_set() and not altered:
                        conn.execute(
                            "ALTER TABLE accounts ADD COLUMN tier text DEFAULT 'basic', "
                            "ADD COLUMN score numeric(5,1)"
                        )
                        altered = True
                    self._transaction(conn, altered)
                    self.transactions += 1
                    time.sleep(0.02)
        except BaseException as exc:  # surfaced by finish()
            self.error = exc

    def _transaction(self, conn: psycopg.Connection[Any], altered: bool) -> None:
        rng = self.rng
        roll_back = rng.random() < 0.03
        accounts, lines = set(self.accounts), set(self.lines)
        try:
            with conn.transaction():
                for _ in range(rng.randint(1, 6)):
                    self._statement(conn, altered, accounts, lines)
                if roll_back:
                    raise _RolledBack
        except _RolledBack:
            return
        self.accounts, self.lines = accounts, lines

    def _statement(
        self,
        conn: psycopg.Connection[Any],
        altered: bool,
        accounts: set[int],
        lines: set[tuple[int, int]],
    ) -> None:
        rng = self.rng
        kind = rng.random()
        if kind < 0.2 or not accounts:
            account = self.next_account
            self.next_account += 1
            conn.execute(
                "INSERT INTO accounts (id, balance, note) VALUES (%s, %s, %s)",
                (account, rng.randint(0, 10**6) / 100, rng.choice([None, "new", "ünïcode"])),
            )
            accounts.add(account)
        elif kind < 0.45:
            account = rng.choice(sorted(accounts))
            extra = ", tier = 'gold', score = 9.5" if altered and rng.random() < 0.5 else ""
            conn.execute(
                f"UPDATE accounts SET balance = balance + 1, updated = now(){extra} WHERE id = %s",
                (account,),
            )
        elif kind < 0.5:
            account = rng.choice(sorted(accounts))
            conn.execute("DELETE FROM accounts WHERE id = %s", (account,))
            accounts.discard(account)
        elif kind < 0.65:
            count = 3000 if rng.random() < 0.03 else rng.randint(1, 40)
            conn.execute(
                "INSERT INTO events (account, kind, payload) SELECT %s, 'k' || (i %% 7), "
                "jsonb_build_object('i', i, 'tags', jsonb_build_array('a', 'ü')) "
                "FROM generate_series(1, %s) i",
                (rng.choice(sorted(accounts)), count),
            )
        elif kind < 0.68:
            conn.execute("DELETE FROM events WHERE id IN (SELECT id FROM events "
                         "ORDER BY id LIMIT 5)")  # fmt: skip
        elif kind < 0.8:
            # Few distinct rows: the keyless table holds identical copies.
            conn.execute("INSERT INTO tags VALUES (%s, %s)", (rng.randint(1, 5), rng.choice("abc")))
        elif kind < 0.85:
            conn.execute(
                "DELETE FROM tags WHERE ctid = (SELECT ctid FROM tags WHERE tag = %s LIMIT 1)",
                (rng.choice("abc"),),
            )
        elif kind < 0.86:
            conn.execute("TRUNCATE tags")
        elif kind < 0.93 or not lines:
            line = (rng.randint(1, 50), rng.randint(1, 1000))
            if line not in lines:
                conn.execute('INSERT INTO "Order Lines" VALUES (%s, %s, %s)', (*line, 1))
                lines.add(line)
        else:
            line = rng.choice(sorted(lines))
            if rng.random() < 0.5:
                conn.execute(
                    'UPDATE "Order Lines" SET "qty-ordered" = "qty-ordered" + 1 '
                    'WHERE "Order" = %s AND "line#" = %s',
                    line,
                )
            else:
                conn.execute('DELETE FROM "Order Lines" WHERE "Order" = %s AND "line#" = %s', line)
                lines.discard(line)


class _RolledBack(Exception):
    pass


class ApplyJob:
    """``pgbridge apply`` in a process (and JVM) of its own."""

    def __init__(self, config: ApplyConfig, stack: StackInfo, log_path: Path) -> None:
        self.config = config
        self.stack = stack
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    def start(
        self,
        profile: str,
        pause_after_merge: bool = False,
        available_now: bool = False,
        full_disk: tuple[Path, Path, Path] | None = None,
        extra: tuple[str, ...] = (),
    ) -> None:
        """``full_disk``: (the shim, the directory, the flag): writes under the directory fail
        with ENOSPC while the flag exists (tests/integration/full_disk.py); ``extra``: more
        arguments."""
        config = self.config
        command = [
            str(Path(sys.executable).with_name("pgbridge")), "apply",
            "--topic-prefix", config.topic_prefix,
            "--bootstrap-servers", config.bootstrap_servers,
            "--registry-url", config.registry_url,
            "--delta-base", config.delta_base,
            "--checkpoint", config.checkpoint_location,
            "--dead-letter", config.dead_letter_location,
            *(arg for option in KAFKA_OPTIONS for arg in ("--kafka-option", option)),
            *PROFILES[profile],
            *(["--available-now"] if available_now else []),
            *extra,
        ]  # fmt: skip
        env = {
            **os.environ,
            "PGBRIDGE_SPARK_MASTER": "local[2]",
            "PGBRIDGE_SPARK_JARS": ",".join(self.stack.spark_jars),
            **({PAUSE_AFTER_MERGE_ENV: "600"} if pause_after_merge else {}),
        }
        if full_disk is not None:
            shim, directory, flag = full_disk
            env.update(
                LD_PRELOAD=str(shim),
                PGBRIDGE_FULL_DISK_DIR=str(directory),
                PGBRIDGE_FULL_DISK_FLAG=str(flag),
            )
        with self.log_path.open("ab") as log:
            log.write(
                f"\n==== started: {profile}, pause after merge {pause_after_merge}, full "
                f"disk {full_disk is not None}\n".encode()
            )
            log.flush()
            self.process = subprocess.Popen(
                command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL to the job's process group: its Python process and its JVM."""
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def terminate(self) -> tuple[int | None, str]:
        """SIGTERM to the job's process only (as a service manager sends it); its exit code
        (None: still running after STOP_TIMEOUT_S, then killed) and its log since it started."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        try:
            code: int | None = self.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            code = None
        self.kill()  # its JVM too, should it outlive the process
        return code, self.log_since_start()

    def log_since_start(self) -> str:
        return self.log_path.read_text(errors="replace").rsplit("==== started", 1)[-1]

    def replay_pending(self) -> bool:
        """Whether the checkpoint holds a batch's offsets but not its commit (the next start
        applies that batch again)."""
        checkpoint = Path(self.config.checkpoint_location)
        planned, committed = (
            max((int(p.name) for p in (checkpoint / d).glob("*") if p.name.isdigit()), default=-1)
            for d in ("offsets", "commits")
        )
        return planned > committed

    def batches_committed(self) -> int:
        """Batches the job's checkpoint has committed."""
        commits = Path(self.config.checkpoint_location, "commits")
        return sum(1 for p in commits.glob("*") if p.name.isdigit()) if commits.exists() else 0


def _merge_commits(config: ApplyConfig) -> int:
    """Commits that applied changes to the tables (each names its batch in its userMetadata)."""
    count = 0
    for table in TABLES:
        log = Path(config.table_path("public", table), "_delta_log")
        for entry in log.glob("*.json") if log.exists() else ():
            count += entry.read_text().count('"userMetadata"')
    return count


class ApplySoakRig:
    """The scratch database, the rig's broker, ``pgbridge run`` and the apply job."""

    def __init__(self, stack: StackInfo, spark: Any, seed: int) -> None:
        self.stack = stack
        self.spark = spark
        self.rng = random.Random(seed)
        self.seed = seed
        self.work = Path(tempfile.mkdtemp(prefix="pgbridge-apply-soak-"))
        self.results: list[FaultResult] = []
        self._exit = contextlib.ExitStack()
        self.broker = KafkaBroker(
            self.work / "kafka", heap="384m", jvm_options=SHORT_LIVED_JVM_OPTIONS
        )
        self.prefix = f"asoak{uuid.uuid4().hex[:8]}"
        self.config: ApplyConfig | None = None  # once the broker runs
        self.dsn = ""
        self.bridge: RunningBridge | None = None
        self.writer: Writer | None = None
        self.job: ApplyJob | None = None

    def start(self) -> None:
        self.broker.start()  # errors, never skips, if it cannot start
        self._exit.callback(self._stop_broker)
        self.config = ApplyConfig(
            topic_prefix=self.prefix,
            bootstrap_servers=self.broker.bootstrap_servers,
            registry_url=self.stack.registry_url,
            delta_base=str(self.work / "delta"),
            checkpoint_location=str(self.work / "checkpoint"),
            dead_letter_location=str(self.work / "dead-letter"),
        )
        self.dsn = self._exit.enter_context(scratch_database(self.stack))
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(SCHEMA)
        self.bridge = RunningBridge(
            bridge_config(
                self.stack,
                self.dsn,
                self.prefix,
                **{"kafka.bootstrap.servers": self.broker.bootstrap_servers},
            )
        )
        self._exit.callback(self.bridge.stop)
        self.writer = Writer(self.dsn, self.seed)
        self.writer.start()
        self.job = ApplyJob(self.config, self.stack, self.work / "apply.log")
        self._exit.callback(self.job.kill)
        self.job.start("defaults")
        self._wait_for_batches(1, CATCH_UP_S, "the job's first batch")

    def close(self) -> None:
        if self.writer is not None:
            self.writer.stop.set()
        self._exit.close()
        shutil.rmtree(self.work, ignore_errors=True)

    def _stop_broker(self) -> None:
        self.broker.stop()

    def _wait_for_batches(self, count: int, timeout: float, what: str) -> float:
        assert self.job is not None
        started = time.monotonic()
        while self.job.batches_committed() < count:
            assert self.job.alive(), f"the apply job ended:\n{self.job.log_since_start()[-4000:]}"
            assert time.monotonic() - started < timeout, f"no {what} within {timeout:.0f} s"
            time.sleep(0.2)
        return time.monotonic() - started

    def inject(self, fault: str) -> None:
        job = self.job
        assert job is not None
        profile = self.rng.choice(sorted(PROFILES))
        if fault == "apply SIGKILL":
            job.kill()
        elif fault == "apply SIGKILL after a MERGE":
            self._stop_between_batches()
            merged = _merge_commits(job.config)
            committed = job.batches_committed()
            job.start(profile, pause_after_merge=True)
            deadline = time.monotonic() + CATCH_UP_S
            while _merge_commits(job.config) == merged:
                assert job.alive(), f"the apply job ended:\n{job.log_since_start()[-4000:]}"
                assert time.monotonic() < deadline, "the job did not MERGE"
                time.sleep(0.2)
            job.kill()
            assert job.batches_committed() == committed, "killed after its checkpoint's commit"
        elif fault == "apply SIGTERM":
            code, log = job.terminate()
            assert code == 0, f"SIGTERM: the job exited with {code}:\n{log[-4000:]}"
            at = log.find("Traceback")
            assert at < 0, f"a traceback at a clean stop:\n{log[max(0, at - 3000) : at + 3000]}"
        elif fault == "broker SIGKILL":

            def running() -> None:
                assert job.alive(), f"the job ended in the outage:\n{job.log_since_start()[-4000:]}"

            broker_outage(self.broker, OUTAGE_S, running)
        elif fault.startswith("a table's disk full"):
            self._table_disk_full(profile, kept_running=fault.endswith("(kept running)"))
        else:
            raise ValueError(f"unknown fault {fault!r}")
        if not job.alive():
            job.start(profile)
        else:
            profile = "(kept running)"
        result = FaultResult(fault, profile)
        self.results.append(result)
        result.recover_s = self._wait_for_batches(
            job.batches_committed() + 1, CATCH_UP_S, f"batch after {fault}"
        )
        if fault.startswith("a table's disk full"):  # the held records applied (replay.py)
            assert self._released() in job.log_since_start(), job.log_since_start()[-4000:]

    def _released(self) -> str:
        """bridge.spark.replay's line when it applied FULL_TABLE's held records."""
        return f"{self.prefix}.public.{FULL_TABLE} released"

    def _table_disk_full(self, profile: str, kept_running: bool) -> None:
        """Restarted with FULL_TABLE's disk full until the job holds it and a batch after;
        then space again, and the job applies the held records itself (``kept_running``) or
        is stopped, to be started again by ``inject``."""
        job = self.job
        assert job is not None
        code, log = job.terminate()
        assert code == 0, f"SIGTERM: the job exited with {code}:\n{log[-4000:]}"
        flag = self.work / "disk-full"
        flag.touch()
        directory = Path(job.config.table_path("public", FULL_TABLE))
        job.start(
            profile,
            full_disk=(build_shim(self.work), directory, flag),
            extra=HELD_RETRY if kept_running else (),
        )
        deadline = time.monotonic() + CATCH_UP_S
        # bridge.spark.applier's line when a batch held the table's records back
        held = (
            "held back (set aside before, applied when the table is tried again): "
            f"{self.prefix}.public.{FULL_TABLE}"
        )
        while held not in (log := job.log_since_start()):
            assert job.alive(), f"the apply job ended with a table's disk full:\n{log[-4000:]}"
            assert time.monotonic() < deadline, f"{FULL_TABLE} not held:\n{log[-4000:]}"
            time.sleep(0.5)
        if not kept_running:
            code, log = job.terminate()
            assert code == 0, f"SIGTERM: the job exited with {code}:\n{log[-4000:]}"
        flag.unlink()
        while kept_running and self._released() not in (log := job.log_since_start()):
            assert job.alive(), f"the apply job ended:\n{log[-4000:]}"
            assert time.monotonic() < deadline, f"{FULL_TABLE} not released:\n{log[-4000:]}"
            time.sleep(0.5)

    def _stop_between_batches(self) -> None:
        """SIGTERM; if the job left a batch to replay (one it had just started), a run with
        ``--available-now`` applies it and stops: the next start's first MERGE is then a new
        batch's (the failpoint also pauses after a table a replay skips, committing nothing)."""
        job = self.job
        assert job is not None
        code, log = job.terminate()
        assert code == 0, f"SIGTERM: the job exited with {code}:\n{log[-4000:]}"
        if job.replay_pending():
            job.start("defaults", available_now=True)
            assert job.process is not None
            code = job.process.wait(CATCH_UP_S)
            assert code == 0, f"--available-now exited with {code}:\n{job.log_since_start()}"
        assert not job.replay_pending()

    def steady(self, seconds: float) -> None:
        """Writing goes on and the job applies it, for ``seconds``; fails if either stopped."""
        assert self.writer is not None and self.job is not None
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            assert self.writer.error is None, self.writer.error
            assert self.job.alive(), f"the apply job ended:\n{self.job.log_since_start()[-4000:]}"
            time.sleep(0.5)

    def finish(self) -> None:
        """The writer stops; once everything written is in Kafka, the job catches up and every
        Delta table equals its source table; nothing was dead-lettered."""
        assert self.writer is not None and self.bridge is not None and self.job is not None
        self.writer.finish()
        self.bridge.wait_confirmed(mark(self.dsn), timeout=CATCH_UP_S)
        deadline = time.monotonic() + CATCH_UP_S
        while (differences := self.differences()) and time.monotonic() < deadline:
            assert self.job.alive(), self.job.log_since_start()
            time.sleep(3)
        assert not differences, "\n".join(differences)
        dead_letters = self.job.config.dead_letter_location
        if Path(dead_letters).exists():  # a held table's, applied and deleted since
            left = self.spark.read.format("delta").load(dead_letters).collect()
            assert not left, f"{len(left)} records dead-lettered, e.g. {left[:3]}"

    def differences(self) -> list[str]:
        """What each Delta table lacks or holds beyond its source table (as multisets of rows,
        so that a row applied twice shows), at most a few rows each."""
        assert self.job is not None
        found = []
        for table in TABLES:
            with (
                psycopg.connect(self.dsn) as conn,
                conn.cursor(row_factory=psycopg.rows.dict_row) as cur,
            ):
                source = cur.execute(sql.SQL("SELECT * FROM {}").format(
                    sql.Identifier(table))).fetchall()  # fmt: skip
                columns = [c.name for c in cur.description or ()]
            try:
                delta = self.spark.read.format("delta").load(
                    self.job.config.table_path("public", table)
                )
                held = [row.asDict() for row in delta.collect()]
            except Exception as exc:  # not created yet
                held = []
                if source:
                    found.append(f"{table}: not readable ({str(exc)[:200]})")
                    continue
            want = Counter(repr([comparable(r[c]) for c in columns]) for r in source)
            got = Counter(repr([comparable(r.get(c)) for c in columns]) for r in held)
            lacks, extra = want - got, got - want
            if lacks or extra:
                found.append(
                    f"{table}: {sum(lacks.values())} rows missing (e.g. {list(lacks)[:3]}), "
                    f"{sum(extra.values())} rows too many (e.g. {list(extra)[:3]})"
                )
        return found

    def report(self) -> str:
        lines = ["| fault | restarted with | a batch committed again after |", "|---|---|---|"]
        for r in self.results:
            after = f"{r.recover_s:.1f} s" if r.recover_s is not None else "never"
            lines.append(f"| {r.fault} | {r.profile} | {after} |")
        writer = self.writer
        total = f"{writer.transactions} transactions written" if writer else ""
        return "\n".join([*lines, total])


def run_cycle(
    stack: StackInfo, spark: Any, faults: list[str], seed: int, steady_s: float = 8.0
) -> str:
    """Each of ``faults`` in turn, ``steady_s`` of writing between them, the schema change
    halfway; the report. Fails if a table differs from its source at the end."""
    rig = ApplySoakRig(stack, spark, seed)
    try:
        rig.start()
        assert rig.writer is not None
        for i, fault in enumerate(faults):
            if i == len(faults) // 2:
                rig.writer.alter()
            rig.steady(steady_s)
            rig.inject(fault)
        rig.steady(steady_s)
        rig.finish()
        return rig.report()
    except BaseException:
        if rig.job is not None and rig.work.exists():
            print(rig.job.log_path.read_text(errors="replace")[-8000:], file=sys.stderr)
        raise
    finally:
        rig.close()


def _spark_session(stack: StackInfo) -> Any:
    from bridge.spark.session import build_spark_session

    return build_spark_session("pgbridge-apply-soak", jars=stack.spark_jars, master="local[1]")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    faults_per_minute = 60 / (20.0 + 35.0)  # a fault and a restarted job's first batch: ~35 s
    faults = [rng.choice(FAULTS) for _ in range(max(1, int(args.minutes * faults_per_minute)))]
    stack = LocalStack().up()
    os.environ.update(stack.env)
    spark = _spark_session(stack)
    try:
        print(f"seed {seed}: {len(faults)} faults", flush=True)
        print(run_cycle(stack, spark, faults, seed, steady_s=20.0))
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
