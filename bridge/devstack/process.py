"""Small process helpers shared by the stack's parts: ports, readiness, pids, a non-root user."""

from __future__ import annotations

import contextlib
import os
import pwd
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from bridge.errors import StackError

#: The unprivileged account PostgreSQL runs as when the stack is started by root.
SERVICE_USER = "pgbridge"


def free_port() -> int:
    """A TCP port on loopback that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours still answers kill(0); reap it if it is ours.
    with contextlib.suppress(ChildProcessError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    return True


def wait_until(
    part: str,
    ready: Callable[[], bool],
    timeout: float,
    log_path: Path,
    alive: Callable[[], bool] | None = None,
) -> None:
    """Poll ``ready`` until it is true; fail naming the part and its log if it dies or times out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        if alive is not None and not alive():
            raise StackError(part, "exited during start-up", str(log_path))
        time.sleep(0.25)
    raise StackError(part, f"not ready after {timeout:.0f} s", str(log_path))


def stop_pid(pid: int | None, timeout: float = 30.0) -> None:
    """SIGTERM the process group, then SIGKILL it if it has not exited in time."""
    if not pid_alive(pid):
        return
    assert pid is not None
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def spawn(cmd: list[str], log_path: Path, cwd: Path, env: dict[str, str] | None = None) -> int:
    """Start a long-running service detached from our session, output appended to its log."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            cmd,
            cwd=cwd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # its own process group, so stop_pid can end its children
        )
    return proc.pid


def service_user() -> str | None:
    """The account to drop to when running as root (created if missing); None when not root."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(SERVICE_USER)
    except KeyError:
        subprocess.run(
            [
                "useradd",
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                SERVICE_USER,
            ],
            check=True,
            capture_output=True,
        )
    return SERVICE_USER


def chown_tree(path: Path, user: str | None) -> None:
    if user is None:
        return
    pw = pwd.getpwnam(user)
    for root, dirs, files in os.walk(path):
        os.chown(root, pw.pw_uid, pw.pw_gid)
        for name in dirs + files:
            os.chown(os.path.join(root, name), pw.pw_uid, pw.pw_gid, follow_symlinks=False)


def check_traversable(path: Path, user: str | None) -> None:
    """PostgreSQL, run as ``user``, must reach ``path``; say so clearly if a parent blocks it."""
    if user is None:
        return
    for parent in [*reversed(path.resolve().parents)]:
        mode = parent.stat().st_mode
        if not mode & 0o001:
            raise StackError(
                "postgres",
                f"{parent} is not traversable by the '{user}' account PostgreSQL runs as; "
                "set PGBRIDGE_STACK_DIR to a directory outside it "
                "(for example /tmp/pgbridge-stack)",
            )
