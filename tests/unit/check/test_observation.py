"""check/observation.py: how a server session is named in a report and an alert: its user,
application, client (an address, the server's unix socket, or nothing known), an idle
transaction shouted, and its query on one cut line."""

from __future__ import annotations

import pytest

from lockwarden.check.observation import IDLE_IN_TRANSACTION, QUERY_LIMIT, Backend


@pytest.mark.parametrize(
    ("backend", "text"),
    [
        (
            Backend(
                9911,
                user="app",
                application_name="prisma",
                client_addr="127.0.0.1",
                client_port=40112,
                state=IDLE_IN_TRANSACTION,
            ),
            "backend 9911 (user app, application_name 'prisma', client 127.0.0.1:40112, "
            "IDLE IN TRANSACTION)",
        ),
        (
            Backend(9912, user="app", client_port=-1, state="active"),
            "backend 9912 (user app, client on the server's unix socket, active)",
        ),
        (
            Backend(31, user="deploy", client_addr="10.0.0.5", client_port=5100, kind="connection"),
            "connection 31 (user deploy, client 10.0.0.5:5100)",
        ),
    ],
)
def test_a_session_is_described_as_a_report_names_it(backend: Backend, text: str) -> None:
    assert backend.describe() == text


def test_only_port_minus_one_without_an_address_is_the_unix_socket() -> None:
    assert Backend(1, client_port=-1).unix_socket
    assert not Backend(1).unix_socket  # hidden from this role: not known to be local
    assert not Backend(1, client_addr="::1", client_port=-1).unix_socket
    assert Backend(1).client_text() == ""


def test_a_query_is_one_line_and_cut_at_the_limit() -> None:
    assert Backend(1).query_text() is None
    assert Backend(1, query="SELECT\n  pg_advisory_lock(1)\t;").query_text() == (
        "SELECT pg_advisory_lock(1) ;"
    )
    long = Backend(1, query="x" * (QUERY_LIMIT + 50)).query_text()
    assert long == "x" * (QUERY_LIMIT - 1) + "…"
    exact = "y" * QUERY_LIMIT
    assert Backend(1, query=exact).query_text() == exact
