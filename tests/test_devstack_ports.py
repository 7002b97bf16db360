"""The local stack's services: ports picked where no client connection takes them, a part that
dies at start-up reported with its log's last lines, and a start that lost its port to another
process retried once on new ports (a service that binds with a plain Python socket stands in
for the JVM: what is tested is the Service lifecycle, not a service)."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from bridge.devstack import process
from bridge.devstack.process import free_port, port_open, wait_until
from bridge.devstack.service import Service
from bridge.errors import StackError

_SERVE = """
import socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 0)
try:
    s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError as exc:
    print("java.net.BindException:", exc, flush=True)
    sys.exit(1)
s.listen()
print("listening", flush=True)
time.sleep(60)
"""


class _Listener(Service):
    part = "listener"
    start_timeout = 20.0
    repick_taken_ports = True

    def install(self) -> None:
        pass

    def command(self) -> list[str]:
        return [sys.executable, "-c", _SERVE, str(self.port("port"))]

    def ready(self) -> bool:
        return port_open(self.port("port"))


def test_ports_are_picked_below_the_ephemeral_range() -> None:
    floor = process._ephemeral_floor()
    ports = {free_port() for _ in range(20)}
    assert all(process._SERVICE_PORTS_FLOOR <= p < floor for p in ports), ports
    assert len(ports) > 1  # picked at random, not one fixed port


def test_a_port_is_never_handed_out_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    """A service's ports are picked before it binds any: two picks of a port free at the
    time gave a Kafka broker one port for two listeners, and it refused to start."""
    monkeypatch.setattr(process, "_handed_out", set())
    same = process._SERVICE_PORTS_FLOOR + 17
    picks = iter([same, same, same + 1])
    monkeypatch.setattr(process.random, "randrange", lambda *_: next(picks))
    assert [free_port(), free_port()] == [same, same + 1]


def test_a_part_that_dies_at_start_up_is_reported_with_its_log(tmp_path: Path) -> None:
    log = tmp_path / "part.log"
    log.write_text("".join(f"line {i}\n" for i in range(100)) + "FATAL: cannot open storage\n")
    with pytest.raises(StackError) as raised:
        wait_until("part", lambda: False, 5, log, alive=lambda: False)
    message = str(raised.value)
    assert "part: exited during start-up" in message and "FATAL: cannot open storage" in message
    assert "line 99" in message and "line 10\n" not in message  # the tail, not the whole log
    assert str(log) in message


def test_a_start_that_lost_its_port_is_retried_once_on_new_ports(tmp_path: Path) -> None:
    service = _Listener(tmp_path / "listener")
    taken = socket.socket()  # bound, not listening: a client's outgoing connection's port
    taken.bind(("127.0.0.1", 0))
    try:
        service._state["port"] = taken.getsockname()[1]  # as if taken right after the pick
        service._picked.add("port")
        service.start()
        try:
            assert service.port("port") != taken.getsockname()[1]
            assert service.is_running()
        finally:
            service.stop()
    finally:
        taken.close()


def test_ports_kept_from_a_last_run_are_not_changed_behind_the_clients(tmp_path: Path) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    try:
        first = _Listener(tmp_path / "listener")
        first._state["port"] = taken.getsockname()[1]
        first._save()
        again = _Listener(tmp_path / "listener")  # a later `pgbridge dev up`: ports from its file
        with pytest.raises(StackError, match="BindException"):
            again.start()
        assert again.port("port") == taken.getsockname()[1]
    finally:
        taken.close()
