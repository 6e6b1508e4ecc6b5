"""databases/peers.py: a database session's client process found on this host, judged from
the snapshot alone. Tables over a made snapshot (a fact the capture was not asked for is an
error, not a read), and real sockets captured as a run captures them: a client by its TCP
endpoint or, over a unix socket, as the backend's peer (the kernel's sock_diag); a client that
passed its connection to a child named as the ancestor; and each reason a client is not here.
The server's end is this test's own socket (TCP) or a child's (unix); no database runs (the
real servers are tests/formats', with the whole check)."""

from __future__ import annotations

import ipaddress
import socket
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from conftest import Children
from factories import NOW, make_process, make_snapshot
from lockwarden.check.observation import Backend
from lockwarden.databases.peers import Client, client_question, find_clients
from lockwarden.procfs.reader import HostReader, Request, wall_clock
from lockwarden.procfs.snapshot import NotCaptured
from lockwarden.procfs.sockets import ClientQuestion, ClientSockets, SessionEnds, TcpConnection

ROLE = "PostgreSQL backend"

TCP = Backend(pid=9911, client_addr="127.0.0.1", client_port=40112, backend_start=NOW)
UNIX = Backend(pid=9912, client_port=-1, backend_start=NOW)
SERVER_END = (ipaddress.ip_address("127.0.0.1"), 5432)
TCP_END = (ipaddress.ip_address("127.0.0.1"), 40112)


def test_the_question_names_each_sessions_client_end() -> None:
    odd = Backend(pid=9913, client_addr="db.example", client_port=1)  # not an address
    assert client_question([TCP, UNIX, odd]) == SessionEnds(
        frozenset({(ipaddress.ip_address("127.0.0.1"), 40112)}), frozenset({9912})
    )


def test_a_tcp_client_is_named_from_the_captured_socket_and_its_owner() -> None:
    psql = make_process(pid=4242, name="psql", cmdline=("psql", "-h", "127.0.0.1"))
    sockets = ClientSockets(
        tcp={(ipaddress.ip_address("127.0.0.1"), 40112): (TcpConnection(777, SERVER_END),)},
        backend_sockets={},
        unix_peers={},
        owners={777: (4242,)},
    )
    snapshot = make_snapshot(client_sockets=sockets, processes={4242: psql})
    [(pid, client)] = find_clients([TCP], snapshot, "client").items()
    assert (pid, client.holder and client.holder.pid) == (9911, 4242)
    assert client.holder is not None and client.holder.cmdline == psql.cmdline


OTHER_SERVICE = (ipaddress.ip_address("127.0.0.1"), 6379)
SAME_PORT_ELSEWHERE = (ipaddress.ip_address("192.0.2.8"), 5432)


@pytest.mark.parametrize(
    ("server_port", "connections", "named", "why"),
    [
        (5432, [(777, SERVER_END), (778, OTHER_SERVICE)], 4242, None),
        (5432, [(778, OTHER_SERVICE), (777, SERVER_END)], 4242, None),
        (5432, [(778, OTHER_SERVICE)], None, "is not a connection of this host to port 5432"),
        (
            5432,
            [(777, SERVER_END), (778, SAME_PORT_ELSEWHERE)],
            None,
            "2 connections of this host leave from client 127.0.0.1:40112 (to 127.0.0.1:5432, "
            "192.0.2.8:5432): which one is the session's is not known",
        ),
        (None, [(777, SERVER_END)], 4242, None),
        (None, [(777, SERVER_END), (778, OTHER_SERVICE)], None, "which one is the session's"),
    ],
)
def test_a_client_end_other_connections_share_names_only_the_one_to_the_server(
    server_port: int | None,
    connections: list[tuple[int, tuple[ipaddress.IPv4Address, int]]],
    named: int | None,
    why: str | None,
) -> None:
    """Linux lets connections to different destinations leave from one local port: another
    program's connection from the session's client end is not the session's."""
    session = Backend(pid=9911, client_addr="127.0.0.1", client_port=40112, server_port=server_port)
    psql = make_process(pid=4242, name="psql", cmdline=("psql", "-h", "127.0.0.1"))
    other = make_process(pid=5151, name="redis-cli", cmdline=("redis-cli",))
    sockets = ClientSockets(
        tcp={TCP_END: tuple(TcpConnection(inode, remote) for inode, remote in connections)},
        backend_sockets={},
        unix_peers={},
        owners={777: (4242,), 778: (5151,)},
    )
    snapshot = make_snapshot(client_sockets=sockets, processes={4242: psql, 5151: other})
    [client] = find_clients([session], snapshot, "client").values()
    assert (client.holder.pid if client.holder else None) == named
    if why is None:
        assert client.why_not is None
    else:
        assert why in (client.why_not or "")


def test_a_backend_that_is_not_the_servers_process_here_names_no_client() -> None:
    other = make_process(pid=9912, started_at=NOW - timedelta(hours=1))  # not its session
    sockets = ClientSockets(tcp={}, backend_sockets={9912: (5,)}, unix_peers={5: 6}, owners={})
    snapshot = make_snapshot(client_sockets=sockets, processes={9912: other})
    [client] = find_clients([UNIX], snapshot, "client").values()
    assert client.holder is None and "not a process of this host" in (client.why_not or "")


