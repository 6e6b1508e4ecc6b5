"""MySQL/MariaDB user-level locks (GET_LOCK) in a real MariaDB server (Debian's mariadb-server:
mariadb-install-db into a temporary datadir, listening on 127.0.0.1 at a free port and a
private socket, performance_schema on), held by real `mariadb` clients, checked by the CLI."""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from buildenv import build_environment
from conftest import (
    Children,
    cli_env,
    require_tool,
    run_cli,
    validate_report,
    wait_until,
    write_config,
)
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
    """`prefix`: what the server runs under (nsenter into a network namespace)."""

    def __init__(self, instrumented: bool = True, prefix: tuple[str, ...] = ()) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="lockwarden-mariadb-"))
        self.port = free_port()
        self.socket = self.base / "mysqld.sock"
        self.instrumented = instrumented
        self.prefix = prefix
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
        self.launch()
        with self.root() as session, session.cursor() as cursor:
            cursor.execute("CREATE DATABASE app")
            cursor.execute(f"CREATE USER 'mon'@'%' IDENTIFIED BY '{PASSWORD}'")
            cursor.execute("GRANT PROCESS, SELECT ON *.* TO 'mon'@'%'")

    def launch(self) -> None:
        user = ["--user=mysql"] if os.geteuid() == 0 else []
        argv = [*self.prefix]
        argv.append(require_tool("mariadbd") if shutil.which("mariadbd") else "/usr/sbin/mariadbd")
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

    def restart(self) -> None:
        """The same server stopped (cleanly, by its PID) and started again on its data."""
        assert self.process is not None
        self.process.terminate()
        self.process.wait(timeout=60)
        if self.process.stderr is not None:
            self.process.stderr.close()
        self.launch()

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
            *server.prefix,
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


def connection_id(server: Mariadb) -> int:
    with server.root() as session, session.cursor() as cursor:
        cursor.execute("SELECT CONNECTION_ID()")
        return int(cursor.fetchone()[0])


def test_a_restarted_servers_session_with_an_old_ones_id_is_a_new_hold(
    clients: list[Client], tmp_path: Path
) -> None:
    """MySQL counts connection ids from 1 again when it restarts: a lock taken just now by a
    new session that drew the id of one a run saw holding it before the restart is held since
    now, not since that run (a page for a lock held a moment)."""
    require_tool("mariadb")
    server = Mariadb()
    try:
        server.start()
        while connection_id(server) < 20:  # ids a fresh start passes again before the holder's
            pass
        before = client(server, clients)
        before.run("SELECT GET_LOCK('nightly', 0);")
        state = f'[state]\npath = "{tmp_path}/state/state.jsonl"\n'
        budget = 'warn_after = "3s"\ncritical_after = "3s"\n'
        _code, first = check(tmp_path, server, 'lock_name = "nightly"', budget + state)
        assert first["state"] == "held", first
        seen = time.monotonic()
        reused, _port = holding_connection(server, "nightly")
        before.kill()
        server.restart()
        while connection_id(server) < reused - 1:
            pass
        time.sleep(max(0.0, seen + 4 - time.monotonic()))  # the first sighting past the budget
        after = client(server, clients)
        taken = time.monotonic()
        after.run("SELECT GET_LOCK('nightly', 0);")
        assert holding_connection(server, "nightly")[0] == reused  # the old session's id
        _code, finding = check(tmp_path, server, 'lock_name = "nightly"', budget + state)
        checked = time.monotonic()
    finally:
        server.stop()
    assert [each["pid"] for each in finding["holders"]] == [after.pid]
    # Dated from the new session (its last command), never from the first sighting, which is
    # at least 4 s older than the lock. On a loaded host the check itself may take past the 3 s
    # budget, so the state is not asserted, only that the hold is no older than the lock.
    assert finding["held"]["seconds"] <= checked - taken + 1, finding


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


NETWORK_NAMESPACE = """
import fcntl, socket, struct, time
# A new network namespace's loopback is down: SIOCGIFFLAGS, then SIOCSIFFLAGS with IFF_UP.
probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
flags = struct.unpack("16sH", fcntl.ioctl(probe, 0x8913, struct.pack("16sH", b"lo", 0))[:18])[1]
fcntl.ioctl(probe, 0x8914, struct.pack("16sH", b"lo", flags | 1))
print("ready", flush=True)
time.sleep(600)
"""

