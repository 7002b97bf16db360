"""A broker's disk full, without root: tests/integration/full_disk.c, preloaded into the broker.

The shim makes the broker's writes under its log directory fail with ENOSPC while a flag file
exists (:func:`fill` / :func:`free`), which is what Kafka sees of a full file system: no
tmpfs or loop device of a fixed size is needed (both need root or a user namespace here).
It is compiled from source by the test (``cc``, as the bridge's own C accelerator is); a
machine without a C compiler fails the test, it does not skip it.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from bridge.devstack.kafka import KafkaBroker

SOURCE = Path(__file__).with_name("full_disk.c")
FLAG = "disk-full"


def build_shim(workdir: Path) -> Path:
    """The shim, compiled into ``workdir``."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise RuntimeError("no C compiler (cc) to build the full-disk shim")
    library = workdir / "full_disk.so"
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-O2", "-o", str(library), str(SOURCE), "-ldl"],
        check=True,
        capture_output=True,
    )
    return library


def prepare(broker: KafkaBroker, shim: Path) -> None:
    """``broker`` starts with the shim, its disk not full."""
    broker.extra_environment.update(
        {
            "LD_PRELOAD": str(shim),
            "PGBRIDGE_FULL_DISK_DIR": str(broker.base_dir / "data"),
            "PGBRIDGE_FULL_DISK_FLAG": str(broker.base_dir / FLAG),
        }
    )


def fill(broker: KafkaBroker) -> None:
    """From now on every write to the broker's log directory fails: no space left."""
    (broker.base_dir / FLAG).touch()


def free(broker: KafkaBroker) -> None:
    """Space again."""
    (broker.base_dir / FLAG).unlink(missing_ok=True)
