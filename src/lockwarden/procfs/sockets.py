"""Whose sockets: the processes here at the client end of a database server's sessions.

A capture reads these once a server has answered (the run asks its servers before capturing
the host), only for the sessions the answer names:

TCP: a session's client address and port are the client socket's local end, so the socket is
a line of /proc/net/tcp (or tcp6) whose local address is that pair, and its inode names the
process holding it in /proc/PID/fd. Linux gives connections to different destinations the same
local port, so there may be several such lines: each is kept with its remote end, for the
judging to tell the server's connection from the others (databases/peers.py). A unix socket
has no address: the backend's own sockets are found in its fd table (the backend is a process
here when the server runs here), and the kernel's unix diagnostics (NETLINK_SOCK_DIAG, as
`ss -x` reads them) give the peer, the client's end, of each one the server accepted: a stream
socket that carries the name of the listening socket it came from. A backend's other unix
connections (a dblink or postgres_fdw connection it made, a syslog socket it inherited) have no
name of their own, and their peers are no client of its session. /proc/net/tcp shows this
network namespace only.

Every read here is of /proc's own tables and links (never of a file through a mount, never of
a process's memory), so none can hang on a dead mount; a command line is read by the capture
under its deadline (reader.py).
"""

from __future__ import annotations

import os
import socket
import struct as binary
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:  # ipaddress loads only when a database lock's sessions are looked up
    import ipaddress

Endpoint = tuple["ipaddress.IPv4Address | ipaddress.IPv6Address", int]

ESTABLISHED = "01"
SOCK_DIAG_BY_FAMILY = 20
NETLINK_SOCK_DIAG = 4
NLM_F_REQUEST_DUMP = 0x1 | 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
UDIAG_SHOW_NAME, UDIAG_SHOW_PEER = 0x1, 0x4
UNIX_DIAG_NAME, UNIX_DIAG_PEER = 0, 2


class SessionEnds(NamedTuple):
    """Where some sessions' clients may be found here: the client ends of their TCP
    connections, and the backends (server processes, when the server runs here) whose
    unix-socket peers are their clients."""

    endpoints: frozenset[Endpoint] = frozenset()
    backends: frozenset[int] = frozenset()

    def __or__(self, other: SessionEnds) -> SessionEnds:
        return SessionEnds(self.endpoints | other.endpoints, self.backends | other.backends)

    def __bool__(self) -> bool:
        return bool(self.endpoints or self.backends)


class ClientQuestion(NamedTuple):
    """What database locks ask of the host once their servers have answered: the clients of
    the sessions that hold or wait (with the processes below them), the clients of the
    database's other sessions when a holder's client has processes below it (they may work
    under its lock), and command lines looked for (a regular expression each: Liquibase's,
    whose row no session holds)."""

    sessions: SessionEnds = SessionEnds()
    others: SessionEnds = SessionEnds()
    commands: frozenset[str] = frozenset()

    def __or__(self, other: ClientQuestion) -> ClientQuestion:
        return ClientQuestion(
            self.sessions | other.sessions,
            self.others | other.others,
            self.commands | other.commands,
        )


NO_CLIENTS = ClientQuestion()


class TcpConnection(NamedTuple):
    """An established TCP connection of this host, from an asked client end."""

    inode: int
    remote: Endpoint


class ClientSockets(NamedTuple):
    """What the host showed of the asked sessions' sockets."""

    tcp: Mapping[Endpoint, tuple[TcpConnection, ...]]
    """Each asked client end that is an established connection here: the connections that
    leave from it (one, unless several destinations share the local port)."""
    backend_sockets: Mapping[int, tuple[int, ...]]
    """Each asked backend's socket inodes (empty: not a process here, or unreadable)."""
    unix_peers: Mapping[int, int]
    """Socket inode -> its peer's inode, for the backends' sockets a server accepted."""
    owners: Mapping[int, tuple[int, ...]]
    """Socket inode -> the processes that have it open (the found client ends only)."""

    def __or__(self, other: ClientSockets) -> ClientSockets:
        return ClientSockets(
            {**self.tcp, **other.tcp},
            {**self.backend_sockets, **other.backend_sockets},
            {**self.unix_peers, **other.unix_peers},
            {**self.owners, **other.owners},
        )


