"""Locks inside a real PostgreSQL server (Debian's postgresql, initdb in a temporary directory,
listening on 127.0.0.1 at a free port and on a private unix socket), held by real `psql`
clients, checked through the real CLI."""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psutil
import pytest
from test_postgres import postgres_program, server_user

from buildenv import build_environment
from conftest import Children, cli_env, require_tool, run_cli, wait_until, write_config
from factories import CaptureAfter
from lockwarden.config import DatabaseWatch
from lockwarden.databases import postgres
from lockwarden.support.durations import format_time

psycopg = (
    pytest.importorskip("psycopg") if os.environ.get("CI") != "true" else __import__("psycopg")
)

PASSWORD = "right-horse-battery"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Server:
    """One real server for the module; each test makes its own sessions and tables."""

    def __init__(self) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="lockwarden-pgdb-"))
        self.data = self.base / "data"
        self.port = free_port()
        self.process: subprocess.Popen[str] | None = None

    def start(self) -> None:
        if os.geteuid() == 0:
            shutil.chown(self.base, "postgres", "postgres")
        options = ["--auth-local=trust", "--auth-host=scram-sha-256", "-U", "postgres"]
        subprocess.run(
            [postgres_program("initdb"), "-D", str(self.data), *options, "--no-sync", "-E", "UTF8"],
            check=True,
            capture_output=True,
            env=build_environment(),
            **server_user(),  # type: ignore[arg-type]
        )
        argv = [postgres_program("postgres"), "-D", str(self.data), "-k", str(self.base)]
        argv += ["-c", "listen_addresses=127.0.0.1", "-p", str(self.port), "-c", "fsync=off"]
        argv += ["-c", "max_prepared_transactions=8"]  # PREPARE TRANSACTION, for its locks
        self.process = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, **server_user()
        )
        assert wait_until(self._ready, timeout=30), "postgres did not start"
        with self.admin() as connection:
            connection.execute(f"CREATE ROLE app LOGIN PASSWORD '{PASSWORD}'")
            connection.execute("GRANT pg_read_all_stats TO app")

    def _ready(self) -> bool:
        try:
            with self.admin():
                return True
        except psycopg.OperationalError:
            return False

    def admin(self) -> Any:
        return psycopg.connect(self.socket_dsn(), autocommit=True, connect_timeout=3)

    def socket_dsn(self) -> str:
        return f"host={self.base} port={self.port} dbname=postgres user=postgres"

    def tcp_dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} dbname=postgres user=app"

    def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.send_signal(signal.SIGINT)  # fast shutdown: ends every session
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.base, ignore_errors=True)


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    require_tool("psql")
    running = Server()
    try:
        running.start()
        yield running
    finally:
        running.stop()


class Psql:
    """A real psql session: statements go in on stdin; `ready` echoes once they have run."""

    def __init__(
        self, server: Server, tcp: bool, database: str = "postgres", port: int | None = None
    ) -> None:
        host = "127.0.0.1" if tcp else str(server.base)
        user = "app" if tcp else "postgres"
        port = port or server.port
        argv = [require_tool("psql"), "-X", "-q", "-A", "-t", "-h", host, "-p", str(port)]
        argv += ["-U", user, "-d", database, "-v", "ON_ERROR_STOP=1"]
        env = {**os.environ, "PGPASSWORD": PASSWORD, "PGAPPNAME": "deploy-migrate"}
        self.process = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def run(self, statements: str, wait: bool = True) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(statements + "\n" + ("\\echo ready\n" if wait else ""))
        self.process.stdin.flush()
        if wait:
            for line in self.process.stdout:
                if line.strip() == "ready":
                    return
            raise AssertionError(self.process.stderr.read() if self.process.stderr else "")

    def kill(self) -> None:
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            self.process.wait(timeout=10)
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            if stream:
                with contextlib.suppress(OSError):
                    stream.close()


@pytest.fixture
def sessions() -> Iterator[list[Psql]]:
    started: list[Psql] = []
    try:
        yield started
    finally:
        for session in started:
            session.kill()


@pytest.fixture
def prepared(server: Server) -> Iterator[list[str]]:
    """The gids of the prepared transactions a test makes: rolled back at its end (they outlive
    every session and would hold their locks into the next test)."""
    made: list[str] = []
    try:
        yield made
    finally:
        with server.admin() as connection:
            for gid in made:
                exists = connection.execute(
                    "SELECT 1 FROM pg_prepared_xacts WHERE gid = %s", (gid,)
                ).fetchone()
                if exists:
                    connection.execute(f"ROLLBACK PREPARED '{gid}'")


def prepare(server: Server, made: list[str], gid: str, statements: str) -> None:
    """Run `statements` in a transaction and PREPARE it as `gid`: its locks are then held by no
    session, as a two-phase commit's transaction manager leaves them until it decides."""
    with server.admin() as connection:
        connection.execute("BEGIN")
        connection.execute(statements)
        connection.execute(f"PREPARE TRANSACTION '{gid}'")
    made.append(gid)


def run_advised_rollback(server: Server, action: str) -> None:
    """Run the ROLLBACK PREPARED an action advises, as its reader would."""
    found = re.search(r"ROLLBACK PREPARED '(?:[^']|'')*'", action)
    assert found, action
    with server.admin() as connection:
        connection.execute(found.group())


def psql(server: Server, sessions: list[Psql], tcp: bool = True) -> Psql:
    session = Psql(server, tcp)
    sessions.append(session)
    return session


