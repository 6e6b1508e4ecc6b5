"""MySQL/MariaDB user-level locks (GET_LOCK) in a real MariaDB server (Debian's mariadb-server:
mariadb-install-db into a temporary datadir, listening on 127.0.0.1 at a free port and a
private socket, performance_schema on), held by real `mariadb` clients, checked by the CLI."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from buildenv import build_environment
from conftest import Children, require_tool, run_cli, wait_until, write_config
from lockwarden.databases.keys import mysql_lock_names

pymysql = (
    pytest.importorskip("pymysql") if os.environ.get("CI") != "true" else __import__("pymysql")
)

PASSWORD = "monitor-secret-55"
MDL = "--performance-schema-instrument=wait/lock/metadata/sql/mdl=ON"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Mariadb:
    def __init__(self, instrumented: bool = True) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="lockwarden-mariadb-"))
        self.port = free_port()
        self.socket = self.base / "mysqld.sock"
        self.instrumented = instrumented
        self.process: subprocess.Popen[str] | None = None

    def start(self) -> None:
        user = ["--user=mysql"] if os.geteuid() == 0 else []
        if os.geteuid() == 0:
            shutil.chown(self.base, "mysql", "mysql")
        subprocess.run(
            [
                require_tool("mariadb-install-db"),
                "--no-defaults",
                f"--datadir={self.base}/data",
                *user,
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ],
            check=True,
            capture_output=True,
            env=build_environment(),
            timeout=120,
        )
        argv = [require_tool("mariadbd") if shutil.which("mariadbd") else "/usr/sbin/mariadbd"]
        argv += [
            "--no-defaults",
            f"--datadir={self.base}/data",
            *user,
            f"--socket={self.socket}",
            f"--port={self.port}",
            "--bind-address=127.0.0.1",
            "--skip-name-resolve",
            "--performance-schema=ON",
            "--skip-log-bin",
            f"--pid-file={self.base}/pid",
        ]
        if self.instrumented:
            argv.append(MDL)
        self.process = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        assert wait_until(self._ready, timeout=60), "mariadbd did not start"
        with self.root() as session, session.cursor() as cursor:
            cursor.execute("CREATE DATABASE app")
            cursor.execute(f"CREATE USER 'mon'@'%' IDENTIFIED BY '{PASSWORD}'")
            cursor.execute("GRANT PROCESS, SELECT ON *.* TO 'mon'@'%'")

    def _ready(self) -> bool:
        try:
            self.root().close()
            return True
        except pymysql.Error:
            return False

    def root(self) -> Any:
        return pymysql.connect(unix_socket=str(self.socket), user="root", autocommit=True)

    def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.base, ignore_errors=True)


@pytest.fixture(scope="module")
def server() -> Iterator[Mariadb]:
    require_tool("mariadb")
    running = Mariadb()
    try:
        running.start()
        yield running
    finally:
        running.stop()


class Client:
    """A real `mariadb` client over TCP: statements on stdin, `ready` once they have run."""

    def __init__(self, server: Mariadb) -> None:
        argv = [
            require_tool("mariadb"),
            "--no-defaults",
            "-h",
            "127.0.0.1",
            "-P",
            str(server.port),
            "-u",
            "mon",
            "-N",
            "-B",
            "--unbuffered",  # a piped client otherwise holds its answers back
            "app",
        ]
        env = {**os.environ, "MYSQL_PWD": PASSWORD}
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
        self.process.stdin.write(statements + ("\nSELECT 'ready';\n" if wait else "\n"))
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
def clients() -> Iterator[list[Client]]:
    started: list[Client] = []
    try:
        yield started
    finally:
        for client in started:
            client.kill()


def client(server: Mariadb, clients: list[Client]) -> Client:
    started = Client(server)
    clients.append(started)
    return started


def check(
    tmp_path: Path,
    server: Mariadb,
    watch: str,
    extra: str = "",
    password: str = PASSWORD,
    user: str = "mon",
) -> tuple[int, dict[str, Any]]:
    secret = tmp_path / "password"
    secret.write_text(password + "\n")
    config = write_config(
        tmp_path / "config.toml",
        f'[[lock]]\nname = "app-db"\ndatabase = "mysql"\n'
        f'connection = "mysql://{user}@127.0.0.1:{server.port}/app"\n'
        f'password_file = "{secret}"\n{watch}\n{extra}',
    )
    completed = run_cli("--once", "--json", "--config", config, timeout=40)
    assert completed.stdout, completed.stderr
    assert password not in completed.stdout + completed.stderr
    return completed.returncode, json.loads(completed.stdout)["locks"][0]


def waiting(server: Mariadb) -> int:
    with server.root() as session, session.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM performance_schema.metadata_locks "
            "WHERE OBJECT_TYPE = 'USER LEVEL LOCK' AND LOCK_STATUS = 'PENDING'"
        )
        return int(cursor.fetchone()[0])


def test_prisma_get_lock_names_the_connection_the_local_client_and_the_waiter(
    server: Mariadb, clients: list[Client], tmp_path: Path
) -> None:
    holder = client(server, clients)
    holder.run("SELECT GET_LOCK('prisma_migrate', 0);")
    waiter = client(server, clients)
    waiter.run("SELECT GET_LOCK('prisma_migrate', 30);", wait=False)
    assert wait_until(lambda: waiting(server) == 1, timeout=10)

    code, finding = check(tmp_path, server, 'advisory_key = "prisma"')
    assert (code, finding["state"], finding["format"]) == (0, "held", "mysql-user-lock"), finding
    assert finding["holders"][0]["pid"] == holder.pid
    assert "user lock 'prisma_migrate' (prisma)" in finding["reason"]
    assert finding["holders"][0]["name"] == "mariadb"
    assert [each["pid"] for each in finding["waiters"]] == [waiter.pid]
    assert finding["action"] is None  # within its budget: nothing to do

    time.sleep(1.1)  # past a 1s budget
    budget = 'warn_after = "1s"\ncritical_after = "1s"'
    code, finding = check(tmp_path, server, f'advisory_key = "prisma"\n{budget}')
    assert (code, finding["state"]) == (2, "held_too_long"), finding
    assert finding["action"]["line"].startswith(f"kill {holder.pid} (else, on the server: KILL ")
    assert "KILL QUERY" not in finding["action"]["line"]


def test_an_idle_holder_is_held_at_least_since_its_last_command(
    server: Mariadb, clients: list[Client], tmp_path: Path
) -> None:
    holder = client(server, clients)
    holder.run("SELECT GET_LOCK('deploy-lock', 0);")
    budget = 'warn_after = "1s"\ncritical_after = "2s"\n'
    assert wait_until(  # idle for 2s and more: critical, from a lower bound
        lambda: check(tmp_path, server, 'lock_name = "deploy-lock"', budget)[0] == 2,
        timeout=10,
        interval=0.5,
    )
    code, finding = check(tmp_path, server, 'lock_name = "deploy-lock"', budget)
    assert (code, finding["held"]["bound"]) == (2, "at_least"), finding
    holder.kill()
    assert wait_until(
        lambda: check(tmp_path, server, 'lock_name = "deploy-lock"')[1]["state"] == "free",
        timeout=15,
        interval=0.3,
    )


def test_a_holder_metadata_locks_does_not_show_is_named_by_the_server_never_free(
    server: Mariadb, clients: list[Client], tmp_path: Path
) -> None:
    """performance_schema.metadata_locks never lists a GET_LOCK taken while the
    global_instrumentation consumer was off (a DBA's runtime switch), even once it is back on:
    the lock is the server's all the same (IS_USED_LOCK), so it is held by its holder, never
    free."""
    consumer = "UPDATE performance_schema.setup_consumers SET ENABLED = %s WHERE NAME = %s"
    with server.root() as session, session.cursor() as cursor:
        cursor.execute(consumer, ("NO", "global_instrumentation"))
        try:
            holder = client(server, clients)
            holder.run("SELECT GET_LOCK('unrecorded-job', 0);")
        finally:
            cursor.execute(consumer, ("YES", "global_instrumentation"))

    code, finding = check(tmp_path, server, 'lock_name = "unrecorded-job"')
    assert (code, finding["state"]) == (0, "held"), finding
    assert [each["pid"] for each in finding["holders"]] == [holder.pid]


def test_a_role_without_process_cannot_see_the_holder_unknown_never_free(
    server: Mariadb, clients: list[Client], tmp_path: Path
) -> None:
    """Without PROCESS a role sees only its own connections in PROCESSLIST, so another
    user's holder drops out of what metadata_locks is joined to: the lock is unknown, naming
    the right it lacks, never free."""
    with server.root() as session, session.cursor() as cursor:
        cursor.execute(f"CREATE USER IF NOT EXISTS 'blind'@'%' IDENTIFIED BY '{PASSWORD}'")
        cursor.execute("GRANT SELECT ON *.* TO 'blind'@'%'")
    holder = client(server, clients)  # as mon, another user
    holder.run("SELECT GET_LOCK('unseen-job', 0);")

    code, finding = check(tmp_path, server, 'lock_name = "unseen-job"', user="blind")
    assert (code, finding["state"], finding["unknown_cause"]) == (3, "unknown", "database")
    assert "PROCESS" in finding["reason"], finding
    holder.kill()
    assert wait_until(  # released: free again, for this role too
        lambda: (
            check(tmp_path, server, 'lock_name = "unseen-job"', user="blind")[1]["state"] == "free"
        ),
        timeout=15,
        interval=0.3,
    )


def test_wrong_password_is_unknown_and_not_printed(server: Mariadb, tmp_path: Path) -> None:
    code, finding = check(tmp_path, server, 'lock_name = "x"', password="wrong-pass-98765")
    assert (code, finding["state"], finding["unknown_cause"]) == (3, "unknown", "database")


def test_server_without_the_metadata_lock_instrument_is_unknown_never_free(
    tmp_path: Path,
) -> None:
    require_tool("mariadb")
    bare = Mariadb(instrumented=False)
    try:
        bare.start()
        code, finding = check(tmp_path, bare, 'advisory_key = "flyway"')
    finally:
        bare.stop()
    assert (code, finding["state"], finding["unknown_cause"]) == (3, "unknown", "database")
    assert "wait/lock/metadata/sql/mdl=ON" in finding["reason"]  # the setting to turn on


@pytest.mark.parametrize("tool", ["rails", "flyway", "golang-migrate", "sqitch"])
def test_a_tools_lock_of_another_database_on_the_server_is_not_this_ones(
    server: Mariadb, clients: list[Client], tmp_path: Path, tool: str
) -> None:
    """A MySQL user lock is the server's: another application's migration (database `blog`)
    takes the same tool's lock under its own database's name, and must not page as `app`'s,
    with the other application's process to kill."""
    with server.root() as session, session.cursor() as cursor:
        cursor.execute("CREATE DATABASE IF NOT EXISTS blog")
    [blog_lock] = [name for name, each in mysql_lock_names("blog").items() if each == tool]
    [app_lock] = [name for name, each in mysql_lock_names("app").items() if each == tool]
    other = client(server, clients)
    other.run(f"SELECT GET_LOCK('{blog_lock}', 0);")

    code, finding = check(tmp_path, server, f'advisory_key = "{tool}"')
    if tool == "flyway":  # Flyway's name hides its table: another table here is possible
        assert (code, finding["state"]) == (3, "unknown"), finding
        assert blog_lock in finding["reason"] and "lock_name" in finding["reason"]
    else:
        assert (code, finding["state"]) == (0, "free"), finding

    ours = client(server, clients)
    ours.run(f"SELECT GET_LOCK('{app_lock}', 0);")
    code, finding = check(tmp_path, server, f'advisory_key = "{tool}"')
    assert finding["state"] == "held", finding
    assert [holder["pid"] for holder in finding["holders"]] == [ours.pid]
    assert f"({tool})" in finding["reason"]


def test_a_preset_computed_from_the_database_needs_the_connection_to_name_it(
    server: Mariadb, tmp_path: Path
) -> None:
    secret = tmp_path / "password"
    secret.write_text(PASSWORD + "\n")
    config = write_config(
        tmp_path / "config.toml",
        f'[[lock]]\nname = "app-db"\ndatabase = "mysql"\n'
        f'connection = "mysql://mon@127.0.0.1:{server.port}"\n'
        f'password_file = "{secret}"\nadvisory_key = "rails"\n',
    )
    completed = run_cli("--once", "--json", "--config", config, timeout=40)
    [finding] = json.loads(completed.stdout)["locks"]
    assert (completed.returncode, finding["state"]) == (3, "unknown"), finding
    assert "computed from the database" in finding["reason"]


def test_sqitch_running_its_change_in_a_child_mysql_client_is_stopped_whole(
    server: Mariadb, tmp_path: Path, children: Children
) -> None:
    """sqitch takes GET_LOCK('sqitch working on app') on its own connection and runs each change
    through a child `mysql` client with a connection of its own: the finding lists the child,
    and the action ends the child's connection on the server before anything else (a
    statement runs on after its client is killed)."""
    sqitch = require_tool("sqitch")
    with server.root() as session, session.cursor() as cursor:
        cursor.execute(f"CREATE USER IF NOT EXISTS 'migrator'@'%' IDENTIFIED BY '{PASSWORD}'")
        cursor.execute("GRANT ALL ON *.* TO 'migrator'@'%'")
    project = tmp_path / "flipr"
    project.mkdir()
    env = {
        **build_environment(),
        "SQITCH_FULLNAME": "Test",
        "SQITCH_EMAIL": "test@example.org",
        "SQITCH_USER_CONFIG": str(tmp_path / "sqitch-user.conf"),
        "SQITCH_PASSWORD": PASSWORD,
    }
    for argv in (["init", "flipr", "--engine", "mysql"], ["add", "slow", "-n", "a slow change"]):
        subprocess.run([sqitch, *argv], cwd=project, env=env, check=True, capture_output=True)
    (project / "deploy" / "slow.sql").write_text("SELECT SLEEP(120);\n")
    target = f"db:mysql://migrator@127.0.0.1:{server.port}/app"
    deploy = children.start([sqitch, "deploy", target], cwd=project, env=env)

    def change_running() -> list[int]:
        with server.root() as session, session.cursor() as cursor:
            cursor.execute(
                "SELECT ID FROM information_schema.PROCESSLIST WHERE INFO LIKE 'SELECT SLEEP(120)%'"
            )
            return [row[0] for row in cursor.fetchall()]

    assert wait_until(lambda: bool(change_running()), timeout=60), deploy.stderr
    [child] = [
        c.pid for c in psutil.Process(deploy.pid).children() if c.name() in ("mysql", "mariadb")
    ]
    children.track(child)
    _code, first = check(tmp_path, server, 'advisory_key = "sqitch"')  # the default budget
    assert first["state"] == "held", first
    assert [holder["pid"] for holder in first["holders"]] == [deploy.pid, child]
    time.sleep(1.5)
    budget = 'warn_after = "1s"\ncritical_after = "1s"'
    code, finding = check(tmp_path, server, f'advisory_key = "sqitch"\n{budget}')
    assert (code, finding["state"]) == (2, "held_too_long"), finding
    [connection] = change_running()
    line = finding["action"]["line"]
    assert line.startswith(f"on the server: KILL {connection}; then kill {deploy.pid} {child} "), (
        line
    )