def test_a_client_the_capture_was_not_asked_about_is_an_error_not_a_late_read() -> None:
    with pytest.raises(NotCaptured):
        find_clients([TCP], make_snapshot(), "client")


def captured_clients(backends: list[Backend]) -> dict[int, Client]:
    """What a run asks of the host for these sessions, captured, then their clients."""
    question = ClientQuestion(client_question(backends))
    snapshot = HostReader(wall_clock).capture(Request(read_locks=False, clients=question))
    return find_clients(backends, snapshot, ROLE)


TCP_CLIENT = """
import socket, sys, time
client = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
print(client.getsockname()[1], flush=True)
time.sleep(120)
"""

TCP_CLIENT_WITH_WORKER = """
import socket, subprocess, sys, time
client = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
worker = subprocess.Popen(
    [sys.executable, "-c", "import time; time.sleep(120)"], pass_fds=[client.fileno()]
)
print(client.getsockname()[1], worker.pid, flush=True)
time.sleep(120)
"""

UNIX_BACKEND = """
import socket, sys, time
server = socket.socket(socket.AF_UNIX)
server.bind(sys.argv[1])
server.listen(1)
print("ready", flush=True)
connection, _ = server.accept()
time.sleep(120)
"""

UNIX_CLIENT = """
import socket, sys, time
client = socket.socket(socket.AF_UNIX)
client.connect(sys.argv[1])
print("ready", flush=True)
time.sleep(120)
"""


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    server = socket.create_server(("127.0.0.1", 0))
    try:
        yield server
    finally:
        server.close()


def connected(
    children: Children, listener: socket.socket, program: str
) -> tuple[subprocess.Popen[str], socket.socket, list[str]]:
    """A real client connected to `listener`: the process, the server's end, what it printed."""
    port = str(listener.getsockname()[1])
    client = children.start([sys.executable, "-c", program, port])
    assert client.stdout is not None
    words = client.stdout.readline().split()
    accepted, _ = listener.accept()
    return client, accepted, words


def test_a_tcp_sessions_client_is_the_process_with_that_local_endpoint(
    children: Children, listener: socket.socket
) -> None:
    client, accepted, [port] = connected(children, listener, TCP_CLIENT)
    with accepted:
        backend = Backend(pid=6639, client_addr="127.0.0.1", client_port=int(port))
        found = captured_clients([backend])
    holder = found[6639].holder
    assert holder is not None
    assert (holder.pid, holder.lock_kind) == (client.pid, f"{ROLE} 6639")
    assert found[6639].why_not is None


def test_a_connection_passed_to_a_child_names_the_parent_that_opened_it(
    children: Children, listener: socket.socket
) -> None:
    client, accepted, [port, worker] = connected(children, listener, TCP_CLIENT_WITH_WORKER)
    children.track(int(worker))
    with accepted:
        backend = Backend(pid=6639, client_addr="127.0.0.1", client_port=int(port))
        holder = captured_clients([backend])[6639].holder
    assert holder is not None and holder.pid == client.pid


def test_a_unix_socket_sessions_client_is_the_backends_peer(
    tmp_path: Path, children: Children
) -> None:
    path = str(tmp_path / ".s.PGSQL.5432")
    backend_process = children.python(UNIX_BACKEND, path)
    client = children.python(UNIX_CLIENT, path)
    host = HostReader(wall_clock)
    seen = host.process(backend_process.pid)
    assert seen is not None
    backend = Backend(pid=backend_process.pid, client_port=-1, backend_start=seen.started_at)
    found = captured_clients([backend])[backend_process.pid]
    assert found.holder is not None and found.holder.pid == client.pid


def test_a_unix_backend_that_is_not_the_process_at_its_pid_is_not_looked_into(
    tmp_path: Path, children: Children
) -> None:
    path = str(tmp_path / ".s.PGSQL.5432")
    backend_process = children.python(UNIX_BACKEND, path)
    children.python(UNIX_CLIENT, path)
    seen = HostReader(wall_clock).process(backend_process.pid)
    assert seen is not None
    long_before = seen.started_at - timedelta(hours=1)  # another process had this PID then
    backend = Backend(pid=backend_process.pid, client_port=-1, backend_start=long_before)
    found = captured_clients([backend])[backend_process.pid]
    assert found.holder is None
    assert found.why_not == (
        f"the client uses the server's unix socket, but backend {backend_process.pid} is not a "
        "process of this host (the server runs in a container or another PID namespace)"
    )


@pytest.mark.parametrize(
    ("backend", "why"),
    [
        (
            Backend(pid=7, client_addr="203.0.113.9", client_port=40112),
            "client 203.0.113.9:40112 is not a connection of this host (another host, "
            "container or network namespace)",
        ),
        (
            Backend(pid=7, client_addr="db.example.org", client_port=40112),
            "client address 'db.example.org' is not an IP address",
        ),
        (Backend(pid=7), "the session's client address is not visible (grant pg_read_all_stats)"),
        (Backend(pid=7, client_note="MySQL shows no port"), "MySQL shows no port"),
    ],
)
def test_each_reason_a_client_is_not_here(backend: Backend, why: str) -> None:
    found = captured_clients([backend])[7]
    assert (found.holder, found.why_not) == (None, why)