def check(tmp_path: Path, lock: str, minutes: float = 0, **env: str) -> tuple[int, dict[str, Any]]:
    state = f'[state]\npath = "{tmp_path / "state" / "state.jsonl"}"\n\n'
    config = write_config(tmp_path / "config.toml", state + "[[lock]]\n" + lock)
    moment = (datetime.now(UTC) + timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")
    completed = run_cli("--once", "--json", "--config", config, "--now", moment, timeout=40, **env)
    assert completed.stdout, completed.stderr
    document = json.loads(completed.stdout)
    return completed.returncode, document["locks"][0]


def lock_text(server: Server, watch: str, tcp: bool = False, extra: str = "") -> str:
    dsn = server.tcp_dsn() if tcp else server.socket_dsn()
    return (
        f'name = "app-db"\ndatabase = "postgresql"\nconnection = "{dsn}"\n{watch}\n'
        f'warn_after = "30m"\ncritical_after = "1h"\n{extra}'
    )


def password_file(tmp_path: Path, password: str = PASSWORD) -> str:
    path = tmp_path / "db-password"
    path.write_text(password + "\n")
    path.chmod(0o600)
    return f'password_file = "{path}"'


def test_prisma_lock_held_over_tcp_names_the_backend_and_the_local_psql(
    server: Server, sessions: list[Psql], tmp_path: Path
) -> None:
    holder = psql(server, sessions, tcp=True)
    holder.run("SELECT pg_advisory_lock(72707369);")
    lock = lock_text(server, 'advisory_key = "prisma"', tcp=True, extra=password_file(tmp_path))

    code, finding = check(tmp_path, lock)
    assert finding["state"] == "held", finding
    assert code == 0
    assert finding["holders"][0]["pid"] == holder.pid
    assert finding["holders"][0]["name"] == "psql"
    assert "advisory lock 72707369 (prisma)" in finding["reason"]
    assert "user app" in finding["reason"] and "'deploy-migrate'" in finding["reason"]
    assert finding["action"] is None  # within its budget: nothing to do
    assert "pg_cancel_backend" not in json.dumps(finding)

    # Two hours on, the session's age bounds the hold from above only: not a page on its own.
    code, finding = check(tmp_path, lock, minutes=120)
    assert (code, finding["state"]) == (0, "held"), finding
    assert finding["held"]["bound"] == "at_most", finding
    assert 119 * 60 <= finding["held"]["seconds"] <= 121 * 60, finding
    # The next run (a minute later) knows it has been held at least since the last one saw it.
    budget = lock.replace(
        'warn_after = "30m"\ncritical_after = "1h"', 'warn_after = "1m"\ncritical_after = "1m"'
    )
    code, finding = check(tmp_path, budget, minutes=121)
    assert (code, finding["state"]) == (2, "held_too_long"), finding
    assert finding["held"]["bound"] == "at_least"
    assert 60 <= finding["held"]["seconds"] < 70  # since the sighting a minute before
    assert "SELECT pg_terminate_backend(" in finding["action"]["line"]
    assert finding["action"]["line"].startswith(f"kill {holder.pid}")
    assert finding["action"]["argv"] is None  # a command and a fallback: not one argv
    assert "writes to app-db blocked" in finding["reason"]


def test_a_session_carried_by_a_forwarder_never_names_the_forwarder(
    server: Server, sessions: list[Psql], tmp_path: Path
) -> None:
    """psql through a real socat on this host: the session's client port leads to socat, which
    carries it (a pooler or a tunnel carries every session). Neither named nor told `kill`:
    the session is ended on the server."""
    port = free_port()
    forward = [f"TCP-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork", f"TCP:127.0.0.1:{server.port}"]
    forwarder = subprocess.Popen(  # one socat child per connection: the group is killed
        [require_tool("socat"), *forward], stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        assert wait_until(lambda: _listening(port), timeout=10)
        holder = Psql(server, tcp=True, port=port)
        sessions.append(holder)
        holder.run("SELECT pg_advisory_lock(72707369);")
        lock = lock_text(server, 'advisory_key = "prisma"', tcp=True, extra=password_file(tmp_path))
        budget = lock.replace(
            'warn_after = "30m"\ncritical_after = "1h"', 'warn_after = "0s"\ncritical_after = "0s"'
        )
        _code, finding = check(tmp_path, budget)
    finally:
        os.killpg(forwarder.pid, signal.SIGKILL)
        forwarder.wait()
    assert finding["state"] == "held_too_long", finding
    assert "socat" not in [party["name"] for party in finding["holders"]], finding
    assert "forwarder or pooler" in json.dumps(finding), finding
    assert "kill" not in finding["action"]["line"], finding["action"]
    assert "pg_terminate_backend(" in finding["action"]["line"]


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def test_two_int_key_held_over_the_unix_socket_names_the_local_psql(
    server: Server, sessions: list[Psql], tmp_path: Path
) -> None:
    holder = psql(server, sessions, tcp=False)
    holder.run("SELECT pg_advisory_lock(7, -3);")
    _code, finding = check(tmp_path, lock_text(server, "advisory_key = [7, -3]"))
    assert finding["state"] == "held", finding
    assert finding["holders"][0]["pid"] == holder.pid
    assert "advisory lock (7, -3)" in finding["reason"]
    assert "unix socket" in finding["reason"]


def test_a_unix_session_whose_backend_made_a_unix_connection_of_its_own_names_its_own_client(
    server: Server, sessions: list[Psql], tmp_path: Path
) -> None:
    """The holder's backend has a dblink connection of its own over the server's unix socket,
    on a lower descriptor than its session's: the peer of that one is another backend, which is
    no client of the session. The session's client is the peer of the socket the server
    accepted."""
    holder = psql(server, sessions, tcp=False)
    holder.run("CREATE EXTENSION IF NOT EXISTS dblink; SELECT pg_advisory_lock(5150);")
    backend = session_holding(server, 5150)
    # Every backend closes its relation files, freeing descriptors below its session's socket
    with server.admin() as connection:
        connection.execute("CREATE DATABASE scratch_fds")
        connection.execute("DROP DATABASE scratch_fds")
    before = socket_fds(backend)
    holder.run(f"SELECT dblink_connect('loop', '{server.socket_dsn()}');")
    [dblink] = socket_fds(backend) - before
    assert dblink < min(before), "the dblink socket is not below the session's (the setup)"

    _code, finding = check(tmp_path, lock_text(server, "advisory_key = 5150"))
    assert finding["state"] == "held", finding
    assert [each["pid"] for each in finding["holders"]] == [holder.pid], finding["reason"]


def session_holding(server: Server, key: int) -> int:
    with server.admin() as connection:
        row = connection.execute(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objid = %s",
            (key,),
        ).fetchone()
    return int(row[0])


def socket_fds(pid: int) -> set[int]:
    """The descriptors of a process that are sockets."""
    directory = Path(f"/proc/{pid}/fd")
    return {
        int(entry.name) for entry in directory.iterdir() if os.readlink(entry).startswith("socket:")
    }


def test_idle_in_transaction_table_lock_with_a_blocked_writer(
    server: Server, sessions: list[Psql], tmp_path: Path
) -> None:
    with server.admin() as connection:
        connection.execute("CREATE TABLE IF NOT EXISTS orders (id int)")
        connection.execute("GRANT ALL ON orders TO app")
    holder = psql(server, sessions, tcp=False)
    holder.run("BEGIN; LOCK TABLE orders IN SHARE MODE;")
    lock = lock_text(server, 'table = "public.orders"')
    assert check(tmp_path, lock)[1]["state"] == "free"  # a lock nobody waits for blocks no one

    writer = psql(server, sessions, tcp=True)
    writer.run("INSERT INTO orders VALUES (1);", wait=False)
    assert wait_until(lambda: _waiting(server) > 0, timeout=10)
    _code, finding = check(tmp_path, lock)
    assert finding["state"] == "held", finding
    assert finding["holders"][0]["pid"] == holder.pid
    assert "IDLE IN TRANSACTION" in finding["reason"]
    assert [waiter["pid"] for waiter in finding["waiters"]] == [writer.pid]
    assert "INSERT INTO orders" in json.dumps(finding["waiters"])
    assert finding["held"]["bound"] == "at_most", finding  # from its xact_start

    _code, schema_wide = check(tmp_path, lock_text(server, 'table = "public.*"'))
    assert schema_wide["holders"][0]["pid"] == holder.pid


def test_a_migration_queued_behind_an_idle_transaction_is_a_waiter_not_the_holder(
    server: Server, sessions: list[Psql], tmp_path: Path
) -> None:
    """`BEGIN; SELECT count(*) FROM accounts;` left open; a migration's ALTER TABLE waits for
    it; INSERTs queue behind the ALTER (pg_blocking_pids names the ALTER for them). The holder
    is the idle session at the root of the wait graph; the ALTER and the INSERTs wait, in
    queue order, and the action stops the idle session's client, never the migration."""
    with server.admin() as connection:
        connection.execute("CREATE TABLE IF NOT EXISTS accounts (id int)")
        connection.execute("GRANT ALL ON accounts TO app")
        connection.execute("ALTER TABLE accounts OWNER TO app")
    idle = psql(server, sessions, tcp=True)
    idle.run("BEGIN; SELECT count(*) FROM accounts;")
    migration = psql(server, sessions, tcp=True)
    migration.run("ALTER TABLE accounts ADD COLUMN note text;", wait=False)
    assert wait_until(lambda: _waiting(server) == 1, timeout=10)
    writers = []
    for number in range(2):
        writer = psql(server, sessions, tcp=True)
        writer.run(f"INSERT INTO accounts (id) VALUES ({number});", wait=False)
        writers.append(writer)
        assert wait_until(lambda count=number + 2: _waiting(server) == count, timeout=10)
    lock = lock_text(server, 'table = "public.accounts"', tcp=True, extra=password_file(tmp_path))
    lock = lock.replace(
        'warn_after = "30m"\ncritical_after = "1h"', 'warn_after = "1m"\ncritical_after = "2m"'
    )

    code, finding = check(tmp_path, lock)
    assert finding["state"] == "held", finding
    assert finding["holders"][0]["pid"] == idle.pid, finding["reason"]
    assert "IDLE IN TRANSACTION" in finding["reason"]
    assert [waiter["pid"] for waiter in finding["waiters"]] == [
        migration.pid,
        *(writer.pid for writer in writers),
    ]
    # Past its budget (the idle transaction's age, projected an hour on): stop the idle one.
    code, finding = check(tmp_path, lock, minutes=60)
    assert (code, finding["state"]) == (2, "held_too_long"), finding
    assert finding["action"]["line"].startswith(f"kill {idle.pid} "), finding["action"]
    assert str(migration.pid) not in finding["action"]["line"]


SLOW_CHANGE = "SELECT pg_sleep(120);\n"


def sqitch_project(tmp_path: Path, server: Server) -> tuple[Path, dict[str, str]]:
    """A real sqitch project with one slow change, and the environment that points sqitch
    (DBD::Pg for its own session, psql for each change) at the test server as `postgres`."""
    sqitch = require_tool("sqitch")
    project = tmp_path / "flipr"
    project.mkdir()
    env = {
        **build_environment(),
        "PGHOST": str(server.base),
        "PGPORT": str(server.port),
        "PGUSER": "postgres",
        "SQITCH_FULLNAME": "Test",
        "SQITCH_EMAIL": "test@example.org",
        "SQITCH_USER_CONFIG": str(tmp_path / "sqitch-user.conf"),
    }
    for argv in (["init", "flipr", "--engine", "pg"], ["add", "slow", "-n", "a slow change"]):
        subprocess.run([sqitch, *argv], cwd=project, env=env, check=True, capture_output=True)
    (project / "deploy" / "slow.sql").write_text(SLOW_CHANGE)
    return project, env


def session_running(server: Server, text: str) -> list[int]:
    with server.admin() as connection:
        rows = connection.execute(
            "SELECT pid FROM pg_stat_activity WHERE state = 'active' AND query LIKE %s "
            "AND pid <> pg_backend_pid()",
            (f"%{text}%",),
        ).fetchall()
    return [row[0] for row in rows]


def sqitch_holds(server: Server) -> bool:
    with server.admin() as connection:
        row = connection.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "AND objid = 75474063"
        ).fetchone()
    return bool(row[0])


def test_a_migration_tool_running_its_change_in_a_child_is_stopped_whole(
    server: Server, tmp_path: Path, children: Children
) -> None:
    """sqitch takes its advisory lock on its own session and runs each change in a child psql
    with a session of its own. Killing sqitch alone would leave the psql's statement running
    while the next migrator takes the lock and starts the same change. The finding names the
    child too, and its action ends the child's session first; carried out, nothing of the
    change runs on and the lock is free."""
    project, env = sqitch_project(tmp_path, server)
    deploy = children.start(
        [require_tool("sqitch"), "deploy", "db:pg:postgres"], cwd=project, env=env
    )
    assert wait_until(lambda: bool(session_running(server, "pg_sleep(120)")), timeout=30)
    assert sqitch_holds(server)
    [psql_child] = [
        child.pid for child in psutil.Process(deploy.pid).children() if child.name() == "psql"
    ]
    children.track(psql_child)
    lock = lock_text(server, 'advisory_key = "sqitch"')
    lock = lock.replace(
        'warn_after = "30m"\ncritical_after = "1h"', 'warn_after = "1s"\ncritical_after = "1s"'
    )

    _code, first = check(tmp_path, lock)  # the first sighting
    assert first["state"] == "held", first
    assert "(sqitch)" in first["reason"]
    assert [holder["pid"] for holder in first["holders"]] == [deploy.pid, psql_child]
    time.sleep(1.5)
    code, finding = check(tmp_path, lock)
    assert (code, finding["state"]) == (2, "held_too_long"), finding
    [change] = session_running(server, "pg_sleep(120)")
    line = finding["action"]["line"]
    assert line.startswith(f"on the server: SELECT pg_terminate_backend({change}); then kill ")
    assert f"kill {deploy.pid} {psql_child} (else, on the server: " in line

    # Carry the action out as on-call would: the change's session, then the processes.
    with server.admin() as connection:
        connection.execute(f"SELECT pg_terminate_backend({change})")
    for pid in (deploy.pid, psql_child):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    assert wait_until(lambda: not sqitch_holds(server), timeout=10)
    assert session_running(server, "pg_sleep(120)") == []
    code, after = check(tmp_path, lock)
    assert (code, after["state"]) == (0, "free"), after


def _waiting(server: Server) -> int:
    with server.admin() as connection:
        row = connection.execute("SELECT count(*) FROM pg_locks WHERE NOT granted").fetchone()
        return int(row[0])


def _liquibase_row(server: Server, locked_by: str, age: timedelta) -> datetime:
    """Lock the row as Liquibase would; LOCKGRANTED is returned as the moment it names."""
    moment = (datetime.now() - age).replace(microsecond=0)
    granted = moment.strftime("%Y-%m-%d %H:%M:%S")  # local time, as Liquibase
    with server.admin() as connection:
        connection.execute(
            "CREATE TABLE IF NOT EXISTS databasechangeloglock (id int PRIMARY KEY, locked "
            "boolean NOT NULL, lockgranted timestamp, lockedby varchar(255))"
        )
        connection.execute("DELETE FROM databasechangeloglock")
        connection.execute(
            "INSERT INTO databasechangeloglock VALUES (1, true, %s, %s)", (granted, locked_by)
        )
    return moment.astimezone(UTC)


def _liquibase_processes() -> list[str]:
    """Processes on this host that lockwarden takes for Liquibase (databases/check.py)."""
    from lockwarden.databases.check import LIQUIBASE_COMMAND

    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            command = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace")
            if LIQUIBASE_COMMAND.search(command.lower()):
                found.append(f"PID {entry}: {' '.join(command.split(chr(0)))}")
    return found


def test_liquibase_row_is_stale_only_with_proof(server: Server, tmp_path: Path) -> None:
    # Stale needs proof that no Liquibase runs here: a process that looks like one (even
    # `pytest -k liquibase`, whose argument is the bare word) rightly keeps the row held.
    lookalikes = _liquibase_processes()
    assert not lookalikes, (
        f"this host runs what looks like Liquibase: {lookalikes}; use -k liquibase_row"
    )
    lock = lock_text(server, 'liquibase_table = "databasechangeloglock"')
    here = os.uname().nodename
    granted = _liquibase_row(server, f"{here} (127.0.0.1)", timedelta(hours=2))
    code, finding = check(tmp_path, lock)
    assert (code, finding["state"]) == (2, "stale"), finding
    assert "no Liquibase process runs here" in finding["proof"]
    assert finding["action"]["line"].startswith("liquibase release-locks")
    assert finding["held"]["bound"] == "exact"  # the row records when it was granted
    assert finding["held"]["since"] == format_time(granted)

    _liquibase_row(server, f"{here} (127.0.0.1)", timedelta(minutes=1))
    assert check(tmp_path, lock)[1]["state"] == "unknown"

    _liquibase_row(server, "build-7.example.net (10.0.0.7)", timedelta(hours=2))
    _code, finding = check(tmp_path, lock, minutes=0)
    assert finding["state"] in ("held", "held_too_long") and "another host" in finding["reason"]
    held = finding["held"]  # LOCKGRANTED, read in the server's time zone: exact, dated
    assert held["bound"] == "exact" and held["seconds"] is not None and held["since"]

    with server.admin() as connection:
        connection.execute("UPDATE databasechangeloglock SET locked = false")
    assert check(tmp_path, lock)[1]["state"] == "free"


@pytest.mark.parametrize("then", ["released", "granted again"])
def test_liquibase_row_released_between_the_answer_and_the_capture_is_not_stale(
    server: Server, tmp_path: Path, then: str
) -> None:
    """The server is asked before the host is captured: a run that released its two-hour-old
    row (or released it as another run took it) and ended in between leaves an answer that
    reads stale. The row is asked again after the capture, and the fresh answer is judged."""
    from lockwarden.config import load
    from lockwarden.model import State
    from lockwarden.pipeline import inspect

    lookalikes = _liquibase_processes()
    assert not lookalikes, f"this host runs what looks like Liquibase: {lookalikes}"
    here = f"{os.uname().nodename} (127.0.0.1)"
    _liquibase_row(server, here, timedelta(hours=2))
    config = write_config(
        tmp_path / "config.toml",
        "[[lock]]\n" + lock_text(server, 'liquibase_table = "databasechangeloglock"'),
    )
    locks = load(config).locks

    def released() -> None:
        with server.admin() as connection:
            connection.execute("UPDATE databasechangeloglock SET locked = false")

    def granted_again() -> None:
        _liquibase_row(server, here, timedelta(minutes=1))

    host = CaptureAfter(released if then == "released" else granted_again)
    [finding] = inspect(locks, host, datetime.now(UTC)).findings

    expected = State.FREE if then == "released" else State.UNKNOWN  # just granted: may be starting
    assert finding.state is expected, finding.reason
    assert host.captures == 2

    _liquibase_row(server, here, timedelta(hours=2))  # left over, and no run ends meanwhile
    host = CaptureAfter()
    [finding] = inspect(locks, host, datetime.now(UTC)).findings
    assert (finding.state, host.captures) == (State.STALE, 2), finding.reason  # confirmed
    released()


def test_liquibase_row_held_for_hours_by_a_run_here_pages_since_it_was_granted(
    server: Server, tmp_path: Path, children: Children
) -> None:
    """A row this host locked two hours ago while Liquibase still runs here: held too long,
    exactly since LOCKGRANTED (the row's own record), naming the Liquibase process."""
    runner = children.start(["bash", "-c", "exec -a liquibase sleep 120"])
    command = Path(f"/proc/{runner.pid}/cmdline")
    assert wait_until(lambda: command.read_bytes().startswith(b"liquibase\0"))
    here = os.uname().nodename
    granted = _liquibase_row(server, f"{here} (127.0.0.1)", timedelta(hours=2))
    lock = lock_text(server, 'liquibase_table = "databasechangeloglock"')
    code, finding = check(tmp_path, lock)
    assert (code, finding["state"], finding["severity"]) == (2, "held_too_long", "critical")
    assert finding["held"]["bound"] == "exact"
    assert finding["held"]["since"] == format_time(granted)
    assert finding["held"]["seconds"] == pytest.approx(7200, abs=5)
    assert [holder["pid"] for holder in finding["holders"]] == [runner.pid]
    assert f"PID {runner.pid}" in finding["reason"] and "runs Liquibase here" in finding["reason"]
    with server.admin() as connection:
        connection.execute("UPDATE databasechangeloglock SET locked = false")


AUDITED_INSPECTION = """
import json, sys
from datetime import UTC, datetime
events = []

def audit(event, args):
    if event in ("open", "os.listdir", "os.scandir") and isinstance(args[0], str | bytes):
        path = args[0] if isinstance(args[0], str) else args[0].decode()
        if path.startswith("/proc"):
            events.append(path)

sys.addaudithook(audit)
from lockwarden.config import load
from lockwarden.pipeline import inspect_locks
from lockwarden.procfs import reader

capture = reader.HostReader.capture

def marked(self, request):
    snapshot = capture(self, request)
    events.append("CAPTURED")
    return snapshot

reader.HostReader.capture = marked
host = reader.HostReader(reader.wall_clock)
found = inspect_locks(load(sys.argv[1]).locks, host, datetime.now(UTC))
holders = {finding.name: [holder.pid for holder in finding.holders] for finding in found}
print(json.dumps({"events": events, "holders": holders}))
"""


def test_after_the_capture_nothing_reads_proc_yet_the_clients_are_named(
    server: Server, sessions: list[Psql], tmp_path: Path, children: Children
) -> None:
    """The servers are asked before the host is captured, and their answers say what the
    capture reads besides: a session's client (its socket's owner, over TCP) and the Liquibase
    processes a locked row names. Judging then reads no /proc file and lists no /proc
    directory, and still names both."""
    holder = psql(server, sessions, tcp=True)
    holder.run("SELECT pg_advisory_lock(72707369);")
    runner = children.start(["bash", "-c", "exec -a liquibase sleep 120"])
    command = Path(f"/proc/{runner.pid}/cmdline")
    assert wait_until(lambda: command.read_bytes().startswith(b"liquibase\0"))
    _liquibase_row(server, f"{os.uname().nodename} (127.0.0.1)", timedelta(minutes=5))
    advisory = lock_text(server, 'advisory_key = "prisma"', True, password_file(tmp_path))
    liquibase = lock_text(server, 'liquibase_table = "databasechangeloglock"')
    config = write_config(
        tmp_path / "config.toml",
        "[[lock]]\n" + advisory + "\n[[lock]]\n" + liquibase.replace('"app-db"', '"app-lb"'),
    )
    completed = subprocess.run(
        [sys.executable, "-c", AUDITED_INSPECTION, config],
        capture_output=True,
        text=True,
        timeout=60,
        env=cli_env(),
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    seen = json.loads(completed.stdout)
    assert seen["holders"] == {"app-db": [holder.pid], "app-lb": [runner.pid]}
    events = seen["events"]
    assert events.count("CAPTURED") == 1
    assert events[events.index("CAPTURED") + 1 :] == []
    with server.admin() as connection:
        connection.execute("UPDATE databasechangeloglock SET locked = false")


def test_statement_that_would_block_is_unknown_not_a_hang(
    server: Server, sessions: list[Psql], tmp_path: Path
) -> None:
    _liquibase_row(server, "elsewhere (10.0.0.7)", timedelta(minutes=1))
    blocker = psql(server, sessions, tcp=False)
    blocker.run("BEGIN; LOCK TABLE databasechangeloglock IN ACCESS EXCLUSIVE MODE;")
    lock = lock_text(server, 'liquibase_table = "databasechangeloglock"')
    code, finding = check(tmp_path, lock + 'statement_timeout = "500ms"\n')
    assert (code, finding["state"], finding["unknown_cause"]) == (3, "unknown", "database")
    with server.admin() as connection:  # nothing of lockwarden's is left on the server
        rows = connection.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'lockwarden'"
        ).fetchone()
        assert rows[0] == 0


class StallingRelay:
    """A TCP relay on 127.0.0.1 in front of the real server: it passes the login through and,
    once the server says it is ready for queries, passes nothing more either way while keeping
    both connections open. A server (or a proxy, a NAT, a half-dead link) that took the
    connection and stopped answering, which the server's own timeouts cannot end."""

    def __init__(self, target: int, passed: int = 0) -> None:
        """`passed`: the first connections are passed through whole, then each one stalls."""
        self.target = target
        self.passed = passed
        self.connections = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.sockets: list[socket.socket] = [self.listener]
        self.stalled = threading.Event()
        self.stalled_at: float | None = None  # time.monotonic() when the login went through
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def _accept(self) -> None:
        while True:
            try:
                client, _address = self.listener.accept()
            except OSError:
                return  # closed
            upstream = socket.create_connection(("127.0.0.1", self.target))
            self.sockets += [client, upstream]
            self.connections += 1
            whole = self.connections <= self.passed
            for source, sink, parse in ((client, upstream, False), (upstream, client, True)):
                thread = threading.Thread(target=self._pipe, args=(source, sink, parse, whole))
                thread.daemon = True
                thread.start()
                self.threads.append(thread)

    def _pipe(
        self, source: socket.socket, sink: socket.socket, from_server: bool, whole: bool = False
    ) -> None:
        pending = b""
        while True:
            try:
                data = source.recv(65536)
            except OSError:
                return
            if not data:
                return
            if self.stalled.is_set() and not whole:
                continue  # read and dropped: nothing is answered any more
            if whole or not from_server:
                sink.sendall(data)
                continue
            pending += data  # the server's messages: a type byte and a 4-byte length each
            while len(pending) >= 5 and len(pending) >= 1 + int.from_bytes(pending[1:5]):
                size = 1 + int.from_bytes(pending[1:5])
                message, pending = pending[:size], pending[size:]
                sink.sendall(message)
                if message[:1] == b"Z":  # ReadyForQuery: the login is done
                    if self.stalled_at is None:
                        self.stalled_at = time.monotonic()
                    self.stalled.set()
                    break

    def close(self) -> None:
        for each in self.sockets:
            with contextlib.suppress(OSError):
                each.shutdown(socket.SHUT_RDWR)
            each.close()
        for thread in self.threads:
            thread.join(timeout=10)


def lockwarden_sessions(server: Server) -> int:
    with server.admin() as connection:
        row = connection.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'lockwarden'"
        ).fetchone()
        return int(row[0])


