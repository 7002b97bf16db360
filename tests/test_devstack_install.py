"""The dev stack installs a downloaded part once, however many test workers ask at once
(bridge.devstack.maven.install_artifact): two unpacking into one partial directory broke each
other (a CI run's PostgreSQL 13 for two workers: ``13.23.0.partial`` vanished under one)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from bridge.devstack import maven


def test_parts_asked_for_side_by_side_are_installed_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def copy_artifact(part: str, coordinate: str, dest_dir: Path) -> Path:
        dest_dir.mkdir(parents=True, exist_ok=True)
        archive = dest_dir / "part.tar"
        archive.write_bytes(b"archive")
        return archive

    unpacked: list[str] = []

    def unpack(archive: Path, directory: Path) -> None:
        unpacked.append(threading.current_thread().name)
        time.sleep(0.2)  # long enough for the other worker to arrive meanwhile
        (directory / "bin").write_text(archive.read_text())

    monkeypatch.setattr(maven, "copy_artifact", copy_artifact)
    target = tmp_path / "cache" / "part-1.0"
    results: list[Path] = []
    workers = [
        threading.Thread(
            target=lambda: results.append(
                maven.install_artifact("part", "g:a:1.0", target, unpack)
            ),
            name=f"worker-{i}",
        )
        for i in range(2)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert results == [target, target]
    assert len(unpacked) == 1
    assert (target / "bin").read_text() == "archive"
    assert not target.with_name("part-1.0.partial").exists()