LISTENERS = """
import socket, sys, threading, time
def serve(server, accepted):
    while True:
        accepted.append(server.accept()[0])
accepted = []
for end in sys.argv[1:]:
    address, port = end.rsplit(":", 1)
    server = socket.create_server((address, int(port)))
    threading.Thread(target=serve, args=(server, accepted), daemon=True).start()
print("ready", flush=True)
time.sleep(600)
"""

OTHER_CLIENT = """
import socket, sys, time
address, port = sys.argv[1].rsplit(":", 1)
connection = socket.create_connection((address, int(port)))
print(connection.getsockname()[1], flush=True)
time.sleep(600)
"""


@pytest.fixture(scope="module")
def isolated() -> Iterator[tuple[Mariadb, tuple[str, ...]]]:
    """A MariaDB alone in a network namespace of its own, whose client port range each test
    may narrow; what runs there runs under the prefix given with it."""
    require_tool("mariadb")
    keeper = subprocess.Popen(
        [require_tool("unshare"), "--net", sys.executable, "-c", NETWORK_NAMESPACE],
        stdout=subprocess.PIPE,
        text=True,
    )
    running: Mariadb | None = None
    try:
        assert keeper.stdout is not None and keeper.stdout.readline().strip() == "ready"
        prefix = (require_tool("nsenter"), f"--net=/proc/{keeper.pid}/ns/net")
        running = Mariadb(prefix=prefix)
        running.start()
        yield running, prefix
    finally:
        if running is not None:
            running.stop()
        keeper.kill()
        keeper.wait(timeout=10)
        if keeper.stdout is not None:
            keeper.stdout.close()


def check_inside(prefix: tuple[str, ...], config: str) -> dict[str, Any]:
    """`--once --json` run in the namespace (its /proc/net/tcp is the namespace's)."""
    completed = subprocess.run(
        [*prefix, sys.executable, "-m", "lockwarden", "--once", "--json", "--config", config],
        capture_output=True,
        text=True,
        timeout=60,
        env=cli_env(),
        check=False,
    )
    assert completed.stdout, completed.stderr
    return validate_report(json.loads(completed.stdout))


def holding_connection(server: Mariadb, name: str) -> tuple[int, int]:
    """The connection id that holds `name`, and its client port, as the server knows them."""
    with server.root() as session, session.cursor() as cursor:
        cursor.execute(
            "SELECT ID, HOST FROM information_schema.PROCESSLIST WHERE ID = IS_USED_LOCK(%s)",
            (name,),
        )
        [(connection, host)] = cursor.fetchall()
    return int(connection), int(host.rpartition(":")[2])


def test_a_holders_client_port_another_programs_connection_shares_names_no_innocent(
    isolated: tuple[Mariadb, tuple[str, ...]],
    clients: list[Client],
    children: Children,
    tmp_path: Path,
) -> None:
    """Linux lets connections to different destinations leave from one local port, so a
    session's client end (address, port) may also be another program's connection here: a
    client of another service, or of another server on the same port at another address. A
    randomized differential in a network namespace whose client port range is narrowed to
    force that: holders (real `mariadb` clients) of GET_LOCKs and other programs' connections
    in random numbers. A holder is named only when no other connection from its client end
    leads to the server's port (then exactly it), and nobody when one does; no other program
    is ever named nor told `kill`."""
    server, prefix = isolated
    seed = int(os.environ.get("LOCKWARDEN_TEST_SEED", random.randrange(1 << 32)))
    rng = random.Random(seed)
    others = ["127.0.0.1:15001", "127.0.0.1:15002", f"127.0.0.2:{server.port}"]
    children.start([*prefix, sys.executable, "-c", LISTENERS, *others], ready="ready")
    secret = tmp_path / "password"
    secret.write_text(PASSWORD + "\n")
    for round_number in range(5):
        ports = rng.choice((1, 2, 4))  # connect() uses an even number of a range's ports
        first = 20000 + 10 * round_number  # a range of its own: no TIME_WAIT from a round before
        subprocess.run(
            [*prefix, require_tool("sysctl"), "-q", "-w",
             f"net.ipv4.ip_local_port_range={first} {first + ports - 1}"],
            check=True,
        )  # fmt: skip
        holders = []
        for index in range(rng.randint(1, ports)):
            name = f"deploy-{round_number}-{index}"
            holder = client(server, clients)
            holder.run(f"SELECT GET_LOCK('{name}', 0);")
            holders.append((name, holder, *holding_connection(server, name)))
        innocents: list[tuple[int, int, str]] = []  # pid, local port, destination
        started: list[subprocess.Popen[str]] = []
        for _ in range(rng.randint(1, 4)):
            destination = rng.choice(others)
            if sum(each[2] == destination for each in innocents) == ports:
                continue  # every local port already leads there
            other = children.start([*prefix, sys.executable, "-c", OTHER_CLIENT, destination])
            assert other.stdout is not None
            started.append(other)
            innocents.append((other.pid, int(other.stdout.readline()), destination))
        time.sleep(1.2)  # every holder idle past its budget: the action is given
        config = write_config(
            tmp_path / "config.toml",
            f'[state]\npath = "{tmp_path}/state/state.jsonl"\n'
            + "".join(
                f'[[lock]]\nname = "{name}"\ndatabase = "mysql"\n'
                f'connection = "mysql://mon@localhost/app?unix_socket={server.socket}"\n'
                f'password_file = "{secret}"\nlock_name = "{name}"\n'
                'warn_after = "1s"\ncritical_after = "1s"\n'
                for name, *_ in holders
            ),
        )
        findings = {each["name"]: each for each in check_inside(prefix, config)["locks"]}
        context = f"seed {seed} round {round_number}: innocents {innocents}"
        innocent_pids = {str(pid) for pid, _port, _to in innocents}
        for name, holder, connection, port in holders:
            finding = findings[name]
            shared = [
                pid
                for pid, local, to in innocents
                if local == port and to.endswith(f":{server.port}")
            ]
            expected = None if shared else holder.pid
            assert finding["state"] == "held_too_long", (context, finding)
            assert [each["pid"] for each in finding["holders"]] == [expected], (context, finding)
            line = finding["action"]["line"]
            assert not innocent_pids & set(line.replace("(", " ").split()), (context, line)
            if expected is None:
                assert line == f"on the server: KILL {connection}", (context, line)
                assert "which one is the session's is not known" in finding["note"], context
            else:
                assert line.startswith(f"kill {holder.pid} (else, on the server: KILL "), context
        for _name, holder, *_ in holders:
            holder.kill()
        for other in started:  # by its Popen: reaped only here, so its PID is still its own
            other.kill()
            other.wait(timeout=10)


