"""The whole local stack: PostgreSQL, Kafka, the schema registry and Spark's jars, as one unit.

``up`` is idempotent (running parts are reused, stopped ones restarted on their old ports and
data), ``down`` stops everything and keeps the data, ``destroy`` removes it. The addresses of a
running stack are written to ``<stack dir>/stack.json`` and ``stack.env`` for other processes.
"""

from __future__ import annotations

import json
import logging
import shlex
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import psycopg

from bridge.devstack.kafka import KafkaBroker
from bridge.devstack.kafka_cluster import KafkaCluster
from bridge.devstack.paths import stack_dir
from bridge.devstack.postgres import DEFAULT_MAJOR, PostgresCluster, ensure_postgres_binaries
from bridge.devstack.registry import ApicurioRegistry
from bridge.devstack.spark import ensure_spark_jars

logger = logging.getLogger(__name__)

PARTS = ("postgres", "kafka", "registry", "spark")
REGISTRY_DATABASE = "apicurio"


@dataclass(frozen=True)
class StackInfo:
    """How to reach a running stack."""

    stack_dir: str
    postgres_major: str
    postgres_port: int
    bootstrap_servers: str
    registry_url: str
    spark_jars: tuple[str, ...] = ()
    start_seconds: dict[str, float] = field(default_factory=dict)
    postgres_host: str = "127.0.0.1"
    postgres_password: str | None = None  # the local cluster trusts loopback; containers do not
    brokers: int = 1  # Kafka brokers (``pgbridge dev up --brokers 3``: a cluster)

    def postgres_dsn(self, dbname: str = "postgres") -> str:
        dsn = f"host={self.postgres_host} port={self.postgres_port} user=postgres dbname={dbname}"
        return dsn + (f" password={self.postgres_password}" if self.postgres_password else "")

    @property
    def env(self) -> dict[str, str]:
        return {
            "PGBRIDGE_PG_DSN": self.postgres_dsn(),
            "PGBRIDGE_BOOTSTRAP_SERVERS": self.bootstrap_servers,
            "PGBRIDGE_REGISTRY_URL": self.registry_url,
            "PGBRIDGE_SPARK_JARS": ",".join(self.spark_jars),
        }


class LocalStack:
    def __init__(
        self,
        directory: Path | None = None,
        postgres_major: str | None = None,
        brokers: int | None = None,
    ) -> None:
        """``brokers``: Kafka's brokers, one (the default) or a cluster (kept for the next
        ``up`` and ``down`` until given again)."""
        self.dir = (directory or stack_dir()).resolve()
        self.dir.mkdir(parents=True, exist_ok=True)
        recorded = self._read_info()
        self.postgres_major = postgres_major or (
            recorded.postgres_major if recorded else DEFAULT_MAJOR
        )
        self._pg: PostgresCluster | None = None
        self.brokers = brokers or (recorded.brokers if recorded else 1)
        self.kafka: KafkaBroker | KafkaCluster = (
            KafkaBroker(self.dir / "kafka")
            if self.brokers == 1
            else KafkaCluster(self.dir / f"kafka-cluster-{self.brokers}", self.brokers)
        )

    @property
    def postgres(self) -> PostgresCluster:
        if self._pg is None:
            bindir = ensure_postgres_binaries(self.postgres_major)
            self._pg = PostgresCluster(bindir, self.dir / f"postgres-{self.postgres_major}")
        return self._pg

    @property
    def registry(self) -> ApicurioRegistry:
        jdbc = f"jdbc:postgresql://127.0.0.1:{self.postgres.port}/{REGISTRY_DATABASE}"
        return ApicurioRegistry(self.dir / "registry", jdbc)

    def up(self) -> StackInfo:
        timings: dict[str, float] = {}
        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=1) as pool:
            jars = pool.submit(ensure_spark_jars)  # a download at most; overlaps the starts
            t = time.monotonic()
            self.postgres.start()
            _ensure_database(self.postgres.dsn(), REGISTRY_DATABASE)
            timings["postgres"] = time.monotonic() - t
            registry = self.registry
            t = time.monotonic()
            self.kafka.launch()
            registry.launch()
            self.kafka.wait_ready()
            timings["kafka"] = time.monotonic() - t
            registry.wait_ready()
            timings["registry"] = time.monotonic() - t
            t = time.monotonic()
            spark_jars = tuple(str(p) for p in jars.result())
            timings["spark"] = time.monotonic() - t
        timings["total"] = time.monotonic() - started
        info = StackInfo(
            stack_dir=str(self.dir),
            postgres_major=self.postgres_major,
            postgres_port=self.postgres.port,
            bootstrap_servers=self.kafka.bootstrap_servers,
            registry_url=registry.url,
            spark_jars=spark_jars,
            start_seconds={k: round(v, 1) for k, v in timings.items()},
            brokers=self.brokers,
        )
        self._write_info(info)
        return info

    def down(self) -> None:
        """Stop every part, keeping data, ports and caches for the next ``up``."""
        self.registry.stop()
        self.kafka.stop()
        self.postgres.stop()

    def destroy(self) -> None:
        self.down()
        shutil.rmtree(self.dir, ignore_errors=True)

    def status(self) -> dict[str, dict[str, str | bool]]:
        registry = self.registry
        return {
            "postgres": {
                "running": self.postgres.is_running(),
                "address": self.postgres.dsn(),
                "log": str(self.postgres.log_path),
            },
            "kafka": {
                "running": self.kafka.is_running(),
                "address": self.kafka.bootstrap_servers,
                "log": str(self.kafka.log_path),
            },
            "registry": {
                "running": registry.is_running(),
                "address": registry.url,
                "log": str(registry.log_path),
            },
        }

    def _read_info(self) -> StackInfo | None:
        path = self.dir / "stack.json"
        if not path.exists():
            return None
        data = json.loads(path.read_text())
        data["spark_jars"] = tuple(data.get("spark_jars", ()))
        # Keys another pgbridge version wrote (a field added or removed since) are left out:
        # this one must still find, stop and restart that stack.
        known = {f.name for f in fields(StackInfo)}
        return StackInfo(**{k: v for k, v in data.items() if k in known})

    def _write_info(self, info: StackInfo) -> None:
        (self.dir / "stack.json").write_text(json.dumps(asdict(info), indent=2))
        (self.dir / "stack.env").write_text(
            "".join(f"export {k}={shlex.quote(v)}\n" for k, v in info.env.items())
        )


def _ensure_database(dsn: str, name: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{name}"')