def test_a_server_that_stops_answering_after_login_is_unknown_not_a_hang(
    server: Server, tmp_path: Path
) -> None:
    """libpq's connect_timeout and the server's statement_timeout cannot end a wait for a
    server that took the connection and went silent: the check's own deadline does (here
    3 x 2s + 6 x 1s + 1s = 13s), and the run goes on (run_cli's timeout would fail it). A
    second lock on the same server is not asked again: one deadline, not two."""
    relay = StallingRelay(server.port)
    try:
        dsn = (
            f"host=127.0.0.1 port={relay.port} dbname=postgres user=app "
            "sslmode=disable gssencmode=disable"  # the relay reads the plain protocol
        )
        lock = (
            f'database = "postgresql"\nconnection = "{dsn}"\n'
            'connect_timeout = "2s"\nstatement_timeout = "500ms"\n' + password_file(tmp_path) + "\n"
        )
        state = f'[state]\npath = "{tmp_path / "state" / "state.jsonl"}"\n\n'
        config = write_config(
            tmp_path / "config.toml",
            state
            + f'[[lock]]\nname = "app-db"\nadvisory_key = "prisma"\n{lock}'
            + f'[[lock]]\nname = "app-flyway"\nadvisory_key = "flyway"\n{lock}',
        )
        completed = run_cli("--once", "--json", "--config", config, timeout=40)
        assert relay.stalled.is_set(), completed.stdout  # the login went through: then silence
    finally:
        relay.close()
    first, second = json.loads(completed.stdout)["locks"]
    assert completed.returncode == 3
    for finding in (first, second):
        assert (finding["state"], finding["unknown_cause"]) == ("unknown", "database")
    assert "did not answer within 13s" in first["reason"]
    assert "not asked again: the server did not answer within 13s" in second["reason"]
    # the server ends the abandoned session once the relay has closed its connection
    assert wait_until(lambda: lockwarden_sessions(server) == 0, timeout=15)


