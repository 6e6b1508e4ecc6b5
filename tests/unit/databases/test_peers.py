"""databases/peers.py with real sockets: a database session's client process found on this
host by its TCP endpoint (/proc/net/tcp) or, over a unix socket, by the backend's socket and
its peer (the kernel's sock_diag), exactly as for a real server's session; a client that
passed its connection to a child named as the ancestor; and each reason a client is not here.
The server's end is this test's own socket (TCP) or a child's (unix); no database runs (the
real servers are tests/formats', with the whole check)."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from conftest import Children
from lockwarden.databases.observe import Backend
from lockwarden.databases.peers import find_clients
from lockwarden.procfs.reader import HostReader, wall_clock

ROLE = "PostgreSQL backend"

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
        found = find_clients([backend], HostReader(wall_clock), ROLE)
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
        holder = find_clients([backend], HostReader(wall_clock), ROLE)[6639].holder
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
    found = find_clients([backend], HostReader(wall_clock), ROLE)[backend_process.pid]
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
    found = find_clients([backend], HostReader(wall_clock), ROLE)[backend_process.pid]
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
    found = find_clients([backend], HostReader(wall_clock), ROLE)[7]
    assert (found.holder, found.why_not) == (None, why)
