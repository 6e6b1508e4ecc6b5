"""A database session's client process, when it runs on this host.

TCP: the session's client address and port are the client socket's local end, so the socket is
the line of /proc/net/tcp (or tcp6) whose local address is that pair, and its inode names the
process holding it in /proc/PID/fd. A unix socket has no address: the backend's own socket is
found in its fd table (the backend is a process here when the server runs here, and its start
time matches backend_start), and the kernel's unix diagnostics (NETLINK_SOCK_DIAG, as `ss -x`
reads them) give that socket's peer, the client's end.

Everything is read once per check, only for sessions that hold or wait for a watched lock,
through the run's HostReader after the server answered (check.py says why).
/proc/net/tcp shows this network namespace only: a client in a container is "not found here".
"""

from __future__ import annotations

import ipaddress
import os
import socket
import struct as binary
from collections.abc import Iterable
from datetime import timedelta

from lockwarden.check.identify import holder_from_process
from lockwarden.databases.observe import Backend, Client
from lockwarden.model import Process
from lockwarden.procfs.reader import HostReader

ESTABLISHED = "01"
# A backend's process starts when the server forks it for the connection: its start time and
# backend_start agree to a few milliseconds; a different process at that PID is off by far more.
BACKEND_START_MARGIN = timedelta(seconds=2)
SOCK_DIAG_BY_FAMILY = 20
NETLINK_SOCK_DIAG = 4
NLM_F_REQUEST_DUMP = 0x1 | 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
UDIAG_SHOW_PEER, UNIX_DIAG_PEER = 0x4, 2
Endpoint = tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]


def find_clients(backends: Iterable[Backend], host: HostReader, role: str) -> dict[int, Client]:
    """Each backend's client on this host, by backend PID; `role` labels the holder."""
    wanted = list({backend.pid: backend for backend in backends}.values())
    inodes: dict[int, int] = {}
    reasons: dict[int, str] = {}
    tcp = _tcp_sockets(host.proc) if any(b.client_addr for b in wanted) else {}
    peers = _unix_peers() if any(b.unix_socket for b in wanted) else {}
    for backend in wanted:
        found = _client_socket(backend, host, tcp, peers)
        if isinstance(found, int):
            inodes[backend.pid] = found
        else:
            reasons[backend.pid] = found
    owners = _socket_owners(host, set(inodes.values())) if inodes else {}
    clients = {pid: Client(None, why) for pid, why in reasons.items()}
    for pid, inode in inodes.items():
        clients[pid] = _client(host, owners.get(inode, []), inode, f"{role} {pid}")
    return clients


def _client(host: HostReader, pids: list[int], inode: int, role: str) -> Client:
    processes = [process for process in map(host.process, pids) if process is not None]
    if not processes:
        hidden = hidden_note(host)
        why = f"socket {inode} is on this host but no process that has it could be read"
        return Client(None, f"{why}{hidden}")
    return Client(holder_from_process(_session_owner(host, processes), lock_kind=role))


def _session_owner(host: HostReader, processes: list[Process]) -> Process:
    """Of the processes that have a session's socket open, the one to name: the ancestor of
    all the others when there is one (a migration tool whose children inherited its
    connection: stopping it and what runs below it ends them all), else the youngest (a
    pre-forked worker talking over its parent's connection)."""
    if len(processes) > 1:
        pids = {process.pid for process in processes}
        for process in sorted(processes, key=lambda each: each.start_ticks):
            if pids - {process.pid} <= set(host.descendants(process.pid)):
                return process
    return max(processes, key=lambda each: each.start_ticks)


def hidden_note(host: HostReader) -> str:
    return " (run as root to read other users' descriptors)" if os.geteuid() != 0 else ""


def _client_socket(
    backend: Backend, host: HostReader, tcp: dict[Endpoint, int], peers: dict[int, int]
) -> int | str:
    """The inode of the client's socket on this host, or why there is none."""
    if backend.client_addr is not None and backend.client_port is not None:
        try:
            address = ipaddress.ip_address(backend.client_addr)
        except ValueError:
            return f"client address {backend.client_addr!r} is not an IP address"
        found = tcp.get((address, backend.client_port))
        if found is None:
            return (
                f"client {backend.client_addr}:{backend.client_port} is not a connection of "
                "this host (another host, container or network namespace)"
            )
        return found
    if not backend.unix_socket:
        return backend.client_note or (
            "the session's client address is not visible (grant pg_read_all_stats)"
        )
    return _unix_client_socket(backend, host, peers)


