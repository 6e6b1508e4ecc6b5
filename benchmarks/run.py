"""Measure what a `lockwarden --once` costs against a floor measured in the same run.

    python benchmarks/run.py [--runs 10] [--only WORD]

Prints one table, one row per performance target:

    figure  value  floor  ratio  target  ok|OVER

and exits 0 when every row is ok, 1 when a row is OVER its target, 2 when a row could not be
measured (and none is OVER).

Every value and floor is the median of --runs (at least 10; the quiet rows, three times as
many) runs of a fresh process, forked and exec'd by a small launcher and reaped with wait4,
which returns the wall time and the peak RSS of exactly that child. Floors and values are run
alternately so that drift hits both alike; `lslocks`, whose floor is a hundred times the value
it is compared with and takes a minute, runs once. The benchmark makes its own locks and
holders in a temporary directory: holder processes with real flock(2) locks, owner-record
directories, 10,000 kernel locks held by 4 processes, 1,000 sleeping processes, 10,000
processes with 50 open files each (one small parent that forks), an HTTP receiver on 127.0.0.1
for the alert. Every process it starts is ended by PID when it ends (finally and atexit); the
forked ones also exit by themselves when their parent goes. It takes about 5 minutes on a
2-core machine, most of it in `lslocks` with 10,000 locks on the host and in walking the
descriptors of 10,000 processes.

Children run with this checkout's `src/` first on the path and compiled bytecode cached in the
temporary directory (as an installed package has), so the first, compiling run is a warm-up
and is not counted.
"""

from __future__ import annotations

import argparse
import atexit
import http.server
import json
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PYTHON = sys.executable
CHILD_TIMEOUT_S = 120.0
HOST_LOCKS = 10_000
HOST_LOCK_HOLDERS = 4
SLEEPERS = 1_000
CONFIGURED_MANY = 1_000
Record = dict[str, Any]
JOURNAL_RECORDS = 50_000
ALERT_LOCK = "bench-alert"
QUIET_FLOOR = "import psutil, tomllib, json, logging, dataclasses"
# The quiet rows take 3x --runs runs: each costs ~0.15 s, and medians of 10 of a ~70 ms floor
# moved by a fifth between the two quiet rows of one run on a shared VM (59.5 and 74.1 ms).
QUIET_RUNS_FACTOR = 3
QUIET_WALL_LIMIT = 2.5  # the quiet run's wall time, at most this times QUIET_FLOOR's (issue 28)
QUIET_RSS_LIMIT = 1.3
LSLOCKS_RUNS = 1  # a minute a run at 10,000 locks on a 2-core machine
DEFAULTS_TABLE = '[defaults]\nwarn_after = "1h"\ncritical_after = "2h"\n\n'

HOST_PROCESSES = 10_000
DESCRIPTORS_EACH = 50
FORKED_BYTES_EACH = 400 * 1024  # measured ~280 KiB of memory per forked child, with room
FORKED_EXIT_S = 60.0
# A bare walk reads one link per descriptor; naming a holder needs the inode of every
# descriptor that is a file, which only its fdinfo tells without a stat that could hang (an
# open, a read and a close: about 1.8 readlinks of kernel time here). The target is 1.5x of
# the walk (issue 28); what the run adds to the walk is printed with the row.
DESCRIPTORS_LIMIT = 1.5
TIMER_RUNS_A_DAY = 24 * 60  # the shipped timer runs every minute
BLOCKED_CHECK_LIMIT_MS = 20
WHY_LIMIT = 2.0
# Says "ready" before it blocks in flock(2) on argv[1] (the benchmark waits for the block).
WAITER = """
import fcntl, sys
handle = open(sys.argv[1], "a")
print("ready", flush=True)
fcntl.flock(handle, fcntl.LOCK_EX)
"""
DESCRIPTORS_RUNS = 5  # each run takes seconds at this size; 3 medians swung by a third

FLOCK_MANY = """
import fcntl, os, resource, sys, time
directory, prefix = sys.argv[1], sys.argv[2]
first, count = int(sys.argv[3]), int(sys.argv[4])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, count + 64)), hard))
descriptors = []
for number in range(first, first + count):
    path = os.path.join(directory, f"{prefix}{number}")
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    descriptors.append(descriptor)
print("ready", flush=True)
time.sleep(3600)
"""

OWNER_RECORD = """
import json, os, socket, sys, time
for lock, started in zip(sys.argv[1::2], sys.argv[2::2]):
    os.mkdir(lock)
    record = {"pid": os.getpid(), "role": "bench-holder", "host": socket.gethostname(),
              "startedAt": started}
    with open(os.path.join(lock, "owner.json"), "w") as handle:
        json.dump(record, handle)
print("ready", flush=True)
time.sleep(3600)
"""


FORKER = """
import fcntl, gc, os, sys
directory, lock = sys.argv[1], sys.argv[2]
count, each, holder_at = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
# Opened without O_CLOEXEC matters not: the children fork and never exec.
files = [os.open(os.path.join(directory, f"open-{n}"), os.O_RDONLY | os.O_CREAT, 0o644)
         for n in range(each)]
release, keep = os.pipe()  # every child waits for EOF on `release`: it comes when we go
gc.disable()
gc.freeze()  # children touch no collector state, so their pages stay shared
children = []
try:
    for number in range(count):
        pid = os.fork()
        if pid == 0:
            os.close(keep)
            if number == holder_at:  # its own open file description, so it alone holds
                fcntl.flock(os.open(lock, os.O_RDWR), fcntl.LOCK_EX)
            os.read(release, 1)
            os._exit(0)
        children.append(pid)
    probe = os.open(lock, os.O_RDWR)
    while True:  # ready once the holder has its lock
        try:
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(probe, fcntl.LOCK_UN)
        except BlockingIOError:
            break
    os.close(probe)
    print("ready", children[holder_at], flush=True)
    sys.stdin.read()  # until the benchmark closes our stdin, or dies
finally:
    os.close(keep)
    for pid in children:
        os.waitpid(pid, 0)
"""

