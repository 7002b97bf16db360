"""Where the stack keeps downloads (a cache shared by every clone) and run state (per clone)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def cache_dir() -> Path:
    """Downloaded artifacts, reused across clones and runs.

    ``PGBRIDGE_CACHE`` overrides. As root the default is under /var/cache so that the non-root
    user PostgreSQL runs as can read the server binaries (root's home is not traversable).
    """
    override = os.environ.get("PGBRIDGE_CACHE")
    if override:
        path = Path(override)
    elif os.geteuid() == 0:
        path = Path("/var/cache/pgbridge")
    else:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        path = Path(base) / "pgbridge"
    path.mkdir(parents=True, exist_ok=True)
    return path


def stack_dir() -> Path:
    """Data directories, logs and the state file of the running stack.

    ``PGBRIDGE_STACK_DIR`` overrides; the default is ``.stack`` in the working directory. As root,
    when that directory is not reachable by the unprivileged account PostgreSQL runs as (a clone
    under /root, say), a per-clone directory under /var/tmp is used instead.
    """
    override = os.environ.get("PGBRIDGE_STACK_DIR")
    path = Path(override or Path.cwd() / ".stack").resolve()
    if not override and os.geteuid() == 0 and not _world_traversable(path.parent):
        digest = hashlib.sha256(str(path).encode()).hexdigest()[:10]
        path = Path("/var/tmp/pgbridge-stack") / digest
    path.mkdir(parents=True, exist_ok=True)
    return path


def _world_traversable(directory: Path) -> bool:
    return all(p.stat().st_mode & 0o001 for p in [directory, *directory.parents])
