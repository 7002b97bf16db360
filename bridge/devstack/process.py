"""Small process helpers shared by the stack's parts: ports, readiness, pids, a non-root user."""

from __future__ import annotations

import contextlib
import os
import pwd
import random
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from bridge.errors import StackError

#: The unprivileged account PostgreSQL runs as when the stack is started by root.
SERVICE_USER = "pgbridge"


#: Where a service's port is picked: below the kernel's ephemeral range, which every outgoing
#: connection on the machine takes its local port from. A port picked from that range (bind to
#: port 0) can be taken by a client's connection in the seconds before the service binds it.
_SERVICE_PORTS_FLOOR = 20000
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def _ephemeral_floor() -> int:
    try:
        return int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


#: Ports this process handed out: a service's ports are picked before any of them is bound,
#: so a port free now may be picked twice (a broker got the same port for its client and its
#: controller listener, and Kafka refused to start).
_handed_out: set[int] = set()


def free_port() -> int:
    """A TCP port on loopback that is free right now and not handed out before by this
    process, outside the ephemeral range when the machine leaves room below it (else one the
    kernel picks)."""
    ceiling = _ephemeral_floor()
    if ceiling - _SERVICE_PORTS_FLOOR >= 1000:
        for _ in range(50):
            port = random.randrange(_SERVICE_PORTS_FLOOR, ceiling)
            if port not in _handed_out and _bindable(port):
                _handed_out.add(port)
                return port
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _handed_out:
            _handed_out.add(port)
            return port
    raise StackError("ports", "no free loopback port found that was not handed out already")


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
    """Poll ``ready`` until it is true; fail naming the part and its log, with the log's last
    lines (a test's teardown may remove the file), if it dies or times out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        if alive is not None and not alive():
            raise StackError(part, f"exited during start-up{log_tail(log_path)}", str(log_path))
        time.sleep(0.25)
    raise StackError(part, f"not ready after {timeout:.0f} s{log_tail(log_path)}", str(log_path))


def log_tail(log_path: Path, lines: int = 15, limit: int = 3000) -> str:
    """The last lines of a log, as a suffix for an error message ('' when there are none)."""
    try:
        with open(log_path, "rb") as log:
            log.seek(0, os.SEEK_END)
            log.seek(max(0, log.tell() - 64 * 1024))
            text = log.read().decode("utf-8", "replace")
    except OSError:
        return ""
    tail = "\n".join(text.rstrip().splitlines()[-lines:])[-limit:]
    return f"; its log ends:\n{tail}" if tail else ""


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
