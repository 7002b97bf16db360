"""A class-data archive of the Spark driver JVM (AppCDS), built once per machine.

A Spark driver loads about 16,000 classes (Spark SQL, Delta, the Kafka source, Scala) before its
first MERGE, reading, parsing and verifying each from its jar. Every ``pgbridge apply`` start,
the demo and each Spark test paid that again, so the dev stack dumps the classes one warm-up run
loads (``-XX:ArchiveClassesAtExit``) and exports the archive as ``PGBRIDGE_SPARK_CLASS_ARCHIVE``;
:func:`bridge.spark.session.build_spark_session` maps it into the driver when it exists. A cold
driver's start to its second MERGE: 0.84x the wall time and 0.86x the CPU with the job's
settings, about 0.7x the CPU with the tests' (interpreted expressions), measured by
``bench/spark_start_bench.py``.

The JVM checks an archive against its classpath and refuses (and says so) one that does not
match, but a truncated archive crashes it: the archive is dumped under a temporary name, proved
by a second driver that starts with it, and only then renamed into place. Its name carries the
Java runtime, PySpark and the jars' sizes and times, so an upgrade builds a new one.
"""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bridge.devstack.paths import cache_dir
from bridge.spark.session import CLASS_ARCHIVE_ENV

log = logging.getLogger(__name__)

_BUILD_TIMEOUT_S = 300


def ensure_spark_class_archive(jars: Sequence[str]) -> Path | None:
    """The archive for this Java, PySpark and ``jars``, built if missing; None (logged) when it
    cannot be built: Spark then starts as it would without one, only slower."""
    try:
        path = archive_path(jars)
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("Spark class archive: cannot identify the Java runtime (%s); not used", exc)
        return None
    if path.exists():
        return path
    started = time.monotonic()
    temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        _run_warm_up(jars, f"-XX:ArchiveClassesAtExit={temporary}")
        if not temporary.exists():
            raise RuntimeError("the warm-up driver exited without writing the archive")
        _run_warm_up(jars, f"-XX:SharedArchiveFile={temporary}", probe=True)
        os.replace(temporary, path)
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        log.warning("Spark class archive: not built (%s); Spark starts without one", exc)
        return None
    finally:
        temporary.unlink(missing_ok=True)
    log.info("Spark class archive built in %.1f s: %s", time.monotonic() - started, path)
    return path


def archive_path(jars: Sequence[str]) -> Path:
    import pyspark

    java = subprocess.run(
        [_java(), "-version"], capture_output=True, text=True, timeout=60, check=True
    ).stderr
    identity = [java, pyspark.__version__]
    for jar in jars:
        stat = os.stat(jar)
        identity.append(f"{jar}:{stat.st_size}:{stat.st_mtime_ns}")
    digest = hashlib.sha256("\n".join(identity).encode()).hexdigest()[:16]
    directory = cache_dir() / "spark-class-archives"
    directory.mkdir(parents=True, exist_ok=True)
    return directory / f"driver-{pyspark.__version__}-{digest}.jsa"


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    return str(Path(home) / "bin" / "java") if home else "java"


def _run_warm_up(jars: Sequence[str], java_option: str, probe: bool = False) -> None:
    args = [sys.executable, "-m", "bridge.devstack.spark_warm_up", java_option, *jars]
    if probe:
        args.insert(3, "--probe")
    env = {k: v for k, v in os.environ.items() if k not in (CLASS_ARCHIVE_ENV, "SPARK_SUBMIT_OPTS")}
    done = subprocess.run(args, capture_output=True, text=True, timeout=_BUILD_TIMEOUT_S, env=env)
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).strip().splitlines()[-5:]
        what = "the probe with the archive" if probe else "the warm-up driver"
        raise RuntimeError(f"{what} exited with {done.returncode}: {' | '.join(tail)}")
