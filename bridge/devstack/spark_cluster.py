"""A Spark standalone cluster on loopback, from the PySpark distribution: one master, N workers.

Where the apply job outgrows one machine, a Spark cluster is how it scales; this is the same
kind of cluster (``spark://`` master, workers with their own executors, the jobs' jars shipped
by ``spark.jars``) on one machine, for the integration test and for trying
``pgbridge apply --master spark://…`` by hand. PySpark's pip package carries Spark's jars and
``bin/spark-class``, so nothing is downloaded.
"""

from __future__ import annotations

import json
import os
import shutil
import urllib.request
from pathlib import Path

from bridge.devstack.service import Service, find_java

__all__ = ["SparkMaster", "SparkWorker", "spark_home"]


def spark_home() -> Path:
    """The PySpark distribution's directory (``bin/spark-class``, ``jars/``)."""
    import pyspark

    return Path(pyspark.__file__).parent


class _SparkDaemon(Service):
    start_timeout = 90.0

    def install(self) -> None:
        find_java(17, self.part)  # fails with what to install

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        found = find_java(17, self.part)
        java = Path(shutil.which(found) or found).resolve()  # may be "java" on PATH
        env["JAVA_HOME"] = str(java.parent.parent)
        env["SPARK_HOME"] = str(spark_home())
        env["SPARK_LOG_DIR"] = str(self.base_dir)
        env["SPARK_LOCAL_IP"] = "127.0.0.1"
        env.setdefault("SPARK_DAEMON_MEMORY", "256m")
        # The master and workers only coordinate (the work runs in executors they start): the
        # client JIT and a serial GC keep them from taking cores the job needs.
        env.setdefault("SPARK_DAEMON_JAVA_OPTS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        return env

    def _spark_class(self, main: str, *args: str) -> list[str]:
        return [str(spark_home() / "bin" / "spark-class"), main, *args]


class SparkMaster(_SparkDaemon):
    part = "spark-master"

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port('master')}"

    def command(self) -> list[str]:
        return self._spark_class(
            "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1",
            "--port", str(self.port("master")),
            "--webui-port", str(self.port("webui")),
        )  # fmt: skip

    def status(self) -> dict[str, object]:
        """The master's own account of its cluster (``/json``: workers, cores, applications)."""
        url = f"http://127.0.0.1:{self.port('webui')}/json/"
        with urllib.request.urlopen(url, timeout=5) as response:
            return dict(json.load(response))

    def alive_workers(self) -> int:
        try:
            return int(str(self.status().get("aliveworkers", 0)))
        except OSError:
            return 0

    def ready(self) -> bool:
        try:
            self.status()
        except OSError:
            return False
        return True


class SparkWorker(_SparkDaemon):
    """One worker offering ``cores`` and ``memory`` to the master's applications."""

    def __init__(self, base_dir: Path, master: SparkMaster, cores: int, memory: str) -> None:
        self.part = f"spark-worker-{base_dir.name}"
        super().__init__(base_dir)
        self.master = master
        self.cores = cores
        self.memory = memory

    def command(self) -> list[str]:
        return self._spark_class(
            "org.apache.spark.deploy.worker.Worker",
            "--host", "127.0.0.1",
            "--cores", str(self.cores),
            "--memory", self.memory,
            "--webui-port", str(self.port("webui")),
            "--work-dir", str(self.base_dir / "work"),
            self.master.url,
        )  # fmt: skip

    def ready(self) -> bool:
        return self.master.alive_workers() > 0
