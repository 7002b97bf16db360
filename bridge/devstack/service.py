"""A long-running local service started as a detached process: ports kept across restarts,
a pid file, a log file, a readiness check and a clean stop. Kafka and the registry are these."""

from __future__ import annotations

import json
import logging
import os
import subprocess
from abc import ABC, abstractmethod
from pathlib import Path

from bridge.devstack.process import free_port, pid_alive, spawn, stop_pid, wait_until
from bridge.errors import StackError

logger = logging.getLogger(__name__)


class Service(ABC):
    #: The part's name in messages, file names and ``pgbridge dev status``.
    part: str = "service"
    start_timeout: float = 120.0
    #: Whether a start that failed on a taken port is retried once on new ports: for a service
    #: whose ports no other part has been given before it answers (not a Kafka quorum's node).
    repick_taken_ports: bool = False

    def __init__(self, base_dir: Path) -> None:
        self.base_dir = base_dir.resolve()
        self.log_path = self.base_dir / f"{self.part}.log"
        self._state_path = self.base_dir / f"{self.part}.json"
        self._state: dict[str, int] = (
            json.loads(self._state_path.read_text()) if self._state_path.exists() else {}
        )
        self._picked: set[str] = set()  # ports chosen by this object, not kept from a last run

    # -- to implement -------------------------------------------------------------------------

    @abstractmethod
    def install(self) -> None:
        """Make sure the service's artifacts are in the cache (downloading them by name)."""

    @abstractmethod
    def command(self) -> list[str]:
        """The command line that runs the service in the foreground."""

    @abstractmethod
    def ready(self) -> bool:
        """True once the service answers its clients."""

    def prepare(self) -> None:  # noqa: B027 - optional hook, most services need none
        """Set-up of the data directory before each start (config files, formatting)."""

    def environment(self) -> dict[str, str]:
        return dict(os.environ)

    # -- lifecycle ----------------------------------------------------------------------------

    def port(self, name: str) -> int:
        """A port for ``name``, chosen once and kept so clients' settings stay valid."""
        if name not in self._state:
            self._state[name] = free_port()
            self._picked.add(name)
            self._save()
        return self._state[name]

    @property
    def pid(self) -> int | None:
        return self._state.get("pid")

    def is_running(self) -> bool:
        return pid_alive(self.pid) and self.ready()

    def start(self) -> None:
        self.launch()
        self.wait_ready()

    def launch(self) -> None:
        """Start the process without waiting for it to answer (so parts can start together)."""
        if self.is_running():
            return
        if pid_alive(self.pid):  # alive but not answering: restart it rather than guess
            stop_pid(self.pid)
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.install()
        self.prepare()
        self._state["pid"] = spawn(self.command(), self.log_path, self.base_dir, self.environment())
        self._save()

    def wait_ready(self) -> None:
        try:
            self._wait_ready()
        except StackError as exc:
            if not (self.repick_taken_ports and self._picked and _port_taken(str(exc))):
                raise
            # Another process bound a port between our pick and the service's bind: new ports
            # (no client has been given these yet), once.
            logger.warning("%s: a port was taken before it could bind it; new ports", self.part)
            self.stop()
            for name in self._picked:
                self._state.pop(name, None)
            self._picked.clear()
            self.launch()
            self._wait_ready()

    def _wait_ready(self) -> None:
        pid = self.pid
        wait_until(self.part, self.ready, self.start_timeout, self.log_path, lambda: pid_alive(pid))
        logger.info("%s ready (pid %s)", self.part, pid)

    def stop(self) -> None:
        stop_pid(self.pid)
        self._state.pop("pid", None)
        self._save()

    def _save(self) -> None:
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self._state_path.write_text(json.dumps(self._state))


def _port_taken(message: str) -> bool:
    return any(s in message for s in ("already in use", "already bound", "BindException"))


def java_major(java: str) -> int:
    """The feature version of a ``java`` executable (17, 21, 25, …)."""
    out = subprocess.run([java, "-version"], capture_output=True, text=True, check=False).stderr
    for token in out.replace('"', " ").split():
        head = token.split(".")[0]
        if head.isdigit() and "." in token:
            return int(head) if head != "1" else int(token.split(".")[1])
    raise StackError("java", f"cannot read the version of {java}: {out.strip()[:200]}")


def find_java(min_major: int, part: str) -> str:
    """A ``java`` of at least ``min_major``: $PGBRIDGE_JAVA_HOME, $JAVA_HOME, PATH, /usr/lib/jvm."""
    candidates: list[str] = []
    for var in ("PGBRIDGE_JAVA_HOME", "JAVA_HOME"):
        if os.environ.get(var):
            candidates.append(os.path.join(os.environ[var], "bin", "java"))
    candidates.append("java")
    jvm = Path("/usr/lib/jvm")
    if jvm.is_dir():
        candidates += [str(p / "bin" / "java") for p in sorted(jvm.iterdir(), reverse=True)]
    seen: list[str] = []
    for java in candidates:
        try:
            major = java_major(java)
        except (OSError, StackError):
            continue
        seen.append(f"{java} ({major})")
        if major >= min_major:
            return java
    raise StackError(
        part,
        f"needs Java {min_major} or newer; found {', '.join(seen) or 'none'}. "
        f"Install one and set PGBRIDGE_JAVA_HOME to it.",
    )
