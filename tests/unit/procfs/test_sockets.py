"""procfs/sockets.py against this host: a TCP connection's client end is found by its address
and port, and its owner in one walk of the descriptor tables."""

from __future__ import annotations

import ipaddress
import os
import socket

from lockwarden.procfs.reader import HostReader, Request, wall_clock
from lockwarden.procfs.sockets import ClientQuestion, SessionEnds, read_client_sockets


def test_a_tcp_client_end_is_found_with_the_process_that_has_it() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        server_end, _address = listener.accept()
        with client, server_end:
            address, port = client.getsockname()
            end = (ipaddress.ip_address(address), port)
            elsewhere = (ipaddress.ip_address("192.0.2.7"), 5432)  # TEST-NET: no connection
            found = read_client_sockets(
                "/proc", SessionEnds(frozenset({end, elsewhere})), [str(os.getpid())]
            )
            assert set(found.tcp) == {end}
            [connection] = found.tcp[end]
            assert connection.remote == (
                ipaddress.ip_address("127.0.0.1"),
                server_end.getsockname()[1],
            )
            assert found.owners[connection.inode] == (os.getpid(),)


def test_a_capture_names_the_clients_and_what_runs_below_them() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        server_end, _address = listener.accept()
        with client, server_end:
            address, port = client.getsockname()
            ends = SessionEnds(frozenset({(ipaddress.ip_address(address), port)}))
            snapshot = HostReader(wall_clock).capture(
                Request(read_locks=False, clients=ClientQuestion(ends))
            )
            [[connection]] = snapshot.sockets().tcp.values()
            assert snapshot.sockets().owners[connection.inode] == (os.getpid(),)
            assert snapshot.process(os.getpid()) is not None  # named from the snapshot
            assert isinstance(snapshot.descendants(os.getpid()), tuple)
