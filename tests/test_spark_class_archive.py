"""The Spark class archive's wiring: which driver gets it, and which archive belongs to which
Java, PySpark and jars (the archive itself: tests/integration/test_stack_smoke.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bridge.devstack import spark_classes
from bridge.spark import session


def test_the_driver_option_names_an_existing_archive_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = tmp_path / "driver.jsa"
    monkeypatch.setenv(session.CLASS_ARCHIVE_ENV, str(archive))
    assert session._class_archive_option() is None  # not built (yet): Spark starts without
    archive.write_bytes(b"x")
    assert session._class_archive_option() == f"-XX:SharedArchiveFile={archive}"
    monkeypatch.delenv(session.CLASS_ARCHIVE_ENV)
    assert session._class_archive_option() is None


def test_a_changed_jar_names_another_archive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGBRIDGE_CACHE", str(tmp_path / "cache"))
    jar = tmp_path / "delta.jar"
    jar.write_bytes(b"v1")
    first = spark_classes.archive_path([str(jar)])
    assert first == spark_classes.archive_path([str(jar)])
    assert first.parent == tmp_path / "cache" / "spark-class-archives"
    jar.write_bytes(b"v2 longer")
    os.utime(jar, ns=(1, 1))
    assert spark_classes.archive_path([str(jar)]) != first


def test_an_archive_that_cannot_be_built_leaves_spark_without_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("PGBRIDGE_CACHE", str(tmp_path / "cache"))
    jar = tmp_path / "delta.jar"
    jar.write_bytes(b"v1")

    def failing_warm_up(jars: object, java_option: str, probe: bool = False) -> None:
        Path(java_option.split("=", 1)[1]).write_bytes(b"half an archive")
        raise RuntimeError("the warm-up driver exited with 1: OutOfMemoryError")

    monkeypatch.setattr(spark_classes, "_run_warm_up", failing_warm_up)
    assert spark_classes.ensure_spark_class_archive([str(jar)]) is None
    assert "OutOfMemoryError" in caplog.text
    # Nothing half-written is left where a driver would map it (a truncated archive crashes
    # the JVM).
    assert list((tmp_path / "cache" / "spark-class-archives").iterdir()) == []