def _unix_client_socket(backend: Backend, host: HostReader, peers: dict[int, int]) -> int | str:
    process = host.process(backend.pid)
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
    for inode in _socket_inodes(host.proc, backend.pid):
        peer = peers.get(inode)
        if peer:
            return peer
    hidden = hidden_note(host)
    return f"backend {backend.pid}'s unix socket and its peer could not be read{hidden}"


def _socket_inodes(proc: str, pid: int) -> list[int]:
    directory = f"{proc}/{pid}/fd"
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    inodes = []
    for name in names:
        try:
            target = os.readlink(f"{directory}/{name}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.append(int(target[8:-1]))
    return inodes


def _socket_owners(host: HostReader, inodes: set[int]) -> dict[int, list[int]]:
    """Which processes have these sockets open: one walk of every fd table."""
    links = {f"socket:[{inode}]": inode for inode in inodes}
    owners: dict[int, list[int]] = {}
    for entry in host.pid_entries():
        directory = f"{host.proc}/{entry}/fd"
        try:
            names = os.listdir(directory)
        except OSError:
            continue
        for name in names:
            try:
                target = os.readlink(f"{directory}/{name}")
            except OSError:
                continue
            if target in links:
                owners.setdefault(links[target], []).append(int(entry))
    return owners


def _tcp_sockets(proc: str) -> dict[Endpoint, int]:
    """Established TCP sockets of this network namespace: local endpoint -> inode."""
    sockets: dict[Endpoint, int] = {}
    for name in ("tcp", "tcp6"):
        try:
            with open(f"{proc}/net/{name}", encoding="ascii") as handle:
                lines = handle.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != ESTABLISHED:
                continue
            sockets[parse_endpoint(fields[1])] = int(fields[9])
    return sockets


def parse_endpoint(text: str) -> Endpoint:
    """`0100007F:1F90` (IPv4) or 32 hex digits and a port (IPv6): each 32-bit word in the
    kernel's byte order, which /proc prints as is. An IPv4-mapped IPv6 address is its IPv4."""
    address_hex, port_hex = text.split(":")
    raw = bytes.fromhex(address_hex)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    address: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.ip_address(words)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address, int(port_hex, 16)


def _unix_peers() -> dict[int, int]:
    """Every unix socket's peer, from the kernel's sock_diag (what `ss -x` shows)."""
    request = binary.pack(
        "=BBHIIIII", socket.AF_UNIX, 0, 0, 0xFFFFFFFF, 0, UDIAG_SHOW_PEER, 0xFFFFFFFF, 0xFFFFFFFF
    )
    header = binary.pack("=IHHII", 16 + len(request), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST_DUMP, 1, 0)
    peers: dict[int, int] = {}
    try:
        with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG) as netlink:
            netlink.settimeout(2.0)
            netlink.sendto(header + request, (0, 0))
            while _read_peers(netlink.recv(1 << 16), peers):
                pass
    except OSError:
        return peers
    return peers


def _read_peers(data: bytes, peers: dict[int, int]) -> bool:
    """Add one netlink datagram's sockets to `peers`; False once the dump is done."""
    offset = 0
    while offset + 16 <= len(data):
        length, kind = binary.unpack_from("=IH", data, offset)
        if kind in (NLMSG_DONE, NLMSG_ERROR) or length < 16:
            return False
        message = data[offset + 16 : offset + length]
        inode = binary.unpack_from("=I", message, 4)[0]
        position = 16
        while position + 4 <= len(message):
            attribute_length, attribute = binary.unpack_from("=HH", message, position)
            if attribute_length < 4:
                break
            if attribute == UNIX_DIAG_PEER and attribute_length >= 8:
                peers[inode] = binary.unpack_from("=I", message, position + 4)[0]
            position += (attribute_length + 3) & ~3
        offset += (length + 3) & ~3
    return True
