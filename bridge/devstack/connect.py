"""A Kafka Connect standalone worker (the stack's Kafka version) with Debezium's consumers.

The worker's classpath is resolved from Maven Central with ``poms/connect.xml``; its plugin path
holds one directory per plugin, each resolved with its own POM so that plugin class loaders stay
isolated, as Kafka Connect expects:

- ``jdbc-sink``: ``io.debezium:debezium-connector-jdbc`` and the PostgreSQL JDBC driver
  (``poms/connect-jdbc-sink.xml``);
- ``apicurio-converter``: ``io.apicurio:apicurio-registry-utils-converter`` 2.6.x
  (``poms/connect-apicurio-converter.xml``). The 3.x converter does not resolve from Maven
  Central (its dependencies' POMs point Maven at other repositories); 2.6 with
  ``apicurio.registry.as-confluent`` reads Confluent framing (magic byte, 4-byte id) and talks
  to the stack's Apicurio 3.x through its v2 API, where the id of the Confluent-compatible API
  is the content id (``apicurio.registry.use-id=contentId``). See :func:`apicurio_converter`.

The worker is not part of ``pgbridge dev up``: compatibility tests start one next to the stack
(it needs ~0.5 GB of heap) and connectors are created through its REST API.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import time
import urllib.error
import urllib.request
from importlib import resources
from pathlib import Path
from typing import Any

from bridge.devstack import maven
from bridge.devstack.kafka import _LOG4J2
from bridge.devstack.paths import cache_dir
from bridge.devstack.process import port_open
from bridge.devstack.service import Service, find_java
from bridge.errors import StackError

logger = logging.getLogger(__name__)

#: Plugin directory name -> the POM that resolves it.
PLUGINS: dict[str, str] = {
    "jdbc-sink": "poms/connect-jdbc-sink.xml",
    "apicurio-converter": "poms/connect-apicurio-converter.xml",
    "postgres-source": "poms/connect-postgres-source.xml",
}

APICURIO_CONVERTER = "io.apicurio.registry.utils.converter.AvroConverter"
JDBC_SINK_CONNECTOR = "io.debezium.connector.jdbc.JdbcSinkConnector"
POSTGRES_SOURCE_CONNECTOR = "io.debezium.connector.postgresql.PostgresConnector"


def _resolve(part: str, pom_name: str, target: Path) -> Path:
    """Copy a POM's runtime jars into ``target`` once (``.complete`` marks a finished copy)."""
    if (target / ".complete").exists():
        return target
    shutil.rmtree(target, ignore_errors=True)
    pom = resources.files("bridge.devstack").joinpath(pom_name)
    with resources.as_file(pom) as pom_path:
        maven.copy_dependencies(part, Path(pom_path), target)
    (target / ".complete").touch()
    return target


def _pom_digest(*pom_names: str) -> str:
    digest = hashlib.sha256()
    for name in pom_names:
        digest.update(resources.files("bridge.devstack").joinpath(name).read_bytes())
    return digest.hexdigest()[:12]


def ensure_connect_classpath() -> Path:
    """The worker's jars, keyed by the POM's content so that a version bump fetches anew."""
    pom = "poms/connect.xml"
    return _resolve("connect", pom, cache_dir() / "connect" / _pom_digest(pom))


def ensure_connect_plugins() -> Path:
    """The ``plugin.path`` root: one subdirectory per plugin, keyed by every plugin POM."""
    root = cache_dir() / "connect-plugins" / _pom_digest(*PLUGINS.values())
    for name, pom in PLUGINS.items():
        _resolve(f"connect plugin {name}", pom, root / name)
    return root


def registry_v2_url(ccompat_url: str) -> str:
    """Apicurio's v2 API next to its Confluent-compatible one (``…/apis/ccompat/v7``)."""
    base, sep, _ = ccompat_url.rstrip("/").partition("/apis/")
    if not sep:
        raise ValueError(f"not an Apicurio API URL: {ccompat_url!r}")
    return f"{base}/apis/registry/v2"


