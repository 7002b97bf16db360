"""libpq's CopyData reads with the GIL released (``bridge/native/_pqread.c``), bound to the
libpq psycopg loaded: for the replication stream's reader thread
(:mod:`bridge.source.frame_reader`) and the snapshot's COPY (:mod:`bridge.snapshot.copy_out`).
"""

from __future__ import annotations

import functools
import logging
from types import ModuleType

from bridge.native.switches import NATIVE, enabled

logger = logging.getLogger(__name__)


def _loaded_libpq() -> str | None:
    """The path of the libpq psycopg loaded (from this process's memory map)."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            paths = {line.split()[-1] for line in maps if "/libpq" in line and ".so" in line}
    except OSError:
        return None
    if not paths:
        return None
    # psycopg[binary] ships its own copy; prefer it when both are mapped.
    bundled = sorted(p for p in paths if "psycopg_binary" in p)
    return (bundled or sorted(paths))[0]


@functools.cache  # bound once per process
def copy_data_reader() -> ModuleType | None:
    """The bound ``bridge.native._pqread`` module (``read_frames``), or ``None``: not built,
    ``PGBRIDGE_NATIVE=0``, or no libpq found in this process (then psycopg's calls are used)."""
    if not enabled(NATIVE):
        return None
    try:
        import psycopg  # noqa: F401 - loads libpq before the memory map is read

        from bridge.native import _pqread
    except ImportError:  # not built (no C compiler at install time)
        return None
    path = _loaded_libpq()
    if path is None:
        logger.info("libpq not found in this process's memory map: psycopg reads CopyData")
        return None
    try:
        _pqread.bind_library(path)
    except OSError as exc:
        logger.info("psycopg reads CopyData: %s", exc)
        return None
    return _pqread
