"""Fault injection on the real stack without disturbing it: a TCP proxy in front of a real
service that a test can take down (connections refused, open ones cut) and bring back, and a
throwaway broker of a test's own killed and started again.

The service behind a proxy is the real one (the stack's registry, broker, PostgreSQL); only the
path to it fails, as a network partition or a restarting service would look to pgbridge.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from typing import Any


class TcpProxy:
    """Forwards ``127.0.0.1:<port>`` to ``target``; :meth:`down` refuses and cuts connections
    until :meth:`up`. The port stays the same across down/up."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()
        self._listener: socket.socket | None = None
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self.up()

    def up(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def down(self) -> None:
        """Refuse new connections and cut the open ones."""
        listener, self._listener = self._listener, None
        if listener is not None:
            with suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        with self._lock:
            conns, self._conns = self._conns, set()
        for conn in conns:
            with suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    close = down

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed by down()
            try:
                server = socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            with self._lock:
                self._conns |= {client, server}
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                with suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)


def sigkill_broker(broker: Any) -> None:
    """SIGKILL a broker (bridge.devstack.kafka.KafkaBroker) and reap it: a zombie would look
    alive to its next start."""
    pid = broker.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


def broker_outage(broker: Any, seconds: float, check: Callable[[], None]) -> None:
    """The broker SIGKILLed for ``seconds`` and started again; ``check`` asserts, every half
    second of the outage, that what must ride through it still runs."""
    sigkill_broker(broker)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        check()
        time.sleep(0.5)
    broker.start()
