"""A database session's client process, when it runs on this host: judged from the snapshot.

TCP: the session's client address and port are the client socket's local end, on a connection
to the server's port when the server says which it listens on (Linux lets connections to
different destinations leave from one local port: another program's connection from the same
end is not the session's, and with two candidates left none is named); unix socket:
the client's end is the peer of one of the backend's own sockets, when the backend is a
process here (its start time matches backend_start). The run's capture reads these sockets
and their owners (procfs/sockets.py), only for the sessions that hold or wait for a watched
lock, once the server has answered (`client_question` says what to read); nothing here
reads the host. /proc/net/tcp shows this network namespace only: a client in a container is
"not found here".
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from datetime import timedelta

from lockwarden.check.identify import holder_from_process
from lockwarden.check.observation import Backend, Client
from lockwarden.model import Process
from lockwarden.procfs.snapshot import Snapshot
from lockwarden.procfs.sockets import Endpoint, SessionEnds

# A backend's process starts when the server forks it for the connection: its start time and
# backend_start agree to a few milliseconds; a different process at that PID is off by far more.
BACKEND_START_MARGIN = timedelta(seconds=2)


def client_question(backends: Iterable[Backend]) -> SessionEnds:
    """Where these sessions' clients may be found here, for the capture to read."""
    endpoints: set[Endpoint] = set()
    unix: set[int] = set()
    for backend in backends:
        end = _endpoint(backend)
        if isinstance(end, tuple):
            endpoints.add(end)
        elif backend.unix_socket:
            unix.add(backend.pid)
    return SessionEnds(frozenset(endpoints), frozenset(unix))


def _endpoint(backend: Backend) -> Endpoint | str | None:
    """The client's TCP end, why it is no address, or None for no TCP client at all."""
    if backend.client_addr is None or backend.client_port is None:
        return None
    try:
        return ipaddress.ip_address(backend.client_addr), backend.client_port
    except ValueError:
        return f"client address {backend.client_addr!r} is not an IP address"


def find_clients(backends: Iterable[Backend], snapshot: Snapshot, role: str) -> dict[int, Client]:
    """Each backend's client on this host, by backend PID; `role` labels the holder. The
    snapshot's capture was asked `client_question(backends)`."""
    wanted = list({backend.pid: backend for backend in backends}.values())
    inodes: dict[int, int] = {}
    reasons: dict[int, str] = {}
    for backend in wanted:
        found = _client_socket(backend, snapshot)
        if isinstance(found, int):
            inodes[backend.pid] = found
        else:
            reasons[backend.pid] = found
    owners = snapshot.sockets().owners if inodes else {}
    clients = {pid: Client(None, why) for pid, why in reasons.items()}
    for pid, inode in inodes.items():
        clients[pid] = _client(snapshot, owners.get(inode, ()), inode, f"{role} {pid}")
    return clients


# Programs that carry other programs' connections: the socket a session's client port leads to
# is theirs, and the client is behind them (another host, a container, a local program). Named
# the holder, a pooler or a tunnel would be told `kill`, ending every session it carries.
FORWARDERS = frozenset(
    {
        "socat", "ssh", "sshd", "stunnel", "stunnel4", "haproxy", "nginx", "envoy",
        "pgbouncer", "pgpool", "odyssey", "pgcat", "pgagroal", "proxysql", "mysqlrouter",
        "maxscale", "kubectl", "cloud-sql-proxy", "cloud_sql_proxy", "ncat", "nc",
    }
)  # fmt: skip


def _client(snapshot: Snapshot, pids: Iterable[int], inode: int, role: str) -> Client:
    processes = [process for process in map(snapshot.process, pids) if process is not None]
    if not processes:
        hidden = hidden_note(snapshot)
        why = f"socket {inode} is on this host but no process that has it could be read"
        return Client(None, f"{why}{hidden}")
    owner = _session_owner(snapshot, processes)
    if _program(owner) in FORWARDERS:
        return Client(
            None,
            f"its connection on this host is PID {owner.pid}'s ({_program(owner)}), a forwarder "
            "or pooler that carries it for a client behind it; stopping it would end every "
            "session it carries",
        )
    return Client(holder_from_process(owner, lock_kind=role))


def _program(process: Process) -> str:
    return process.cmdline[0].rsplit("/", 1)[-1] if process.cmdline else process.name


def _session_owner(snapshot: Snapshot, processes: list[Process]) -> Process:
    """Of the processes that have a session's socket open, the one to name: the ancestor of
    all the others when there is one (a migration tool whose children inherited its
    connection: stopping it and what runs below it ends them all), else the youngest (a
    pre-forked worker talking over its parent's connection)."""
    if len(processes) > 1:
        pids = {process.pid for process in processes}
        for process in sorted(processes, key=lambda each: each.start_ticks):
            if pids - {process.pid} <= set(snapshot.descendants(process.pid)):
                return process
    return max(processes, key=lambda each: each.start_ticks)


def hidden_note(snapshot: Snapshot) -> str:
    return " (run as root to read other users' descriptors)" if snapshot.euid != 0 else ""


def _client_socket(backend: Backend, snapshot: Snapshot) -> int | str:
    """The inode of the client's socket on this host, or why there is none."""
    if backend.prepared is not None:
        return "a prepared transaction has no session, so no client"
    end = _endpoint(backend)
    if isinstance(end, str):
        return end
    if end is not None:
        return _tcp_client_socket(backend, end, snapshot)
    if not backend.unix_socket:
        return backend.client_note or (
            "the session's client address is not visible (grant pg_read_all_stats)"
        )
    return _unix_client_socket(backend, snapshot)


def _tcp_client_socket(backend: Backend, end: Endpoint, snapshot: Snapshot) -> int | str:
    """The connection here that leaves from the session's client end to the server's port
    (any port when the server did not say), when it is the only one."""
    found = snapshot.sockets().tcp.get(end, ())
    if backend.server_port is not None:
        found = tuple(each for each in found if each.remote[1] == backend.server_port)
    client = f"client {backend.client_addr}:{backend.client_port}"
    if not found:
        to = f" to port {backend.server_port}" if backend.server_port is not None else ""
        return (
            f"{client} is not a connection of this host{to} (another host, container or "
            "network namespace)"
        )
    if len(found) > 1:
        remotes = ", ".join(
            sorted(f"{address}:{port}" for address, port in (each.remote for each in found))
        )
        return (
            f"{len(found)} connections of this host leave from {client} (to {remotes}): "
            "which one is the session's is not known"
        )
    return found[0].inode


def _unix_client_socket(backend: Backend, snapshot: Snapshot) -> int | str:
    process = snapshot.process(backend.pid)
    same = (
        process is not None
        and backend.backend_start is not None
        and abs(process.started_at - backend.backend_start) <= BACKEND_START_MARGIN
    )
    if not same:
        return (
            f"the client uses the server's unix socket, but backend {backend.pid} is not a "
            "process of this host (the server runs in a container or another PID namespace)"
        )
    sockets = snapshot.sockets()
    owned = sockets.backend_sockets.get(backend.pid, ())
    peers = {sockets.unix_peers[inode] for inode in owned if inode in sockets.unix_peers}
    if len(peers) == 1:
        return peers.pop()
    if peers:  # which one its session came in on, nothing here tells
        return f"backend {backend.pid} has {len(peers)} unix connections its server accepted"
    hidden = hidden_note(snapshot)
    return f"backend {backend.pid}'s unix socket and its peer could not be read{hidden}"