def read_client_sockets(proc: str, ends: SessionEnds, entries: Iterable[str]) -> ClientSockets:
    """The sockets of these sessions' client ends, and their owners in one walk of every fd
    table."""
    tcp: dict[Endpoint, tuple[TcpConnection, ...]] = {}
    if ends.endpoints:
        every = tcp_sockets(proc)
        tcp = {end: tuple(every[end]) for end in ends.endpoints if end in every}
    backend_sockets = {pid: socket_inodes(proc, pid) for pid in sorted(ends.backends)}
    mine = {inode for inodes in backend_sockets.values() for inode in inodes}
    peers = accepted_unix_peers() if ends.backends else {}
    unix = {inode: peer for inode, peer in peers.items() if inode in mine and peer}
    wanted = {each.inode for found in tcp.values() for each in found} | set(unix.values())
    owners = socket_owners(proc, entries, wanted) if wanted else {}
    return ClientSockets(tcp, backend_sockets, unix, owners)


def socket_inodes(proc: str, pid: int) -> tuple[int, ...]:
    directory = f"{proc}/{pid}/fd"
    try:
        names = os.listdir(directory)
    except OSError:
        return ()
    inodes = []
    for name in names:
        try:
            target = os.readlink(f"{directory}/{name}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.append(int(target[8:-1]))
    return tuple(inodes)


def socket_owners(
    proc: str, entries: Iterable[str], inodes: set[int]
) -> dict[int, tuple[int, ...]]:
    """Which processes have these sockets open: one walk of every fd table."""
    links = {f"socket:[{inode}]": inode for inode in inodes}
    owners: dict[int, list[int]] = {}
    for entry in entries:
        directory = f"{proc}/{entry}/fd"
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
    return {inode: tuple(pids) for inode, pids in owners.items()}


def tcp_sockets(proc: str) -> dict[Endpoint, list[TcpConnection]]:
    """Established TCP sockets of this network namespace, by local endpoint."""
    sockets: dict[Endpoint, list[TcpConnection]] = {}
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
            connection = TcpConnection(int(fields[9]), parse_endpoint(fields[2]))
            sockets.setdefault(parse_endpoint(fields[1]), []).append(connection)
    return sockets


def parse_endpoint(text: str) -> Endpoint:
    """`0100007F:1F90` (IPv4) or 32 hex digits and a port (IPv6): each 32-bit word in the
    kernel's byte order, which /proc prints as is. An IPv4-mapped IPv6 address is its IPv4."""
    import ipaddress

    address_hex, port_hex = text.split(":")
    raw = bytes.fromhex(address_hex)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    address: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.ip_address(words)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address, int(port_hex, 16)


def accepted_unix_peers() -> dict[int, int]:
    """The peer of every unix connection a listening socket accepted (a stream socket with its
    listener's name), from the kernel's sock_diag (what `ss -x` shows)."""
    show = UDIAG_SHOW_NAME | UDIAG_SHOW_PEER
    request = binary.pack(
        "=BBHIIIII", socket.AF_UNIX, 0, 0, 0xFFFFFFFF, 0, show, 0xFFFFFFFF, 0xFFFFFFFF
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
        kind, inode = message[1], binary.unpack_from("=I", message, 4)[0]
        named, peer = _attributes(message)
        if kind == socket.SOCK_STREAM and named and peer:
            peers[inode] = peer
        offset += (length + 3) & ~3
    return True


def _attributes(message: bytes) -> tuple[bool, int]:
    """Whether a unix_diag message's socket has a name, and its peer's inode (0: none)."""
    named, peer = False, 0
    position = 16
    while position + 4 <= len(message):
        attribute_length, attribute = binary.unpack_from("=HH", message, position)
        if attribute_length < 4:
            break
        if attribute == UNIX_DIAG_NAME and attribute_length > 4:
            named = True
        elif attribute == UNIX_DIAG_PEER and attribute_length >= 8:
            peer = binary.unpack_from("=I", message, position + 4)[0]
        position += (attribute_length + 3) & ~3
    return named, peer
