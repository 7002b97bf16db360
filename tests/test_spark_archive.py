"""The Spark class archive of the dev stack (bridge.devstack.spark_archive): one per Java,
PySpark and jar set, and a stack that starts without it when its dump fails."""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from bridge.devstack import spark_archive
from bridge.devstack.spark_archive import (
    archive_options,
    archive_path,
    ensure_spark_class_archive,
)


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGBRIDGE_CACHE", str(tmp_path / "cache"))


def test_each_jar_set_and_java_has_an_archive_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    one = archive_path(["/jars/a.jar"])
    assert archive_path(["/jars/a.jar"]) == one
    assert archive_path(["/jars/a.jar", "/jars/b.jar"]) != one
    monkeypatch.setenv("JAVA_HOME", "/another/jdk")
    assert archive_path(["/jars/a.jar"]) != one
    assert one.suffix == ".jsa"


def test_a_jar_written_again_gets_a_new_archive(tmp_path: Path) -> None:
    jar = tmp_path / "a.jar"
    jar.write_bytes(b"jar")
    first = archive_path([str(jar)])
    os.utime(jar, ns=(1, 1))  # the JVM would refuse the first archive: its jar changed
    assert archive_path([str(jar)]) != first


def test_options_map_the_archive_and_silence_a_mismatch() -> None:
    options = archive_options("/cache/x.jsa").split()
    assert "-XX:SharedArchiveFile=/cache/x.jsa" in options
    assert "-Xlog:cds=off" in options  # a JVM whose classpath does not fit runs without it


def test_a_kept_archive_is_reused_without_a_dump(monkeypatch: pytest.MonkeyPatch) -> None:
    target = archive_path(["/jars/a.jar"])
    target.parent.mkdir(parents=True)
    target.write_bytes(b"archive")

    def no_dump(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("dumped again")

    monkeypatch.setattr(spark_archive.subprocess, "run", no_dump)
    assert ensure_spark_class_archive(["/jars/a.jar"]) == target


def test_a_failed_dump_leaves_nothing_and_says_why(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def failing_dump(command: list[str], **kwargs: Any) -> Any:
        Path(command[3]).write_bytes(b"half an archive")  # the JVM died while writing it
        return subprocess.CompletedProcess(command, 1, "", "java.lang.OutOfMemoryError")

    monkeypatch.setattr(spark_archive.subprocess, "run", failing_dump)
    with caplog.at_level(logging.WARNING):
        assert ensure_spark_class_archive(["/jars/a.jar"]) is None
    assert "OutOfMemoryError" in caplog.text
    assert not list(archive_path(["/jars/a.jar"]).parent.iterdir())


def test_a_dump_is_kept_under_its_name(monkeypatch: pytest.MonkeyPatch) -> None:
    def dump(command: list[str], **kwargs: Any) -> Any:
        assert command[1:3] == ["-m", "bridge.devstack.spark_archive"]
        Path(command[3]).write_bytes(b"archive")
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(spark_archive.subprocess, "run", dump)
    target = ensure_spark_class_archive(["/jars/a.jar"])
    assert target == archive_path(["/jars/a.jar"])
    assert target.read_bytes() == b"archive"
    assert [p.name for p in target.parent.iterdir()] == [target.name]


def test_archives_of_older_venvs_go(monkeypatch: pytest.MonkeyPatch) -> None:
    directory = archive_path(["/jars/a.jar"]).parent
    directory.mkdir(parents=True)
    for age in range(5):
        old = directory / f"old-{age}.jsa"
        old.write_bytes(b"archive")
        os.utime(old, (1000 - age, 1000 - age))

    def dump(command: list[str], **kwargs: Any) -> Any:
        Path(command[3]).write_bytes(b"archive")
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(spark_archive.subprocess, "run", dump)
    target = ensure_spark_class_archive(["/jars/a.jar"])
    assert target is not None
    assert sorted(p.name for p in directory.iterdir()) == sorted(
        [target.name, "old-0.jsa", "old-1.jsa"]
    )