NAME_SEEDS = range(8)


@pytest.mark.parametrize("seed", NAME_SEEDS)
def test_a_lock_name_past_64_characters_is_told_from_its_cut_neighbours(
    server: Mariadb, clients: list[Client], tmp_path: Path, seed: int
) -> None:
    """MariaDB takes GET_LOCK names longer than 64 characters, but metadata_locks lists each
    cut to its first 64: a name of exactly 64, and the longer names that begin with it, all
    read the same there. A randomized differential: real clients hold and wait for names of
    one 64-character stem (the stem itself, and longer names past it), in random subsets; the
    watched one's holder is the client that holds exactly it (or none: free), and its waiters
    exactly those waiting for it; the other names' clients are never named."""
    rng = random.Random(seed)
    stem = f"s{seed}-" + "".join(rng.choice("abcdefghij") for _ in range(64))
    stem = stem[:64]
    names = [stem, f"{stem}-blue", f"{stem}-green", f"{stem}-blue-2"]
    holders: dict[str, Client] = {}
    waiters: dict[str, list[Client]] = {}
    pending = 0
    for name in names:
        if rng.random() < 0.6:
            holders[name] = client(server, clients)
            holders[name].run(f"SELECT GET_LOCK('{name}', 0);")
            for _ in range(rng.randint(0, 2)):
                waiter = client(server, clients)
                waiter.run(f"SELECT GET_LOCK('{name}', 60);", wait=False)
                waiters.setdefault(name, []).append(waiter)
                pending += 1
                assert wait_until(lambda n=pending: waiting(server) == n, timeout=10)
    watched = rng.choice(names)
    _code, finding = check(tmp_path, server, f'lock_name = "{watched}"')
    scenario = f"seed {seed}: watched {watched[60:]!r}, held {[n[60:] for n in holders]}"
    queued = {name[60:]: len(each) for name, each in waiters.items()}
    scenario += f", waiting {queued}: {finding['reason']}"
    holder = holders.get(watched)
    assert finding["state"] == ("held" if holder else "free"), scenario
    assert [each["pid"] for each in finding["holders"]] == ([holder.pid] if holder else []), (
        scenario
    )
    expected = sorted(each.pid for each in waiters.get(watched, []))
    assert sorted(each["pid"] for each in finding["waiters"]) == expected, scenario
    for each in clients:  # before the next seed: their locks and waits end with them
        each.kill()
    assert wait_until(lambda: waiting(server) == 0, timeout=10)