def test_a_server_that_went_silent_is_not_asked_again_by_a_later_look(
    server: Server, tmp_path: Path
) -> None:
    """Liquibase's row is left locked by a run gone from this host: stale on the run's first
    look, which a second look must confirm. The same server's other lock finds it silent
    (the relay passes the first connection whole, then stalls): the second look does not ask
    it again, so the run waits one deadline (13s), not two, and the row is unknown."""
    lookalikes = _liquibase_processes()
    assert not lookalikes, f"this host runs what looks like Liquibase: {lookalikes}"
    _liquibase_row(server, f"{os.uname().nodename} (127.0.0.1)", timedelta(hours=2))
    with server.admin() as connection:  # the relay's login is the password user's
        connection.execute("GRANT SELECT ON databasechangeloglock TO app")
    relay = StallingRelay(server.port, passed=1)
    try:
        dsn = (
            f"host=127.0.0.1 port={relay.port} dbname=postgres user=app "
            "sslmode=disable gssencmode=disable"
        )
        common = (
            f'database = "postgresql"\nconnection = "{dsn}"\n'
            'connect_timeout = "2s"\nstatement_timeout = "500ms"\n' + password_file(tmp_path) + "\n"
        )
        config = write_config(
            tmp_path / "config.toml",
            '[[lock]]\nname = "changelog"\nliquibase_table = "databasechangeloglock"\n'
            + common
            + f'[[lock]]\nname = "app-db"\nadvisory_key = "prisma"\n{common}',
        )
        started = time.monotonic()
        completed = run_cli("--once", "--json", "--config", config, timeout=60)
        elapsed = time.monotonic() - started
        assert relay.stalled.is_set(), completed.stdout
        connections = relay.connections
    finally:
        relay.close()
    changelog, app = json.loads(completed.stdout)["locks"]
    assert (app["state"], app["unknown_cause"]) == ("unknown", "database"), app
    assert (changelog["state"], changelog["unknown_cause"]) == ("unknown", "database")
    assert "not asked again: the server did not answer within 13s" in changelog["reason"]
    assert connections == 2, "the second look asked the silent server again"
    assert elapsed < 2 * 13, f"{elapsed:.1f} s: more than one deadline"
    assert wait_until(lambda: lockwarden_sessions(server) == 0, timeout=15)


