"""The same stack from container images with testcontainers, where a Docker engine exists.

Selected with ``PGBRIDGE_STACK=containers`` (the test fixtures) instead of the Maven-Central
processes of :mod:`bridge.devstack.stack`. The images are the ones ``docker-compose.yml`` uses.
Spark's jars still come from the local cache (:func:`bridge.devstack.spark.ensure_spark_jars`).

Not exercised by this project's CI, whose machines have no Docker engine; the process-based
stack is what CI and ``make demo`` run on.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from bridge.devstack.spark import ensure_spark_jars
from bridge.devstack.stack import StackInfo
from bridge.errors import StackError

POSTGRES_IMAGE = "postgres:18"
KAFKA_IMAGE = "apache/kafka:4.1.1"
REGISTRY_IMAGE = "apicurio/apicurio-registry:3.3.3"
_PG_SETTINGS = (
    "postgres -c wal_level=logical -c max_replication_slots=20 -c max_wal_senders=20 "
    "-c max_prepared_transactions=20"
)


def start_container_stack(timeout: float = 180.0) -> tuple[StackInfo, Callable[[], None]]:
    """Start PostgreSQL, Kafka (KRaft) and Apicurio as containers; returns (info, stop)."""
    from testcontainers.community.kafka import KafkaContainer
    from testcontainers.community.postgres import PostgresContainer
    from testcontainers.core.container import DockerContainer

    started: list[Any] = []

    def stop() -> None:
        for container in reversed(started):
            container.stop()

    try:
        pg = PostgresContainer(POSTGRES_IMAGE, username="postgres", password="postgres")
        pg.with_command(_PG_SETTINGS).start()
        started.append(pg)
        kafka = KafkaContainer(KAFKA_IMAGE).with_kraft()
        kafka.start()
        started.append(kafka)
        registry = DockerContainer(REGISTRY_IMAGE).with_exposed_ports(8080)
        registry.start()
        started.append(registry)
        url = (
            f"http://{registry.get_container_host_ip()}:{registry.get_exposed_port(8080)}"
            "/apis/ccompat/v7"
        )
        _wait_http(f"{url}/subjects", timeout)
    except Exception as exc:
        stop()
        raise StackError("containers", f"could not start the container stack: {exc}") from exc
    info = StackInfo(
        stack_dir="",
        postgres_major=POSTGRES_IMAGE.rsplit(":", 1)[1],
        postgres_port=int(pg.get_exposed_port(5432)),
        bootstrap_servers=kafka.get_bootstrap_server(),
        registry_url=url,
        spark_jars=tuple(str(p) for p in ensure_spark_jars()),
        postgres_host=pg.get_container_host_ip(),
        postgres_password="postgres",
    )
    return info, stop


def _wait_http(url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(1)
    raise StackError("registry", f"{url} did not answer within {timeout:.0f} s")
