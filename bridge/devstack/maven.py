"""Fetch artifacts from Maven Central by coordinate with the ordinary client (``mvn``).

Nothing here names a repository host: Maven's own configuration decides where it downloads
from, so a user's mirror settings apply.
"""

from __future__ import annotations

import fcntl
import logging
import shutil
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from bridge.errors import StackError

logger = logging.getLogger(__name__)


def _mvn() -> str:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise StackError("maven", "the 'mvn' command is not on PATH; install Maven (Debian: maven)")
    return mvn


def _run(part: str, args: list[str], cwd: Path | None = None) -> None:
    logger.info("fetching %s with: mvn %s", part, " ".join(args))
    proc = subprocess.run(
        [_mvn(), "-B", "-q", *args], cwd=cwd, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-15:]
        raise StackError(part, "Maven could not fetch it:\n  " + "\n  ".join(tail))


def copy_artifact(part: str, coordinate: str, dest_dir: Path) -> Path:
    """Copy one artifact (``group:artifact:version[:type[:classifier]]``) into ``dest_dir``."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    _run(part, ["dependency:copy", f"-Dartifact={coordinate}", f"-DoutputDirectory={dest_dir}"])
    path = dest_dir / artifact_file_name(coordinate)
    if not path.exists():
        raise StackError(part, f"Maven reported success but {path} is missing")
    return path


@contextmanager
def install_lock(target: Path) -> Iterator[None]:
    """One process at a time installs ``target``: test workers start parts side by side, and
    two unpacking into one partial directory break each other. The others wait, then find it
    installed (callers check again inside)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.with_name(target.name + ".lock"), "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def install_artifact(
    part: str, coordinate: str, target: Path, unpack: Callable[[Path, Path], None]
) -> Path:
    """The archive ``coordinate`` unpacked into ``target`` by ``unpack(archive, directory)``:
    into a partial directory renamed when complete (an interrupted install is redone, never
    half used), the downloaded archive removed afterwards; one process at a time."""
    with install_lock(target):
        if target.exists():
            return target
        archive = copy_artifact(part, coordinate, target.parent / "downloads")
        partial = target.with_name(target.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        unpack(archive, partial)
        partial.rename(target)
        archive.unlink()
        return target


def artifact_file_name(coordinate: str) -> str:
    """``artifact-version[-classifier].type``, the name Maven gives the copied file."""
    parts = coordinate.split(":")
    artifact, version = parts[1], parts[2]
    kind = parts[3] if len(parts) > 3 else "jar"
    classifier = f"-{parts[4]}" if len(parts) > 4 else ""
    return f"{artifact}-{version}{classifier}.{kind}"


def copy_dependencies(part: str, pom: Path, dest_dir: Path) -> list[Path]:
    """Resolve a small POM's runtime classpath and copy every jar into ``dest_dir``."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    _run(
        part,
        [
            "-f",
            str(pom),
            "dependency:copy-dependencies",
            f"-DoutputDirectory={dest_dir}",
            "-DincludeScope=runtime",
        ],
    )
    jars = sorted(dest_dir.glob("*.jar"))
    if not jars:
        raise StackError(part, f"no jars were resolved from {pom}")
    return jars
