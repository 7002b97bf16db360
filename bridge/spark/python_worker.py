"""Keeps a reused PySpark Python worker's per-task housekeeping from growing with the worker.

PySpark's daemon runs every task of a reused worker between two calls whose cost is the
worker's, not the task's:

- before the task, ``importlib.invalidate_caches()`` (``worker_util.setup_spark_files``). On
  Python 3.10 and 3.11 a zip importer's invalidation re-reads its archive's whole directory
  (CPython gh-103200, made lazy in 3.12; SPARK-54744 calls it less, after Spark 4.0), and a
  worker holds one importer per package it imported from ``pyspark.zip``, py4j's zip and
  spark-core's jar: 65 ms a task, measured in the task lane's workers;
- after the task, a full ``gc.collect()`` (``daemon.manager``) over every object the worker
  holds, the modules it imported included: 23-86 ms a task at 100,000-136,000 objects.

The lane runs two such tasks a batch on each core, so these took about a tenth of a batch of
the 4-table mix (docs/measurements.md). :func:`settle` makes both cost what the task adds.
"""

from __future__ import annotations

import gc
import os
import sys
import zipimport
from typing import Any

__all__ = ["settle"]

#: ``len(sys.modules)`` at this worker's last ``gc.freeze()``; -1 before the first.
_modules_at_freeze = -1


def settle() -> None:
    """Called at the start of a task in a Python worker: freezes what the worker holds once
    its imports have grown (modules live as long as the worker: collections need not scan
    them), and makes each zip importer re-read its archive only when the archive changed.
    Does nothing outside a Spark task (the driver, a test calling a task's function)."""
    from pyspark import TaskContext

    global _modules_at_freeze
    if TaskContext.get() is None:
        return
    if len(sys.modules) != _modules_at_freeze:
        # Frozen objects are still freed when their count drops to zero; only cyclic garbage
        # among them stays. Each freeze follows new imports, so a worker freezes a few times.
        gc.freeze()
        _modules_at_freeze = len(sys.modules)
    for importer in list(sys.path_importer_cache.values()):
        if isinstance(importer, zipimport.zipimporter):
            _invalidate_on_change(importer)


def _archive_stamp(archive: str) -> tuple[int, int] | None:
    try:
        status = os.stat(archive)
    except OSError:
        return None
    return status.st_mtime_ns, status.st_size


def _invalidate_on_change(importer: Any) -> None:
    """Replaces ``importer``'s ``invalidate_caches`` (once) by one that re-reads the archive's
    directory only when its modification time or size changed since the last reading."""
    if getattr(importer, "_pgbridge_settled", False):
        return
    reread = importer.invalidate_caches
    stamp = _archive_stamp(importer.archive)

    def invalidate_caches() -> None:
        nonlocal stamp
        now = _archive_stamp(importer.archive)
        if now is None or now != stamp:
            stamp = now
            reread()

    importer.invalidate_caches = invalidate_caches
    importer._pgbridge_settled = True