def test_two_silent_servers_are_asked_at_once_each_within_its_own_deadline(
    server: Server, tmp_path: Path
) -> None:
    """Two servers (two relays in front of the real one, each a server of its own to
    lockwarden) that take the login and go silent: the second is asked while the first is
    still within its 13s deadline, not after it, so the run waits one deadline, not two; each
    lock is unknown with its own server's reason."""
    relays = [StallingRelay(server.port), StallingRelay(server.port)]
    try:
        locks = ""
        for number, relay in enumerate(relays):
            dsn = (
                f"host=127.0.0.1 port={relay.port} dbname=postgres user=app "
                "sslmode=disable gssencmode=disable"
            )
            locks += (
                f'[[lock]]\nname = "app-{number}"\nadvisory_key = "prisma"\n'
                f'database = "postgresql"\nconnection = "{dsn}"\n'
                'connect_timeout = "2s"\nstatement_timeout = "500ms"\n'
                + password_file(tmp_path)
                + "\n"
            )
        config = write_config(tmp_path / "config.toml", locks)
        completed = run_cli("--once", "--json", "--config", config, timeout=40)
        assert all(relay.stalled.is_set() for relay in relays), completed.stdout
    finally:
        for relay in relays:
            relay.close()
    first, second = (relay.stalled_at for relay in relays)
    assert first is not None and second is not None
    # Asked one after the other, the second login comes when the first's 13s deadline has run
    # out, less the first login's fraction of a second (12.9s measured); at once, together.
    assert abs(second - first) < 13 / 2, (first, second)
    assert completed.returncode == 3, completed.stdout
    for finding in json.loads(completed.stdout)["locks"]:
        assert (finding["state"], finding["unknown_cause"]) == ("unknown", "database")
        assert "did not answer within 13s" in finding["reason"], finding
        assert "not asked again" not in finding["reason"], finding
    assert wait_until(lambda: lockwarden_sessions(server) == 0, timeout=15)


def test_killed_client_frees_the_session_lock(
    server: Server, sessions: list[Psql], tmp_path: Path
) -> None:
    holder = psql(server, sessions, tcp=False)
    holder.run("SELECT pg_advisory_lock(424242);")
    lock = lock_text(server, "advisory_key = 424242")
    assert check(tmp_path, lock)[1]["holders"][0]["pid"] == holder.pid
    holder.kill()
    assert wait_until(lambda: check(tmp_path, lock)[1]["state"] == "free", timeout=15)