def apicurio_converter(registry_url: str, prefix: str, *, register: bool = False) -> dict[str, str]:
    """Connector properties for Apicurio's Avro converter with Confluent framing.

    ``prefix`` is ``key.converter`` or ``value.converter``; ``registry_url`` is the stack's
    Confluent-compatible URL. Sinks read (``register`` False); a source connector writes and
    registers its schemas (``register`` True), under ids the Confluent-compatible API serves.
    """
    return {
        prefix: APICURIO_CONVERTER,
        f"{prefix}.apicurio.registry.url": registry_v2_url(registry_url),
        f"{prefix}.apicurio.registry.as-confluent": "true",
        f"{prefix}.apicurio.registry.use-id": "contentId",
        f"{prefix}.apicurio.registry.headers.enabled": "false",
        f"{prefix}.apicurio.registry.auto-register": "true" if register else "false",
        f"{prefix}.apicurio.registry.find-latest": "false",
    }


class ConnectWorker(Service):
    """``org.apache.kafka.connect.cli.ConnectStandalone`` with no connector at start."""

    part = "connect"
    start_timeout = 180.0

    def __init__(self, base_dir: Path, bootstrap_servers: str, heap: str = "512m") -> None:
        super().__init__(base_dir)
        self.bootstrap_servers = bootstrap_servers
        self.heap = heap
        self._lib: Path | None = None
        self._plugins: Path | None = None
        self._java: str | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port('rest_port')}"

    def install(self) -> None:
        self._lib = ensure_connect_classpath()
        self._plugins = ensure_connect_plugins()
        self._java = find_java(17, self.part)

    def _config_path(self) -> Path:
        return self.base_dir / "worker.properties"

    def prepare(self) -> None:
        assert self._plugins is not None, "install() first"
        settings = {
            "bootstrap.servers": self.bootstrap_servers,
            "listeners": f"http://127.0.0.1:{self.port('rest_port')}",
            "plugin.path": str(self._plugins),
            "offset.storage.file.filename": str(self.base_dir / "offsets"),
            "offset.flush.interval.ms": "1000",
            # Connectors name their converters; these only cover a connector that does not.
            "key.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "plugin.discovery": "only_scan",
        }
        self._config_path().write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        (self.base_dir / "log4j2.properties").write_text(_LOG4J2)

    def command(self) -> list[str]:
        assert self._lib is not None and self._java is not None, "install() first"
        return [
            self._java,
            f"-Xmx{self.heap}",
            f"-Dlog4j2.configurationFile={self.base_dir / 'log4j2.properties'}",
            "-cp",
            f"{self._lib}/*",
            "org.apache.kafka.connect.cli.ConnectStandalone",
            str(self._config_path()),
        ]

    def ready(self) -> bool:
        if not port_open(self.port("rest_port")):
            return False
        try:
            with urllib.request.urlopen(f"{self.url}/connector-plugins", timeout=2) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    # -- the REST API -----------------------------------------------------------------------

    def _request(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"{self.url}{path}", data=data, method=method,
            headers={"Content-Type": "application/json", "Accept": "application/json"},
        )  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=30) as resp:
                text = resp.read().decode()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            raise StackError(self.part, f"{method} {path}: HTTP {exc.code}: {detail}") from None
        return json.loads(text) if text else None

    def plugins(self) -> list[str]:
        """The connector classes the worker found on its plugin path."""
        return [p["class"] for p in self._request("GET", "/connector-plugins")]

    def put_connector(self, name: str, config: dict[str, str]) -> None:
        self._request("PUT", f"/connectors/{name}/config", {"name": name, **config})

    def delete_connector(self, name: str) -> None:
        self._request("DELETE", f"/connectors/{name}")

    def status(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self._request("GET", f"/connectors/{name}/status")
        return result

    def wait_running(self, name: str, timeout: float = 60.0) -> None:
        """Until the connector and all its tasks run; a failed task raises with its trace."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                status = self.status(name)
            except StackError:  # not created yet
                status = {}
            self.raise_if_failed(name, status)
            tasks = status.get("tasks", [])
            if (
                status.get("connector", {}).get("state") == "RUNNING"
                and tasks
                and all(t["state"] == "RUNNING" for t in tasks)
            ):
                return
            if time.monotonic() > deadline:
                raise StackError(self.part, f"connector {name} not running: {status}")
            time.sleep(0.5)

    def raise_if_failed(self, name: str, status: dict[str, Any] | None = None) -> None:
        status = self.status(name) if status is None else status
        for item in [status.get("connector", {}), *status.get("tasks", [])]:
            if item.get("state") == "FAILED":
                raise StackError(
                    self.part,
                    f"connector {name} failed (log {self.log_path}):\n{item.get('trace', '')}",
                )
