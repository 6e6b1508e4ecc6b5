"""What one PostgreSQL lock check costs (connect + queries + judging), against a floor
measured in the same run: a bare psycopg connect, `SELECT 1` and close to the same server.

    PYTHONPATH=src python benchmarks/bench_postgres.py [ROUNDS]

It starts its own server (Debian's postgresql: initdb in a temporary directory, a private unix
socket, no TCP), holds Prisma's advisory lock from one session (so the check finds a holder
and looks for its client on this host), measures floor and check alternately, then stops the
server and the session by PID. Run as root it runs the server as the `postgres` user.
"""

from __future__ import annotations

import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src")
sys.path.insert(0, SRC)

import psycopg  # noqa: E402

from lockwarden.config import LockConfig, parse  # noqa: E402
from lockwarden.databases.check import ask_server  # noqa: E402
from lockwarden.pipeline import policy_for  # noqa: E402
from lockwarden.procfs.reader import HostReader, Request, wall_clock  # noqa: E402

PORT = 54339


def postgres_program(name: str) -> str:
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name))
    return str(versions[-1] / name)


def as_server_user() -> dict[str, str]:
    return {"user": "postgres", "group": "postgres"} if os.geteuid() == 0 else {}


def start_server(base: Path) -> subprocess.Popen[bytes]:
    if os.geteuid() == 0:
        shutil.chown(base, "postgres", "postgres")
    data = base / "data"
    subprocess.run(
        [postgres_program("initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync"],
        check=True,
        capture_output=True,
        **as_server_user(),  # type: ignore[arg-type]
    )
    argv = [postgres_program("postgres"), "-D", str(data), "-k", str(base), "-p", str(PORT)]
    server = subprocess.Popen(
        [*argv, "-c", "listen_addresses="], stderr=subprocess.DEVNULL, **as_server_user()
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            psycopg.connect(dsn(base), connect_timeout=2).close()
            return server
        except psycopg.OperationalError:
            time.sleep(0.1)
    raise SystemExit("postgres did not start")


def dsn(base: Path) -> str:
    return f"host={base} port={PORT} dbname=postgres user=postgres"


def median_ms(action: Callable[[], object], rounds: int) -> list[float]:
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        action()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def main(rounds: int) -> None:
    base = Path(tempfile.mkdtemp(prefix="lockwarden-bench-pg-"))
    server = start_server(base)
    holder = psycopg.connect(dsn(base), autocommit=True)
    try:
        holder.execute("SELECT pg_advisory_lock(72707369)")
        lock = lock_config(base)
        policy = policy_for(lock)

        def floor() -> None:
            with psycopg.connect(dsn(base), connect_timeout=3) as connection:
                connection.execute("SELECT 1").fetchone()

        host = HostReader(wall_clock)
        host.capture(Request())  # a run takes it anyway: not the database check's cost

        def check() -> None:
            # the server asked, then what its answer names read by a capture, then judged
            claim = ask_server(lock, host.hostname)
            snapshot = host.capture(Request(read_locks=False, clients=claim.clients))
            finding = claim.judge(snapshot, policy, datetime.now(UTC), None, False)
            assert finding.state.value == "held", finding.reason

        check()  # warm-up: imports, the first connection
        floors: list[float] = []
        values: list[float] = []
        for _ in range(rounds):  # alternated, so drift hits both alike
            floors += median_ms(floor, 1)
            values += median_ms(check, 1)
        floor_ms, value_ms = statistics.median(floors), statistics.median(values)
        print("figure  value  floor  ratio  delta")
        print(
            f"one PostgreSQL check (advisory lock held, client looked up)  {value_ms:.1f} ms  "
            f"{floor_ms:.1f} ms (psycopg connect + SELECT 1)  {value_ms / floor_ms:.2f}x  "
            f"+{value_ms - floor_ms:.1f} ms  ({rounds} rounds, medians)"
        )
    finally:
        holder.close()
        server.send_signal(signal.SIGINT)
        server.wait(timeout=30)
        shutil.rmtree(base, ignore_errors=True)


def lock_config(base: Path) -> LockConfig:
    document = {
        "lock": [
            {
                "name": "bench-db",
                "database": "postgresql",
                "connection": dsn(base),
                "advisory_key": "prisma",
            }
        ]
    }
    return parse(document, None).locks[0]


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 30)