def test_wrong_password_is_unknown_and_never_printed(server: Server, tmp_path: Path) -> None:
    wrong = "not-the-password-1234"
    lock = lock_text(
        server, 'advisory_key = "prisma"', tcp=True, extra=password_file(tmp_path, wrong)
    )
    state = f'[state]\npath = "{tmp_path / "state" / "state.jsonl"}"\n\n'
    config = write_config(tmp_path / "config.toml", state + "[[lock]]\n" + lock)
    completed = run_cli("--once", "-v", "--config", config, timeout=40)
    assert completed.returncode == 3, completed.stdout
    assert "password authentication failed" in completed.stdout
    assert wrong not in completed.stdout + completed.stderr
    checked = run_cli("check-config", "--config", config)
    assert wrong not in checked.stdout + checked.stderr


def test_server_down_is_unknown_within_the_connect_timeout(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    lock = (
        f'name = "app-db"\ndatabase = "postgresql"\n'
        f'connection = "host=127.0.0.1 port={port} dbname=app user=app"\n'
        'advisory_key = "flyway"\nconnect_timeout = "2s"\n'
    )
    code, finding = check(tmp_path, lock)
    assert (code, finding["state"], finding["unknown_cause"]) == (3, "unknown", "database")
    assert "refused" in finding["reason"]  # the server's own words, passed on


@contextlib.contextmanager
def in_unit(pid: int, unit: str) -> Iterator[None]:
    """Put a process in a cgroup named like a systemd service (what systemd itself does), so
    its unit is read from /proc/PID/cgroup as on a systemd host; moved back afterwards."""
    root = Path("/sys/fs/cgroup/unified")
    group = root / unit
    try:
        group.mkdir(exist_ok=True)
        (group / "cgroup.procs").write_text(str(pid))
    except OSError as error:
        message = f"cannot create a cgroup v2 group to stand for a unit: {error}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            (root / "cgroup.procs").write_text(str(pid))
        with contextlib.suppress(OSError):
            group.rmdir()


def test_once_alerts_once_naming_backend_and_client_then_resolves(
    server: Server, sessions: list[Psql], tmp_path: Path
) -> None:
    from alerts.helpers import Receiver

    receiver = Receiver()
    receiver.start()
    try:
        _alert_lifecycle(server, sessions, tmp_path, receiver)
    finally:
        receiver.release.set()
        receiver.stop()


def _alert_lifecycle(server: Server, sessions: list[Psql], tmp_path: Path, receiver: Any) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    config = write_config(
        tmp_path / "alerting.toml",
        f'[state]\npath = "{state}/state.jsonl"\n[notify]\nurls = ["{receiver.url()}"]\n'
        f'timeout = "5s"\n[[lock]]\n{lock_text(server, "advisory_key = 72707369")}'.replace(
            'warn_after = "30m"\ncritical_after = "1h"', 'warn_after = "1m"\ncritical_after = "1m"'
        ),
    )
    holder = psql(server, sessions, tcp=False)
    holder.run("SELECT pg_advisory_lock(72707369);")
    moment = datetime.now(UTC) + timedelta(hours=2)
    seen = (moment - timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    later = moment.strftime("%Y-%m-%dT%H:%M:%SZ")

    with in_unit(holder.pid, "lockwarden-test-deploy.service"):
        # A session's lock has no grant time: one run sees it, the next knows it held on since.
        sighted = run_cli("--once", "--config", config, "--now", seen, timeout=40)
        assert sighted.returncode == 0 and not receiver.payloads, sighted.stdout
        first = run_cli("--once", "--config", config, "--now", later, timeout=40)
    assert first.returncode == 2, first.stdout + first.stderr
    assert len(receiver.payloads) == 1
    alert = json.dumps(receiver.payloads[0])
    assert f"PID {holder.pid}" in alert and "backend " in alert and "prisma" in alert
    assert "systemctl stop lockwarden-test-deploy.service" in alert

    again = run_cli("--once", "--config", config, "--now", later, timeout=40)
    assert again.returncode == 2 and len(receiver.payloads) == 1  # the same incident: quiet

    holder.run("SELECT pg_advisory_unlock(72707369);")
    resolved = run_cli("--once", "--config", config, "--now", later, timeout=40)
    assert resolved.returncode == 0, resolved.stdout
    assert len(receiver.payloads) == 2
    assert "resolved" in json.dumps(receiver.payloads[1]).lower()


def test_discover_offers_the_locks_the_server_shows_and_writes_a_valid_config(
    server: Server, sessions: list[Psql], tmp_path: Path
) -> None:
    with server.admin() as connection:
        connection.execute("CREATE TABLE IF NOT EXISTS _prisma_migrations (id text)")
    holder = psql(server, sessions, tcp=False)
    holder.run("SELECT pg_advisory_lock(5150);")
    written = tmp_path / "discovered.toml"
    completed = run_cli(
        "discover",
        "--json",
        "--database",
        server.socket_dsn(),
        "--write",
        str(written),
        timeout=40,
    )
    assert completed.returncode == 0, completed.stderr
    locks = {lock["name"]: lock for lock in json.loads(completed.stdout)["locks"]}
    assert locks["postgres-advisory-5150"]["state"] == "held"
    assert locks["postgres-advisory-5150"]["holders"][0]["pid"] == holder.pid
    assert locks["postgres-prisma"]["found_by"].startswith("prisma's table _prisma_migrations")
    checked = run_cli("check-config", "--config", str(written))
    assert checked.returncode == 0, checked.stderr
    assert 5150 in [lock.get("advisory_key") for lock in tomllib.loads(written.read_text())["lock"]]


def test_discover_with_an_unreachable_server_says_why(tmp_path: Path) -> None:
    dsn = f"host=127.0.0.1 port={free_port()} dbname=app user=app connect_timeout=2"
    completed = run_cli("discover", "--database", dsn, timeout=40)
    assert completed.returncode == 0
    assert "cannot connect to PostgreSQL" in completed.stdout


def why(tmp_path: Path, *args: str) -> tuple[int, dict[str, Any]]:
    completed = run_cli("why", "--json", *args, timeout=40)
    assert completed.stdout, completed.stderr
    return completed.returncode, json.loads(completed.stdout)


def why_config(tmp_path: Path, server: Server, watch: str) -> str:
    return write_config(tmp_path / "why.toml", "[[lock]]\n" + lock_text(server, watch, tcp=False))


@pytest.mark.parametrize("holder_on_tcp", [True, False])
def test_why_follows_a_client_waiting_on_an_advisory_lock_to_the_holding_client(
    server: Server, sessions: list[Psql], tmp_path: Path, holder_on_tcp: bool
) -> None:
    """The blocked writer's question for a database lock: a psql whose session waits in
    pg_advisory_lock is followed through the server's wait to the holding session, and on to
    its client process on this host (over TCP and over the unix socket); a process waiting on
    nothing is not said to wait, and `why` without a PID finds the waiter too."""
    holder = psql(server, sessions, tcp=holder_on_tcp)
    holder.run("SELECT pg_advisory_lock(4242);")
    waiter = psql(server, sessions, tcp=not holder_on_tcp)
    waiter.run("SELECT pg_advisory_lock(4242);", wait=False)
    assert wait_until(lambda: _waiting(server) > 0, timeout=10)
    config = why_config(tmp_path, server, "advisory_key = 4242")

    code, document = why(tmp_path, str(waiter.pid), "--config", config)
    [process] = document["processes"]
    assert process["blocked"] and code == 0, process  # within the lock's own budgets
    [wait] = process["waits"]
    assert wait["call"] == "a database session"
    assert wait["blocked_by"] == [holder.pid]
    assert "advisory lock 4242" in wait["lock"]["reason"]
    code, document = why(
        tmp_path,
        str(waiter.pid),
        "--config",
        config,
        "--warn-after",
        "0s",
        "--critical-after",
        "0s",
    )
    assert code == 2, document
    text = run_cli(
        "why", str(waiter.pid), "--config", config, "--warn-after", "0s", "--critical-after", "0s"
    )
    assert f"PID {waiter.pid} (" in text.stdout and f"by PID {holder.pid} (psql" in text.stdout
    assert f"kill {holder.pid}" in text.stdout, text.stdout

    _code, everyone = why(tmp_path, "--config", config)
    assert waiter.pid in [item["pid"] for item in everyone["processes"]]
    _code, idle = why(tmp_path, str(holder.pid), "--config", config)
    [holding] = idle["processes"]
    assert not holding["blocked"] and holding["doing"], holding  # it holds; it waits on nothing


def test_why_follows_a_writer_blocked_behind_a_table_lock(
    server: Server, sessions: list[Psql], tmp_path: Path
) -> None:
    with server.admin() as connection:
        connection.execute("CREATE TABLE IF NOT EXISTS ledger (id int)")
        connection.execute("GRANT ALL ON ledger TO app")
    holder = psql(server, sessions, tcp=False)
    holder.run("BEGIN; LOCK TABLE ledger IN ACCESS EXCLUSIVE MODE;")
    writer = psql(server, sessions, tcp=True)
    writer.run("INSERT INTO ledger VALUES (1);", wait=False)
    assert wait_until(lambda: _waiting(server) > 0, timeout=10)
    config = why_config(tmp_path, server, 'table = "public.ledger"')
    _code, document = why(tmp_path, str(writer.pid), "--config", config)
    [process] = document["processes"]
    [wait] = process["waits"]
    assert wait["call"] == "a database session" and wait["blocked_by"] == [holder.pid], wait
    assert "table" in wait["lock"]["reason"] and "ledger" in wait["lock"]["reason"]


@pytest.mark.parametrize("kind", ["advisory", "table", "row"])
def test_why_with_a_database_connection_follows_any_lock_wait_to_its_root(
    server: Server, sessions: list[Psql], tmp_path: Path, kind: str
) -> None:
    """`why PID --database CONNECTION`, no config: the server's wait graph, whatever the lock
    (an advisory key nobody configured, a table, a row another transaction changed), followed
    to the session at its root and that session's client here; through a queue too (the
    second writer waits behind the first, which waits behind the holder)."""
    with server.admin() as connection:
        connection.execute("CREATE TABLE IF NOT EXISTS why_accounts (id int PRIMARY KEY, n int)")
        connection.execute("INSERT INTO why_accounts VALUES (1, 0) ON CONFLICT DO NOTHING")
        connection.execute("GRANT ALL ON why_accounts TO app")
    take, wait = {
        "advisory": ("SELECT pg_advisory_lock(99001);", "SELECT pg_advisory_lock(99001);"),
        "table": ("BEGIN; LOCK TABLE why_accounts IN ACCESS EXCLUSIVE MODE;",
                  "INSERT INTO why_accounts VALUES (2, 0);"),
        "row": ("BEGIN; UPDATE why_accounts SET n = n + 1 WHERE id = 1;",
                "UPDATE why_accounts SET n = n + 1 WHERE id = 1;"),
    }[kind]  # fmt: skip
    holder = psql(server, sessions, tcp=False)
    holder.run(take)
    first = psql(server, sessions, tcp=True)
    first.run(wait, wait=False)
    assert wait_until(lambda: _waiting(server) >= 1, timeout=10)
    second = psql(server, sessions, tcp=True)
    second.run(wait, wait=False)
    assert wait_until(lambda: _waiting(server) >= 2, timeout=10)
    env = {"PGPASSWORD": PASSWORD}
    for waiter in (first, second):
        completed = run_cli(
            "why", "--json", str(waiter.pid), "--database", server.tcp_dsn(), timeout=40, **env
        )
        assert completed.stdout, completed.stderr
        [process] = json.loads(completed.stdout)["processes"]
        [waited] = process["waits"]
        assert waited["blocked_by"] == [holder.pid], waited
        reason = waited["lock"]["reason"]
        expected = {"advisory": "advisory lock 99001", "table": "table why_accounts",
                    "row": "a row another transaction"}[kind]  # fmt: skip
        assert expected in reason, reason
    refused = run_cli("why", str(first.pid), "--database", "mysql://app@127.0.0.1:3306")
    assert refused.returncode == 64 and "PostgreSQL" in refused.stderr


def test_why_with_a_database_connection_follows_each_of_two_chains_to_its_own_root(
    server: Server, sessions: list[Psql], tmp_path: Path
) -> None:
    """Two independent waits in one database (an advisory key, a table): each waiter is
    followed to its own holder, over the socket and over TCP."""
    with server.admin() as connection:
        connection.execute("CREATE TABLE IF NOT EXISTS invoices (id int)")
        connection.execute("GRANT ALL ON invoices TO app")
    advisory_holder = psql(server, sessions, tcp=False)
    advisory_holder.run("SELECT pg_advisory_lock(99002);")
    advisory_waiter = psql(server, sessions, tcp=True)
    advisory_waiter.run("SELECT pg_advisory_lock(99002);", wait=False)
    table_holder = psql(server, sessions, tcp=True)
    table_holder.run("BEGIN; LOCK TABLE invoices IN SHARE MODE;")
    table_waiter = psql(server, sessions, tcp=False)
    table_waiter.run("INSERT INTO invoices VALUES (1);", wait=False)
    assert wait_until(lambda: _waiting(server) >= 2, timeout=10)
    for waiter, holder in ((advisory_waiter, advisory_holder), (table_waiter, table_holder)):
        completed = run_cli(
            "why", "--json", str(waiter.pid), "--database", server.socket_dsn(), timeout=40
        )
        [process] = json.loads(completed.stdout)["processes"]
        [waited] = process["waits"]
        assert waited["blocked_by"] == [holder.pid], (waiter.pid, waited)
    _code, everyone = why(tmp_path, "--database", server.socket_dsn())
    pids = [item["pid"] for item in everyone["processes"]]
    assert advisory_waiter.pid in pids and table_waiter.pid in pids


def test_why_with_a_database_connection_says_when_the_server_does_not_answer(
    tmp_path: Path, sessions: list[Psql], server: Server
) -> None:
    """A server that cannot be asked is no evidence that nothing waits: exit 3, said; and a
    connection with a password in it is refused (it would be in every `ps`)."""
    port = free_port()  # nothing listens there
    dead = f"host=127.0.0.1 port={port} dbname=postgres user=app connect_timeout=1"
    sleeper = psql(server, sessions, tcp=True)
    completed = run_cli("why", str(sleeper.pid), "--database", dead, timeout=60)
    assert completed.returncode == 3, completed.stdout + completed.stderr
    assert "could not be asked" in completed.stdout, completed.stdout
    everyone = run_cli("why", "--database", dead, timeout=60)
    assert everyone.returncode == 3 and "could not be asked" in everyone.stderr, everyone.stderr
    secret = run_cli("why", "--database", "host=127.0.0.1 user=app password=hunter2")
    assert secret.returncode == 64 and "hunter2" not in secret.stderr + secret.stdout


def test_every_session_carries_the_port_its_server_listens_on(
    server: Server, sessions: list[Psql]
) -> None:
    """A session's TCP client is the connection here from its client end to the server's
    port (databases/peers.py): Linux lets another program's connection to elsewhere leave
    from the same end, which is then no candidate. The server says its port."""
    holder = psql(server, sessions, tcp=True)
    holder.run("SELECT pg_advisory_lock(4747);")
    other = psql(server, sessions, tcp=True)
    other.run("SELECT 1;")
    watch = DatabaseWatch("postgresql", server.socket_dsn(), "advisory_key", 4747)
    observation = postgres.observe(watch, {})
    assert observation.problem is None, observation.problem
    [hold] = observation.holds
    assert hold.holder.server_port == server.port
    assert observation.sessions and {s.server_port for s in observation.sessions} == {server.port}


def test_every_session_sharing_a_lock_a_writer_waits_for_is_in_the_action(
    server: Server, sessions: list[Psql], tmp_path: Path
) -> None:
    """Two sessions hold an advisory lock shared and a migration waits for it exclusively: it
    gets the lock only once both are gone, so the action stops both (it stopped the one with
    the longest queue, and the waiter stayed blocked behind the other)."""
    sharers = [psql(server, sessions, tcp=True) for _ in range(2)]
    for sharer in sharers:
        sharer.run("SELECT pg_advisory_lock_shared(5151);")
    waiter = psql(server, sessions, tcp=True)
    waiter.run("SELECT pg_advisory_lock(5151);", wait=False)
    assert wait_until(lambda: _waiting(server) == 1, timeout=20)
    lock = lock_text(server, "advisory_key = 5151", tcp=True, extra=password_file(tmp_path))
    _code, first = check(tmp_path, lock)
    assert first["state"] == "held", first
    check(tmp_path, lock, minutes=120)  # a sighting a minute before, as in the test above
    budget = lock.replace(
        'warn_after = "30m"\ncritical_after = "1h"', 'warn_after = "1m"\ncritical_after = "1m"'
    )
    _code, late = check(tmp_path, budget, minutes=121)
    assert late["state"] == "held_too_long", late["reason"]
    line = late["action"]["line"]
    for sharer in sharers:
        assert f"kill {sharer.pid} " in line, line
    assert f"{waiter.pid}" not in line, line  # the waiter is never stopped


def test_a_group_leading_client_and_its_work_are_signalled_once(
    server: Server, tmp_path: Path
) -> None:
    """A psql that leads its process group (a job started as a service's main process or with
    setsid) holds the lock while a command it runs (`\\!`) works: its group's kill reaches
    that command, which is not listed again by PID (it got SIGTERM twice)."""
    argv = [require_tool("psql"), "-X", "-q", "-A", "-t", "-h", "127.0.0.1", "-p", str(server.port)]
    argv += ["-U", "app", "-d", "postgres"]
    env = {**os.environ, "PGPASSWORD": PASSWORD}
    leader = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
        start_new_session=True,
    )  # fmt: skip
    try:
        assert leader.stdin is not None and leader.stdout is not None
        leader.stdin.write("SELECT pg_advisory_lock(6161);\n\\echo ready\n\\! sleep 60\n")
        leader.stdin.flush()
        assert any(line.strip() == "ready" for line in leader.stdout), "psql did not lock"
        assert wait_until(lambda: bool(psutil.Process(leader.pid).children()), timeout=10)
        lock = lock_text(server, "advisory_key = 6161", tcp=True, extra=password_file(tmp_path))
        check(tmp_path, lock)
        check(tmp_path, lock, minutes=120)
        budget = lock.replace(
            'warn_after = "30m"\ncritical_after = "1h"', 'warn_after = "1m"\ncritical_after = "1m"'
        )
        _code, late = check(tmp_path, budget, minutes=121)
    finally:
        os.killpg(leader.pid, signal.SIGKILL)
        leader.wait(timeout=10)
        for stream in (leader.stdin, leader.stdout):
            if stream:
                stream.close()
    assert late["state"] == "held_too_long", late["reason"]
    assert late["action"]["line"].startswith(f"kill -TERM -- -{leader.pid} (else, on the"), late


def test_why_names_a_prepared_transaction_that_a_client_waits_behind(
    server: Server, sessions: list[Psql], prepared: list[str], tmp_path: Path
) -> None:
    """A psql waits on an advisory lock a prepared transaction holds: no session, no process.
    `why PID` says what holds it by its gid (it said "an unnamed process"), and the SQL that
    frees it."""
    prepare(server, prepared, "deploy-why", "SELECT pg_advisory_xact_lock(4343);")
    waiter = psql(server, sessions)
    waiter.run("SELECT pg_advisory_lock(4343);", wait=False)
    assert wait_until(lambda: _waiting(server) > 0, timeout=10)
    config = why_config(tmp_path, server, "advisory_key = 4343")
    past = ("--warn-after", "0s", "--critical-after", "0s")
    text = run_cli("why", str(waiter.pid), "--config", config, *past, timeout=40).stdout
    assert "prepared transaction 'deploy-why'" in text, text
    assert "unnamed process" not in text, text
    assert "ROLLBACK PREPARED 'deploy-why'" in text, text


# (PostgreSQL's name, POSIX TZ for lockwarden, hours east of UTC): zones without summer time.
LIQUIBASE_ZONES = [
    ("UTC", "UTC0", 0),
    ("America/Bogota", "<-05>5", -5),
    ("Asia/Tokyo", "<+09>-9", 9),
]


@pytest.mark.parametrize("seed", range(6))
def test_liquibase_row_dated_in_its_writers_zone_is_never_older_than_it_is(
    seed: int, server: Server, tmp_path: Path, children: Children
) -> None:
    """LOCKGRANTED is a wall-clock time in the zone of the JVM that wrote it, which nothing
    records: this host's, the server's, or UTC (a Liquibase in a container). Read in one zone
    only (the server's for a row another host locked, this host's for its own), a row written
    in another was hours off: a minute-old lock paged as held for hours, or one held for hours
    read as just taken. Seeded over the server's zone (the check's session's, PGTZ), this
    host's (TZ), the writer's (one of those or UTC), the row's true age and whose row it is
    (another host's, or this host's with Liquibase running): the report is never older than
    the truth, pages a row held for hours and never one a minute old."""
    rng = random.Random(seed)
    server_zone, host_zone = rng.choice(LIQUIBASE_ZONES), rng.choice(LIQUIBASE_ZONES)
    writer = rng.choice([server_zone, host_zone, LIQUIBASE_ZONES[0]])
    age = rng.choice([timedelta(minutes=1), timedelta(hours=2)])
    case = rng.choice(["another host", "this host, Liquibase running", "this host, left over"])
    here = case != "another host"
    if case == "this host, left over":
        assert not _liquibase_processes(), "this host runs what looks like Liquibase"
    if case == "this host, Liquibase running":
        runner = children.start(["bash", "-c", "exec -a liquibase sleep 120"])
        command = Path(f"/proc/{runner.pid}/cmdline")
        assert wait_until(lambda: command.read_bytes().startswith(b"liquibase\0"))
    granted_at = (datetime.now(UTC) - age).replace(microsecond=0)
    wall = (granted_at + timedelta(hours=writer[2])).strftime("%Y-%m-%d %H:%M:%S")
    by = f"{os.uname().nodename} (127.0.0.1)" if here else "build-7.example.net (10.0.0.7)"
    with server.admin() as connection:
        connection.execute(
            "CREATE TABLE IF NOT EXISTS databasechangeloglock (id int PRIMARY KEY, locked "
            "boolean NOT NULL, lockgranted timestamp, lockedby varchar(255))"
        )
        connection.execute("DELETE FROM databasechangeloglock")
        connection.execute("INSERT INTO databasechangeloglock VALUES (1, true, %s, %s)", (wall, by))
    context = (
        f"seed {seed}: server {server_zone[0]}, host {host_zone[1]}, written in {writer[0]} "
        f"({wall}), {age} ago, {case}"
    )
    try:
        lock = lock_text(server, 'liquibase_table = "databasechangeloglock"')
        _code, finding = check(tmp_path, lock, PGTZ=server_zone[0], TZ=host_zone[1])
    finally:
        with server.admin() as connection:
            connection.execute("DELETE FROM databasechangeloglock")
    context += f": {finding}"
    held = finding["held"]
    assert held["seconds"] is not None, context
    assert held["seconds"] <= age.total_seconds() + 30, context  # never older than it is
    old = age > timedelta(hours=1)  # past critical_after, and stale_after's default
    expected = {True: "held_too_long", False: "held"}[old]
    if case == "this host, left over":  # no Liquibase here: stale once old, else it may be starting
        expected = "stale" if old else "unknown"
    assert finding["state"] == expected, context