PROC_FD_WALK = """
import os
for entry in os.listdir("/proc"):
    if entry.isdigit():
        links = f"/proc/{entry}/fd/"
        try:
            names = os.listdir(links)
        except OSError:
            continue
        for name in names:
            try:
                os.readlink(links + name)
            except OSError:
                pass
"""


@dataclass(frozen=True)
class Sample:
    wall_ms: float
    rss_kb: int
    cpu_ms: float = 0.0


@dataclass(frozen=True)
class Row:
    figure: str
    value: str
    floor: str
    ratio: str
    target: str
    verdict: str


@dataclass
class Processes:
    """Every process the benchmark starts, killed by PID at the end (finally and atexit)."""

    pids: list[int] = field(default_factory=list)
    popens: dict[int, subprocess.Popen[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        atexit.register(self.stop_all)

    def adopt(self, process: subprocess.Popen[str]) -> None:
        self.pids.append(process.pid)
        self.popens[process.pid] = process

    def holder(self, code: str, *args: str) -> int:
        """A python child that takes its locks, says `ready`, and sleeps."""
        with _signals_held():
            proc = subprocess.Popen(
                [PYTHON, "-c", textwrap.dedent(code), *args],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            self.adopt(proc)
        assert proc.stdout is not None and proc.stderr is not None
        line = proc.stdout.readline().strip()
        proc.stdout.close()
        if line != "ready":
            raise RuntimeError(f"lock holder did not get ready: {line!r} {proc.stderr.read()}")
        proc.stderr.close()
        return proc.pid

    def sleepers(self, count: int) -> list[int]:
        """`count` idle processes; each PID is registered as soon as it exists, so an
        interruption halfway leaves none behind."""
        sleep = shutil.which("sleep") or "/bin/sleep"
        started: list[int] = []
        with _signals_held():
            for _ in range(count):
                pid = os.posix_spawn(
                    sleep, [sleep, "3600"], os.environ, file_actions=_quiet_actions()
                )
                self.pids.append(pid)
                started.append(pid)
        settle(started)
        return started

    def stop(self, pids: Sequence[int]) -> None:
        for pid in pids:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in pids:
            popen = self.popens.pop(pid, None)
            if popen is not None:
                popen.wait()
                for stream in (popen.stdin, popen.stdout, popen.stderr):
                    if stream is not None:
                        stream.close()
                continue
            with suppress(ChildProcessError):
                os.waitpid(pid, 0)
        self.pids = [pid for pid in self.pids if pid not in set(pids)]

    def stop_all(self) -> None:
        self.stop(list(self.pids))


SETTLE_S = 30.0


def settle(pids: Sequence[int]) -> None:
    """Wait until every one of these processes sleeps: a run timed while a thousand new
    processes still load their libraries would measure their start-up, not the host."""
    deadline = time.monotonic() + SETTLE_S
    waiting = list(pids)
    while waiting:
        waiting = [pid for pid in waiting if _state(pid) not in ("S", "")]
        if waiting and time.monotonic() > deadline:
            raise RuntimeError(f"{len(waiting)} started processes did not go to sleep")
        if waiting:
            time.sleep(0.01)


def _state(pid: int) -> str:
    """The state letter of /proc/PID/stat; empty when the process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat[stat.rindex(")") + 2 :][:1]


@contextmanager
def _signals_held() -> Iterator[None]:
    """Hold SIGTERM and SIGINT between starting a process and registering its PID."""
    held = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, held)


def _quiet_actions() -> list[tuple[int, int, str, int, int]]:
    return [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
        (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
    ]


LAUNCHER = """
import json, os, signal, sys, time
signal.signal(signal.SIGALRM, lambda *_: os.kill(child, signal.SIGKILL))
for line in sys.stdin:
    request = json.loads(line)
    started = time.perf_counter_ns()
    child = os.fork()
    if child == 0:
        try:
            null = os.open(os.devnull, os.O_RDWR)
            errors = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(null, 0)
            os.dup2(null, 1)
            os.dup2(errors, 2)
            os.execve(request["argv"][0], request["argv"], request["env"])
        finally:
            os._exit(127)
    signal.alarm(request["timeout"])
    _, status, usage = os.wait4(child, 0)
    signal.alarm(0)
    wall_ns = time.perf_counter_ns() - started
    report = {"wall_ns": wall_ns, "maxrss_kb": usage.ru_maxrss,
              "cpu_s": usage.ru_utime + usage.ru_stime,
              "code": os.waitstatus_to_exitcode(status)}
    print(json.dumps(report), flush=True)
"""


@dataclass
class Launcher:
    """A small process that forks and execs every measured command and reaps it with wait4.

    Linux counts the memory of the process that called execve in the new program's peak RSS
    (ru_maxrss), so a command spawned from the benchmark itself would report at least the
    benchmark's own size. This launcher is a bare `python -S -I` of about 8 MB, below any
    Python program it measures, and wall time is taken around fork and wait4 inside it.
    """

    process: subprocess.Popen[str]

    @classmethod
    def start(cls, processes: Processes) -> Launcher:
        process = subprocess.Popen(
            [PYTHON, "-S", "-I", "-c", textwrap.dedent(LAUNCHER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        processes.adopt(process)
        return cls(process)

    def run(
        self, argv: Sequence[str], env: dict[str, str], stderr_path: str
    ) -> tuple[float, int, int, float]:
        """Wall ms, peak RSS in KB, exit code and CPU ms (user and system) of one run."""
        assert self.process.stdin is not None and self.process.stdout is not None
        request = {
            "argv": list(argv),
            "env": env,
            "stderr": stderr_path,
            "timeout": int(CHILD_TIMEOUT_S),
        }
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        reply = self.process.stdout.readline()
        if not reply:
            raise RuntimeError("the launcher process died")
        report = json.loads(reply)
        cpu_ms = float(report["cpu_s"]) * 1000
        return report["wall_ns"] / 1e6, int(report["maxrss_kb"]), int(report["code"]), cpu_ms


@dataclass(frozen=True)
class Command:
    argv: tuple[str, ...]
    accept: frozenset[int] = frozenset({0})
    before: Callable[[int], None] | None = None  # runs untimed before each run (run number)
    warm_up: bool = True  # one uncounted first run (compiles bytecode, fills caches)


@dataclass
class Bench:
    workdir: Path
    env: dict[str, str]
    runs: int
    launcher: Launcher
    notes: list[str] = field(default_factory=list)  # printed under the table

    def once(self, command: Command, number: int = 0) -> Sample:
        """One run in a fresh process: wall time from fork to reap, and its own peak RSS."""
        if command.before is not None:
            command.before(number)
        stderr_path = str(self.workdir / "stderr.txt")
        executable = shutil.which(command.argv[0]) or command.argv[0]
        argv = (executable, *command.argv[1:])
        wall_ms, rss_kb, code, cpu_ms = self.launcher.run(argv, self.env, stderr_path)
        if code not in command.accept:
            errors = Path(stderr_path).read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{' '.join(command.argv)} exited {code}: {errors}")
        return Sample(wall_ms, rss_kb, cpu_ms)

    def pair(
        self,
        floor: Command,
        value: Command,
        floor_runs: int | None = None,
        runs: int | None = None,
    ) -> tuple[list[Sample], list[Sample]]:
        """Warm both up once, then alternate them `runs` times (--runs unless a figure whose
        every run takes seconds asks for fewer); a floor that takes seconds may run only
        `floor_runs` times, spread evenly among the value's runs."""
        for command in (floor, value):
            if command.warm_up:
                self.once(command)
        total = self.runs if runs is None else runs
        wanted = total if floor_runs is None else min(floor_runs, total)
        floors: list[Sample] = []
        values: list[Sample] = []
        for number in range(1, total + 1):
            if number * wanted // total > len(floors):
                floors.append(self.once(floor, number))
            values.append(self.once(value, number))
        return floors, values


def median_ms(samples: list[Sample]) -> float:
    return statistics.median(sample.wall_ms for sample in samples)


def median_mb(samples: list[Sample]) -> float:
    return statistics.median(sample.rss_kb for sample in samples) / 1024


def ratio_row(figure: str, value: float, floor: float, limit: float, unit: str) -> Row:
    ratio = value / floor
    verdict = "ok" if ratio <= limit else "OVER"
    return Row(
        figure,
        f"{value:.1f} {unit}",
        f"{floor:.1f} {unit}",
        f"{ratio:.3f}x",
        f"<= {limit}x",
        verdict,
    )


def delta_row(figure: str, value: float, floor: float, limit_ms: float) -> Row:
    verdict = "ok" if value - floor <= limit_ms else "OVER"
    return Row(
        figure,
        f"{value:.1f} ms",
        f"{floor:.1f} ms",
        f"{value / floor:.3f}x ({value - floor:+.1f} ms)",
        f"<= +{limit_ms:g} ms",
        verdict,
    )


def missing_row(figure: str, why: str) -> Row:
    return Row(figure, "n/a", "n/a", "n/a", "", f"n/a ({why})")


# ---------------------------------------------------------------- configs and host state


def lock_table(name: str, path: Path, lock_format: str, extra: str = "") -> str:
    return f'[[lock]]\nname = "{name}"\npath = "{path}"\nformat = "{lock_format}"\n{extra}\n'


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def alert_table(stage: Stage) -> str:
    """A lock held (by a live holder) past a 2 s critical budget: one new incident."""
    budget = 'warn_after = "1s"\ncritical_after = "2s"\n'
    return lock_table(ALERT_LOCK, stage.alert_dir, "owner-record", budget)


@dataclass
class Stage:
    """The locks and holders the quiet runs inspect; `ten` is their config file, `tables`
    its locks (and defaults) for configs that add their own [notify] and [state]."""

    ten: Path
    tables: str
    alert_dir: Path


def own_state(workdir: Path, name: str) -> str:
    """A [state] table for a journal of this config's own in the temporary directory: every
    run writes its sightings of kernel locks, and the host's journal is none of ours."""
    directory = workdir / f"{name}-state"
    directory.mkdir(mode=0o700)
    return f'[state]\npath = "{directory / "state.jsonl"}"\n\n'


def build_stage(workdir: Path, processes: Processes) -> Stage:
    """10 configured locks: 3 held within budget by live processes, the rest free."""
    locks = workdir / "locks"
    locks.mkdir()
    kernel = [locks / f"kernel-{number}" for number in range(4)]
    for path in kernel:
        path.touch()
    processes.holder(FLOCK_MANY, str(locks), "kernel-", "0", "2")
    now = rfc3339(datetime.now(UTC))
    held_record = locks / "store-0" / "LOCK"
    for number in range(3):  # the stores exist; store-1 and store-2 are not locked
        (locks / f"store-{number}").mkdir()
    alert_dir = locks / "alert-store" / "LOCK"
    (locks / "alert-store").mkdir()
    holder = processes.holder(OWNER_RECORD, str(held_record), now, str(alert_dir), now)
    pidfile = locks / "daemon.pid"
    pidfile.write_text(f"{holder}\n")
    tables = [lock_table(f"kernel-{n}", path, "kernel") for n, path in enumerate(kernel)]
    tables += [
        lock_table(f"store-{n}", locks / f"store-{n}" / "LOCK", "owner-record") for n in range(3)
    ]
    tables += [lock_table("daemon", pidfile, "pidfile")]
    tables += [lock_table(f"absent-{n}", locks / f"absent-{n}.pid", "pidfile") for n in range(2)]
    ten = workdir / "ten.toml"
    text = DEFAULTS_TABLE + "".join(tables)
    ten.write_text(own_state(workdir, "ten") + text)
    return Stage(ten, text, alert_dir)


def many_tables(workdir: Path, processes: Processes) -> tuple[list[str], list[int]]:
    """1,000 locks: 500 files flocked by two holders, 250 free files, 250 free stores;
    and the holders' PIDs."""
    many = workdir / "many"
    many.mkdir()
    half = CONFIGURED_MANY // 2
    for path in (many / f"k{number}" for number in range(CONFIGURED_MANY - CONFIGURED_MANY // 4)):
        path.touch()
    for number in range(CONFIGURED_MANY // 4):
        (many / f"store-{number}").mkdir()  # an existing store whose lock is free
    holders = [
        processes.holder(FLOCK_MANY, str(many), "k", "0", str(half // 2)),
        processes.holder(FLOCK_MANY, str(many), "k", str(half // 2), str(half - half // 2)),
    ]
    tables = [
        lock_table(f"k{n}", many / f"k{n}", "kernel")
        for n in range(CONFIGURED_MANY - CONFIGURED_MANY // 4)
    ]
    tables += [
        lock_table(f"absent-{n}", many / f"store-{n}" / "LOCK", "owner-record")
        for n in range(CONFIGURED_MANY // 4)
    ]
    return tables, holders


def lockwarden(
    config: Path,
    accept: frozenset[int] = frozenset({0}),
    before: Callable[[int], None] | None = None,
) -> Command:
    return Command((PYTHON, "-m", "lockwarden", "--once", "--config", str(config)), accept, before)


def config_problem(bench: Bench, config: Path) -> str | None:
    """None when this build accepts the config, else its first config error."""
    completed = subprocess.run(
        [PYTHON, "-m", "lockwarden", "check-config", "--config", str(config)],
        capture_output=True,
        text=True,
        env=bench.env,
        timeout=60,
        check=False,
    )
    if completed.returncode == 0:
        return None
    return (completed.stderr.strip().splitlines() or [f"exit {completed.returncode}"])[0]


# ---------------------------------------------------------------- the alert receiver


@dataclass
class Receiver:
    """A real HTTP endpoint on 127.0.0.1 for apprise's json:// plugin; counts deliveries."""

    server: http.server.ThreadingHTTPServer
    deliveries: list[bytes]

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])


@contextmanager
def receiver() -> Iterator[Receiver]:
    deliveries: list[bytes] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            deliveries.append(self.rfile.read(length))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Receiver(server, deliveries)
    finally:
        server.shutdown()
        server.server_close()


# ---------------------------------------------------------------- the figures


def quiet_rows(bench: Bench, stage: Stage) -> tuple[list[Row], list[Sample]]:
    """The quiet run with alerting off (no [notify]: no journal is read) and on (a [notify]
    service and a state journal, as a monitored host has them; the URL is never contacted)."""
    floor = Command((PYTHON, "-c", QUIET_FLOOR))
    runs = bench.runs * QUIET_RUNS_FACTOR
    floors, values = bench.pair(floor, lockwarden(stage.ten), runs=runs)
    alerting = bench.workdir / "ten-alerting.toml"
    state = bench.workdir / "quiet-state"
    state.mkdir(mode=0o700)
    alerting.write_text(
        f'[state]\npath = "{state / "state.jsonl"}"\n\n'
        '[notify]\nurls = ["json://127.0.0.1:9"]\n\n' + stage.tables
    )
    alerting.chmod(0o600)
    alerting_floors, alerting_values = bench.pair(floor, lockwarden(alerting), runs=runs)
    kernel = Command((PYTHON, "-c", f"{QUIET_FLOOR}; open('/proc/locks').read()"))
    kernel_floors, kernel_values = bench.pair(floor, kernel, runs=runs)
    wall = f'wall (floor: python -c "{QUIET_FLOOR}")'
    rows = [
        ratio_row(
            f"quiet --once, 10 locks, {wall}",
            median_ms(values),
            median_ms(floors),
            QUIET_WALL_LIMIT,
            "ms",
        ),
        ratio_row(
            "quiet --once, 10 locks, peak RSS",
            median_mb(values),
            median_mb(floors),
            QUIET_RSS_LIMIT,
            "MB",
        ),
        ratio_row(
            "quiet --once, 10 locks, alerting on, wall",
            median_ms(alerting_values),
            median_ms(alerting_floors),
            QUIET_WALL_LIMIT,
            "ms",
        ),
        ratio_row(
            "quiet --once, 10 locks, alerting on, peak RSS",
            median_mb(alerting_values),
            median_mb(alerting_floors),
            QUIET_RSS_LIMIT,
            "MB",
        ),
        proc_locks_row(kernel_values, kernel_floors),
    ]
    return rows, values


def proc_locks_row(values: list[Sample], floors: list[Sample]) -> Row:
    """What every run's one read of /proc/locks costs on its own, over the quiet floor:
    printed, with no target. Reading it takes the kernel's file_rwsem for writing (locks_start
    in fs/locks.c), a percpu rw-semaphore, whose writer waits for an RCU grace period: wall
    time the process sleeps, not CPU, which no design that reads /proc/locks avoids, and which
    the floor does not pay."""
    wall = median_ms(values) - median_ms(floors)
    cpu = statistics.median(s.cpu_ms for s in values) - statistics.median(s.cpu_ms for s in floors)
    return Row(
        "the floor and one read of /proc/locks (the kernel's RCU grace period)",
        f"{median_ms(values):.1f} ms",
        f"{median_ms(floors):.1f} ms",
        f"{wall:+.1f} ms wall, {cpu:+.1f} ms CPU",
        "printed",
        "info",
    )


def many_locks_row(bench: Bench, stage: Stage, processes: Processes) -> Row:
    """The 1,000-lock holders live only for this figure: the others' hosts do not have them."""
    tables, holders = many_tables(bench.workdir, processes)
    many = bench.workdir / "many.toml"
    many.write_text(own_state(bench.workdir, "many") + DEFAULTS_TABLE + "".join(tables))
    try:
        floors, values = bench.pair(lockwarden(stage.ten), lockwarden(many))
    finally:
        processes.stop(holders)
    return delta_row(
        "quiet run, 1,000 configured locks (half held)", median_ms(values), median_ms(floors), 100
    )


def host_locks_row(bench: Bench, stage: Stage, processes: Processes) -> Row:
    lslocks = shutil.which("lslocks")
    if lslocks is None:
        return missing_row(
            "10,000 kernel locks on the host, 10 configured", "lslocks not installed"
        )
    directory = bench.workdir / "host-locks"
    directory.mkdir()
    share = HOST_LOCKS // HOST_LOCK_HOLDERS
    holders = [
        processes.holder(FLOCK_MANY, str(directory), "k", str(number * share), str(share))
        for number in range(HOST_LOCK_HOLDERS)
    ]
    try:
        floors, values = bench.pair(
            Command((lslocks,), warm_up=False), lockwarden(stage.ten), LSLOCKS_RUNS
        )
    finally:
        processes.stop(holders)
    return ratio_row(
        "10,000 kernel locks on the host, 10 configured (floor: lslocks)",
        median_ms(values),
        median_ms(floors),
        0.01,
        "ms",
    )


def alert_row(bench: Bench, stage: Stage) -> Row:
    figure = "alert run: one new incident, one json:// receiver"
    with receiver() as endpoint:
        config = bench.workdir / "alert.toml"
        text = stage.tables
        config.write_text(
            f'[notify]\nurls = ["json://127.0.0.1:{endpoint.port}"]\n\n'
            f'[state]\npath = "{bench.workdir / "alert-state" / "state.jsonl"}"\n\n'
            + text
            + alert_table(stage)
        )
        problem = config_problem(bench, config)
        if problem is not None:
            return missing_row(figure, f"alerting not in this build: {problem}")

        def fresh_state(_number: int) -> None:
            """A first run every time: no journal, so the held-too-long lock is a new incident."""
            shutil.rmtree(bench.workdir / "alert-state", ignore_errors=True)
            (bench.workdir / "alert-state").mkdir()

        floor = Command(
            (PYTHON, "-c", "import apprise; apprise.Apprise().add('json://127.0.0.1:9')")
        )
        value = lockwarden(config, frozenset({0, 1, 2}), before=fresh_state)
        floors, values = bench.pair(floor, value)
        expected = bench.runs + 1  # the warm-up run alerted too
        if len(endpoint.deliveries) < expected:
            return Row(
                figure,
                f"{median_ms(values):.1f} ms",
                f"{median_ms(floors):.1f} ms",
                "",
                "<= 1.2x",
                f"OVER (receiver got {len(endpoint.deliveries)} of {expected} alerts)",
            )
    return ratio_row(figure, median_ms(values), median_ms(floors), 1.2, "ms")


def journal_row(bench: Bench, stage: Stage, processes: Processes) -> Row:
    """A quiet run on the journal 50,000 records leave behind vs on an empty journal.

    The records are real incident lifecycles (alerted, then resolved) written by this build,
    copied with fresh ids and later times. A host never holds them all: each run that finds the
    journal past `[state] max_bytes` compacts it. So one untimed run of this build compacts the
    50,000 (as the first run over them would) and every timed run starts from a copy of what
    that run left; that first run's own cost is printed below the table."""
    figure = "journal after 50,000 records, quiet run"
    state = bench.workdir / "journal"
    state.mkdir(mode=0o700)
    config = bench.workdir / "journal.toml"
    # Alerting on, as a monitored host has it (a quiet run sends nothing, so the URL is never
    # contacted); without [notify] a quiet run skips the alert stage and never reads the journal.
    config.write_text(
        f'[state]\npath = "{state / "state.jsonl"}"\n\n'
        '[notify]\nurls = ["json://127.0.0.1:9"]\n\n' + stage.tables
    )
    config.chmod(0o600)
    problem = config_problem(bench, config)
    if problem is not None:
        return missing_row(figure, f"state journal not in this build: {problem}")
    template = lifecycle_records(bench, processes)
    if not template:
        return missing_row(figure, "could not make a journal record to copy")
    raw = bench.workdir / "journal-50000.jsonl"
    raw.write_text("".join(copies(template, JOURNAL_RECORDS)))
    shutil.copyfile(raw, state / "state.jsonl")
    first = bench.once(lockwarden(config))
    compacted = bench.workdir / "journal-compacted.jsonl"
    shutil.copyfile(state / "state.jsonl", compacted)
    empty = bench.workdir / "journal-empty.jsonl"
    empty.touch()

    def restore(source: Path) -> Callable[[int], None]:
        def copy(_number: int) -> None:
            shutil.copyfile(source, state / "state.jsonl")

        return copy

    floors, values = bench.pair(
        lockwarden(config, before=restore(empty)), lockwarden(config, before=restore(compacted))
    )
    kept = sum(1 for _ in compacted.open())
    bench.notes.append(
        f"the first run over the 50,000 uncompacted records ({raw.stat().st_size // 1024:,} KiB) "
        f"took {first.wall_ms:,.0f} ms once and left {kept} records "
        f"({compacted.stat().st_size // 1024} KiB)"
    )
    return delta_row(figure, median_ms(values), median_ms(floors), 20)


def lifecycle_records(bench: Bench, processes: Processes) -> list[Record]:
    """The records of one incident's life, as this build writes them: a run that alerts on
    a lock held past its 2 s critical budget, then (its holder gone, its lock removed) a run
    that resolves it."""
    directory = bench.workdir / "lifecycle"
    directory.mkdir()
    lock = directory / "store" / "LOCK"
    (directory / "store").mkdir()
    with receiver() as endpoint:
        config = directory / "config.toml"
        config.write_text(
            f'[notify]\nurls = ["json://127.0.0.1:{endpoint.port}"]\n\n'
            f'[state]\npath = "{directory / "state" / "state.jsonl"}"\n\n'
            + lock_table(
                ALERT_LOCK, lock, "owner-record", 'warn_after = "1s"\ncritical_after = "2s"\n'
            )
        )
        config.chmod(0o600)
        holder = processes.holder(OWNER_RECORD, str(lock), rfc3339(datetime.now(UTC)))
        time.sleep(2.5)  # held past critical_after by a holder that really started then
        bench.once(lockwarden(config, frozenset({2})))
        processes.stop([holder])
        shutil.rmtree(lock)
        bench.once(lockwarden(config))
        if len(endpoint.deliveries) != 2:
            raise RuntimeError(f"expected an alert and a resolved, got {endpoint.deliveries}")
    journal = directory / "state" / "state.jsonl"
    records = [json.loads(line) for line in journal.read_text().splitlines() if line.strip()]
    kinds = {record.get("type") for record in records}
    return records if {"open", "due", "sent", "close"} <= kinds else []


def copies(template: list[Record], count: int) -> Iterator[str]:
    """`count` journal lines: the template over and over, each copy with its own incident and
    message ids and two minutes later than the one before, the last ending about now."""
    rounds = -(-count // len(template))
    start = datetime.now(UTC) - timedelta(minutes=2 * rounds)
    written = 0
    for number in range(rounds):
        shift = start + timedelta(minutes=2 * number) - _first_time(template)
        for record in template:
            if written == count:
                return
            copy = dict(record)
            for key in ("incident", "message"):
                if isinstance(copy.get(key), str):
                    copy[key] = f"{copy[key]}-{number}"
            for key in ("at", "held_since"):
                moment = _parse_time(copy.get(key))
                if moment is not None:
                    copy[key] = rfc3339(moment + shift)
            yield json.dumps(copy, separators=(",", ":"), sort_keys=True) + "\n"
            written += 1


def _parse_time(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _first_time(template: list[Record]) -> datetime:
    return min(
        moment for moment in (_parse_time(record.get("at")) for record in template) if moment
    )


def processes_row(bench: Bench, stage: Stage, processes: Processes) -> Row:
    """Idle host vs 1,000 more processes, alternated: the sleepers are started before each
    value run and killed before each floor run (untimed), so load drift hits both alike."""
    sleepers: list[int] = []

    def without_sleepers(_number: int) -> None:
        processes.stop(sleepers)
        sleepers.clear()

    def with_sleepers(_number: int) -> None:
        if not sleepers:
            sleepers.extend(processes.sleepers(SLEEPERS))

    floor = lockwarden(stage.ten, before=without_sleepers)
    value = lockwarden(stage.ten, before=with_sleepers)
    try:
        floors, values = bench.pair(floor, value)
    finally:
        without_sleepers(0)
    return delta_row(
        "1,000 processes on the host, 10 configured", median_ms(values), median_ms(floors), 50
    )


def processes_that_fit(wanted: int) -> tuple[int, str]:
    """How many more processes this machine can hold (pid_max, threads-max, RLIMIT_NPROC,
    half the available memory), at most `wanted`; and what limited it, if anything."""
    running = sum(1 for entry in os.listdir("/proc") if entry.isdigit())
    limits = {
        "kernel.pid_max": int(Path("/proc/sys/kernel/pid_max").read_text()) // 2 - running,
        "kernel.threads-max": int(Path("/proc/sys/kernel/threads-max").read_text()) // 2,
        "memory": _available_bytes() // 2 // FORKED_BYTES_EACH,
    }
    soft, _hard = resource.getrlimit(resource.RLIMIT_NPROC)
    if soft != resource.RLIM_INFINITY and os.geteuid() != 0:
        limits["ulimit -u"] = soft - running
    name, fits = min(limits.items(), key=lambda item: item[1])
    return (wanted, "") if fits >= wanted else (max(fits, 0), f"lowered by {name}")


def _available_bytes() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


@contextmanager
def forked_host(processes: Processes, directory: Path, lock: Path, count: int) -> Iterator[int]:
    """`count` processes with DESCRIPTORS_EACH open files each, forked by one small parent in
    a process group of its own; the one in the middle holds a flock on `lock`. Yields its PID.
    On leaving, the parent ends its children and reaps each by PID; if it does not within
    FORKED_EXIT_S, its group (ours alone) is killed."""
    with _signals_held():
        parent = subprocess.Popen(
            [
                PYTHON,
                "-S",
                "-I",
                "-c",
                textwrap.dedent(FORKER),
                str(directory),
                str(lock),
                str(count),
                str(DESCRIPTORS_EACH),
                str(count // 2),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            process_group=0,
        )
        processes.adopt(parent)
    try:
        assert parent.stdout is not None
        words = parent.stdout.readline().split()
        if len(words) != 2 or words[0] != "ready":
            raise RuntimeError(f"the forking parent did not get ready: {words!r}")
        yield int(words[1])
    finally:
        _end_forked(processes, parent)


def _end_forked(processes: Processes, parent: subprocess.Popen[str]) -> None:
    if parent.stdin is not None:
        with suppress(BrokenPipeError):
            parent.stdin.close()
    try:
        parent.wait(FORKED_EXIT_S)
    except subprocess.TimeoutExpired:
        with suppress(ProcessLookupError):
            os.killpg(parent.pid, signal.SIGKILL)
    processes.stop([parent.pid])


def holder_problem(bench: Bench, config: Path, holder: int) -> str | None:
    """None when this build's --once names exactly `holder` as the lock's holder."""
    completed = subprocess.run(
        [PYTHON, "-m", "lockwarden", "--once", "--json", "--config", str(config)],
        capture_output=True,
        text=True,
        env=bench.env,
        timeout=CHILD_TIMEOUT_S,
        check=False,
    )
    try:
        holders = [entry["pid"] for entry in json.loads(completed.stdout)["locks"][0]["holders"]]
    except (ValueError, KeyError, IndexError, TypeError):
        return f"exit {completed.returncode}, no holders in its JSON: {completed.stderr[-500:]}"
    return None if holders == [holder] else f"named {holders}, not [{holder}]"


def blocked_check_row(bench: Bench, stage: Stage) -> Row:
    """The host-wide look for blocked writers on a quiet run where nothing waits, against the
    same run with it turned off ([host] blocked_writers = false)."""
    off = bench.workdir / "ten-blocked-off.toml"
    off.write_text(stage.ten.read_text() + "\n[host]\nblocked_writers = false\n")
    floors, values = bench.pair(lockwarden(off), lockwarden(stage.ten))
    return delta_row(
        "quiet --once, 10 locks, looking for blocked writers (floor: turned off)",
        median_ms(values),
        median_ms(floors),
        BLOCKED_CHECK_LIMIT_MS,
    )


def why_row(bench: Bench, processes: Processes) -> Row:
    """`why PID` of a writer blocked on the one held lock of a host of many processes with
    many open files, against `inspect` of the same lock (both walk every descriptor once)."""
    count, lowered = processes_that_fit(HOST_PROCESSES)
    figure = (
        f"why PID, {count:,} processes x {DESCRIPTORS_EACH} open files"
        f"{f' ({lowered})' if lowered else ''} (floor: inspect of its lock)"
    )
    directory = bench.workdir / "forked-why"
    directory.mkdir()
    lock = directory / "held.lock"
    lock.touch()
    with forked_host(processes, directory, lock, count):
        waiter = processes.holder(WAITER, str(lock))
        settle([waiter])
        accept = frozenset({0, 1, 2})
        inspect = Command((PYTHON, "-m", "lockwarden", "inspect", str(lock)), accept)
        why = Command((PYTHON, "-m", "lockwarden", "why", str(waiter)), accept)
        floors, values = bench.pair(inspect, why, runs=DESCRIPTORS_RUNS)
        processes.stop([waiter])
    return ratio_row(figure, median_ms(values), median_ms(floors), WHY_LIMIT, "ms")


def descriptors_rows(bench: Bench, processes: Processes) -> list[Row]:
    """Many processes with many open files, one of them the holder: the run's one walk of
    every descriptor on the host, against a bare walk (listdir and readlink of /proc/*/fd);
    and what the minutely timer's runs cost such a host a day in CPU time."""
    count, lowered = processes_that_fit(HOST_PROCESSES)
    figure = (
        f"{count:,} processes x {DESCRIPTORS_EACH} open files, one holder"
        f"{f' ({lowered})' if lowered else ''} (floor: walk of /proc/*/fd)"
    )
    directory = bench.workdir / "forked"
    directory.mkdir()
    lock = directory / "held.lock"
    lock.touch()
    config = bench.workdir / "forked.toml"
    config.write_text(
        own_state(bench.workdir, "forked")
        + DEFAULTS_TABLE
        + lock_table("forked-held", lock, "kernel")
    )
    with forked_host(processes, directory, lock, count) as holder:
        problem = holder_problem(bench, config, holder)
        if problem is not None:
            return [missing_row(figure, f"holder not named: {problem}")]
        # The run that checked the holder compiled and cached what the timed runs import.
        floor = Command((PYTHON, "-c", textwrap.dedent(PROC_FD_WALK)), warm_up=False)
        value = Command(lockwarden(config).argv, warm_up=False)
        floors, values = bench.pair(floor, value, runs=DESCRIPTORS_RUNS)
    walk = ratio_row(figure, median_ms(values), median_ms(floors), DESCRIPTORS_LIMIT, "ms")
    return [walk, cpu_a_day_row(count, values, floors)]


def cpu_a_day_row(count: int, values: list[Sample], floors: list[Sample]) -> Row:
    """The same host's CPU time (user and system) of a day of the minutely timer, beside a
    day of the bare walk: printed, with no target of its own."""
    cpu = statistics.median(sample.cpu_ms for sample in values)
    walk = statistics.median(sample.cpu_ms for sample in floors)
    hours = cpu * TIMER_RUNS_A_DAY / 3_600_000
    return Row(
        f"the same host ({count:,} processes), CPU a day of the minutely timer",
        f"{hours:.2f} h",
        f"{walk * TIMER_RUNS_A_DAY / 3_600_000:.2f} h (the walk)",
        f"{cpu / walk:.3f}x ({cpu:.0f} ms a run)",
        "printed",
        "info",
    )


# ---------------------------------------------------------------- main


def child_env(workdir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(SRC) + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONPYCACHEPREFIX"] = str(workdir / "pycache")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["NO_COLOR"] = "1"
    # What a run remembers between runs (the last check of the notify URLs) stays in the
    # benchmark's own directory, as the unit's RuntimeDirectory= keeps it in /run/lockwarden.
    runtime = workdir / "runtime" / "lockwarden"  # named as the unit's RuntimeDirectory= is
    runtime.mkdir(mode=0o700, parents=True, exist_ok=True)
    env["RUNTIME_DIRECTORY"] = str(runtime)
    return env


WIDTHS = (72, 10, 11, 20, 11)


def print_row(row: Row) -> None:
    """One row as soon as it is measured (the whole run takes minutes)."""
    cells = [getattr(row, name) for name in Row.__dataclass_fields__]
    padded = [cell.ljust(width) for cell, width in zip(cells, WIDTHS, strict=False)]
    print("  ".join([*padded, cells[-1]]).rstrip(), flush=True)


def describe_host() -> str:
    uname = os.uname()
    try:
        import apprise

        apprise_version = apprise.__version__
    except ImportError:
        apprise_version = "not installed"
    return (
        f"{socket.gethostname()}: Linux {uname.release}, {os.cpu_count()} CPUs, "
        f"Python {sys.version.split()[0]}, apprise {apprise_version}, {load_average()}"
    )


def load_average() -> str:
    """What else the machine was doing: a shared machine's load moves every +ms figure."""
    one, five, _fifteen = os.getloadavg()
    return f"load average {one:.1f} (1 min), {five:.1f} (5 min)"


FIGURES: dict[str, Callable[[Bench, Stage, Processes], list[Row]]] = {
    "quiet": lambda bench, stage, _p: quiet_rows(bench, stage)[0],
    "many": lambda bench, stage, processes: [many_locks_row(bench, stage, processes)],
    "host-locks": lambda bench, stage, processes: [host_locks_row(bench, stage, processes)],
    "alert": lambda bench, stage, _p: [alert_row(bench, stage)],
    "journal": lambda bench, stage, processes: [journal_row(bench, stage, processes)],
    "processes": lambda bench, stage, processes: [processes_row(bench, stage, processes)],
    "descriptors": lambda bench, _stage, processes: descriptors_rows(bench, processes),
    "blocked": lambda bench, stage, _p: [blocked_check_row(bench, stage)],
    "why": lambda bench, _stage, processes: [why_row(bench, processes)],
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="runs per median (at least 10)")
    parser.add_argument(
        "--only",
        choices=sorted(FIGURES),
        action="append",
        help="measure only these figures (repeatable)",
    )
    arguments = parser.parse_args(argv)
    if arguments.runs < 10:
        parser.error("--runs must be at least 10: the targets are medians of 10 or more runs")
    started = time.monotonic()
    # A SIGTERM (a CI timeout) unwinds like Ctrl-C, so the finally below kills every holder.
    signal.signal(signal.SIGTERM, lambda _signal, _frame: sys.exit(128 + signal.SIGTERM))
    processes = Processes()
    workdir = Path(tempfile.mkdtemp(prefix="lockwarden-bench-"))
    rows: list[Row] = []
    try:
        bench = Bench(workdir, child_env(workdir), arguments.runs, Launcher.start(processes))
        stage = build_stage(workdir, processes)
        print(f"# {describe_host()}; medians of {arguments.runs} runs", flush=True)
        print_row(Row("figure", "value", "floor", "ratio", "target", "ok|OVER"))
        for name, figure in FIGURES.items():
            if arguments.only and name not in arguments.only:
                continue
            try:
                measured = figure(bench, stage, processes)
            except RuntimeError as error:  # a run that failed: say so, measure the rest
                measured = [Row(name, "n/a", "n/a", "n/a", "", f"ERROR ({error})")]
            for row in measured:
                print_row(row)
                rows.append(row)
    finally:
        processes.stop_all()
        shutil.rmtree(workdir, ignore_errors=True)
    for note in bench.notes:
        print(f"# {note}")
    print(f"# {time.monotonic() - started:.0f} s; at the end, {load_average()}")
    return exit_status(rows)


def exit_status(rows: Sequence[Row]) -> int:
    """0 when every row is ok (or only printed), 1 when one is OVER its target, else 2 (one
    not measured)."""
    if any(row.verdict.startswith("OVER") for row in rows):
        return 1
    return 0 if all(row.verdict in ("ok", "info") for row in rows) else 2


if __name__ == "__main__":
    raise SystemExit(main())
