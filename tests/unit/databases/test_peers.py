"""databases/peers.py judges from the snapshot alone: what the capture read of a session's
client socket names its process, and a fact it was not asked for is an error, not a read."""

from __future__ import annotations

import ipaddress
from datetime import timedelta

import pytest

from factories import NOW, make_process, make_snapshot
from lockwarden.databases.observe import Backend
from lockwarden.databases.peers import client_question, find_clients
from lockwarden.procfs.snapshot import NotCaptured
from lockwarden.procfs.sockets import ClientSockets, SessionEnds

TCP = Backend(pid=9911, client_addr="127.0.0.1", client_port=40112, backend_start=NOW)
UNIX = Backend(pid=9912, client_port=-1, backend_start=NOW)


def test_the_question_names_each_sessions_client_end() -> None:
    odd = Backend(pid=9913, client_addr="db.example", client_port=1)  # not an address
    assert client_question([TCP, UNIX, odd]) == SessionEnds(
        frozenset({(ipaddress.ip_address("127.0.0.1"), 40112)}), frozenset({9912})
    )


def test_a_tcp_client_is_named_from_the_captured_socket_and_its_owner() -> None:
    psql = make_process(pid=4242, name="psql", cmdline=("psql", "-h", "127.0.0.1"))
    sockets = ClientSockets(
        tcp={(ipaddress.ip_address("127.0.0.1"), 40112): 777},
        backend_sockets={},
        unix_peers={},
        owners={777: (4242,)},
    )
    snapshot = make_snapshot(client_sockets=sockets, processes={4242: psql})
    [(pid, client)] = find_clients([TCP], snapshot, "client").items()
    assert (pid, client.holder and client.holder.pid) == (9911, 4242)
    assert client.holder is not None and client.holder.cmdline == psql.cmdline


def test_a_backend_that_is_not_the_servers_process_here_names_no_client() -> None:
    other = make_process(pid=9912, started_at=NOW - timedelta(hours=1))  # not its session
    sockets = ClientSockets(tcp={}, backend_sockets={9912: (5,)}, unix_peers={5: 6}, owners={})
    snapshot = make_snapshot(client_sockets=sockets, processes={9912: other})
    [client] = find_clients([UNIX], snapshot, "client").values()
    assert client.holder is None and "not a process of this host" in (client.why_not or "")


def test_a_client_the_capture_was_not_asked_about_is_an_error_not_a_late_read() -> None:
    with pytest.raises(NotCaptured):
        find_clients([TCP], make_snapshot(), "client")
