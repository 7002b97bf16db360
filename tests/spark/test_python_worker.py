"""bridge.spark.python_worker: a reused Python worker's per-task housekeeping stays cheap, and
a zip archive on the path that does change is still read again."""

from __future__ import annotations

import gc
import importlib
import sys
import zipfile
import zipimport
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark import TaskContext

from bridge.spark import python_worker


@pytest.fixture
def in_a_task() -> Iterator[None]:
    """As in a Spark task: a task context is set; what it froze is unfrozen after."""
    TaskContext._setTaskContext(TaskContext())
    try:
        yield
    finally:
        TaskContext._setTaskContext(None)  # type: ignore[arg-type]
        gc.unfreeze()
        python_worker._modules_at_freeze = -1


def _archive(path: Path, modules: dict[str, str]) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in modules.items():
            archive.writestr(f"{name}.py", text)


def _importer_on_path(archive: Path, monkeypatch: pytest.MonkeyPatch) -> zipimport.zipimporter:
    monkeypatch.syspath_prepend(str(archive))
    importer = zipimport.zipimporter(str(archive))
    monkeypatch.setitem(sys.path_importer_cache, str(archive), importer)
    return importer


def test_outside_a_task_nothing_is_frozen_or_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = tmp_path / "a.zip"
    _archive(archive, {"pgb_outside": "X = 1"})
    importer = _importer_on_path(archive, monkeypatch)
    frozen = gc.get_freeze_count()
    python_worker.settle()
    assert gc.get_freeze_count() == frozen
    assert "invalidate_caches" not in vars(importer)


def test_in_a_task_the_worker_is_frozen_once_per_growth_of_its_imports(in_a_task: None) -> None:
    python_worker.settle()
    frozen = gc.get_freeze_count()
    assert frozen > 0
    held = [[i] for i in range(1000)]  # a task's objects, after the freeze
    python_worker.settle()  # no new import: they are not frozen (frozen ones may be freed)
    assert gc.get_freeze_count() < frozen + len(held)


def test_an_unchanged_archive_is_not_read_again_and_a_changed_one_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, in_a_task: None
) -> None:
    archive = tmp_path / "b.zip"
    _archive(archive, {"pgb_first": "X = 1"})
    importer = _importer_on_path(archive, monkeypatch)
    python_worker.settle()
    files = importer._files  # type: ignore[attr-defined]
    importlib.invalidate_caches()
    assert importer._files is files  # type: ignore[attr-defined]

    _archive(archive, {"pgb_first": "X = 1", "pgb_second": "Y = 2"})
    importlib.invalidate_caches()
    assert importer._files is not files  # type: ignore[attr-defined]
    monkeypatch.delitem(sys.modules, "pgb_second", raising=False)
    assert importlib.import_module("pgb_second").Y == 2
