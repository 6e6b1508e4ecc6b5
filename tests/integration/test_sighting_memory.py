"""A minutely `--once` (simulated with `--now`) over a kernel lock: a brief lock inside a
long-lived process never warns, a lock held continuously by the same process escalates on
schedule. The sighting memory lives in the state directory's `seen.json`, alerting on or off."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from conftest import FLOCK_HOLDER, Children, cli_env, require_tool, run_json, write_config
from lockwarden.state.journal import SEEN_NAME, SEEN_PREFIX

# A long-lived process that takes and drops a flock when told: `lock` / `unlock` on stdin.
ON_COMMAND = """
import fcntl, sys
handle = open(sys.argv[1], "a")
print("ready", flush=True)
for line in sys.stdin:
    fcntl.flock(handle, fcntl.LOCK_EX if line.strip() == "lock" else fcntl.LOCK_UN)
    print("ok", flush=True)
"""

# The same, as a shell holds a lock: the descriptor is the shell's (`exec 9>>FILE`), and each
# `flock 9` or `flock -u 9` is a child process working on it (util-linux's flock).
SHELL_ON_COMMAND = (
    'exec 9>>"$1"; echo ready; while read -r command; do '
    'if [ "$command" = lock ]; then flock 9; else flock -u 9; fi; echo ok; done'
)

RUNS = 10


def tell(process: subprocess.Popen[str], command: str) -> None:
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(command + "\n")
    process.stdin.flush()
    assert process.stdout.readline().strip() == "ok"


def config(tmp_path: Path, alerting: bool) -> str:
    notify = '[notify]\nurls = ["json://127.0.0.1:9"]\n' if alerting else ""
    text = (
        '[defaults]\nwarn_after = "3m"\ncritical_after = "5m"\n\n'
        f'[[lock]]\nname = "store"\npath = "{tmp_path / "store.lock"}"\nformat = "kernel"\n\n'
        f'[state]\npath = "{tmp_path / "state" / "state.jsonl"}"\n{notify}'
    )
    path = write_config(tmp_path / "config.toml", text)
    Path(path).chmod(0o600)
    return path


def minutely_runs(
    tmp_path: Path,
    children: Children,
    held_at: set[int],
    alerting: bool,
    *,
    shell: bool = False,
    retake: bool = False,
) -> list[tuple[int, dict[str, Any]]]:
    """RUNS runs a minute apart; the process (a shell's `flock 9` children when `shell`) holds
    the lock during the runs in `held_at` only: taken just before the run, dropped just after,
    and with `retake` dropped and taken again between two runs in `held_at`."""
    path = config(tmp_path, alerting)
    lock = str(tmp_path / "store.lock")
    if shell:
        holder = children.start(["bash", "-c", SHELL_ON_COMMAND, "bash", lock], ready="ready")
    else:
        holder = children.python(ON_COMMAND, lock)
    start = datetime.now(UTC) + timedelta(minutes=1)
    results = []
    for run in range(RUNS):
        if retake and run in held_at and run - 1 in held_at:
            tell(holder, "unlock")
            tell(holder, "lock")
        if run in held_at and run - 1 not in held_at:
            tell(holder, "lock")
        if run not in held_at and run - 1 in held_at:
            tell(holder, "unlock")
        now = (start + timedelta(minutes=run)).strftime("%Y-%m-%dT%H:%M:%SZ")
        code, document = run_json("--once", "--config", path, "--now", now)
        results.append((code, document["locks"][0]))
    return results


@pytest.fixture
def controlled(children: Children) -> Children:
    """children.python, with a stdin pipe for the holder's commands."""
    original = children.start

    def start(argv: list[str], ready: str | None = None, **kwargs: object) -> Any:
        return original(argv, ready=ready, stdin=subprocess.PIPE, **kwargs)

    children.start = start  # type: ignore[method-assign]
    return children


@pytest.mark.parametrize("alerting", [False, True], ids=["alerting-off", "alerting-on"])
def test_brief_locks_in_a_long_lived_process_never_warn(
    tmp_path: Path, controlled: Children, alerting: bool
) -> None:
    """Held at runs 1-2, 4-5 and 7-8, free in between: the holder has run for up to 9
    minutes (past critical_after), but no run saw the lock held for 3 minutes."""
    results = minutely_runs(tmp_path, controlled, {1, 2, 4, 5, 7, 8}, alerting)
    assert [code for code, _ in results] == [0] * RUNS
    held = [finding for _, finding in results if finding["state"] != "free"]
    assert {finding["state"] for finding in held} == {"held"}
    # First sighting of each series: the running time, an upper bound; the next: at least 1m.
    assert [finding["held"]["bound"] for finding in held] == ["at_most", "at_least"] * 3
    assert all(f["held"]["seconds"] == 60 for f in held if f["held"]["bound"] == "at_least")


@pytest.mark.parametrize("alerting", [False, True], ids=["alerting-off", "alerting-on"])
def test_a_lock_held_continuously_escalates_on_schedule(
    tmp_path: Path, controlled: Children, alerting: bool
) -> None:
    """Taken at run 2 and kept: at least 3 minutes at run 5 (warning), 5 at run 7 (critical)."""
    results = minutely_runs(tmp_path, controlled, set(range(2, RUNS)), alerting)
    assert [code for code, _ in results] == [0, 0, 0, 0, 0, 1, 1, 2, 2, 2]
    states = [finding["state"] for _, finding in results]
    assert states == ["free"] * 2 + ["held"] * 3 + ["held_too_long"] * 5
    at_least = [finding["held"]["seconds"] for _, finding in results[3:]]
    assert at_least == [60.0 * minutes for minutes in range(1, RUNS - 2)]
    assert (results[7][1]["held"]["bound"], results[7][1]["held"]["seconds"]) == ("at_least", 300)


@pytest.mark.parametrize("alerting", [False, True], ids=["alerting-off", "alerting-on"])
def test_a_memory_that_cannot_be_saved_is_the_state_finding_not_a_silent_ok(
    tmp_path: Path, children: Children, alerting: bool
) -> None:
    """A full disk, a read-only state directory (here: a file where its directory should be):
    the lock can never be seen held long, so the run must not read OK. It says so as the
    `lockwarden:state` finding (unknown, exit 3), once, beside the lock's own finding."""
    (tmp_path / "state").write_text("a file, not a directory\n")
    path = config(tmp_path, alerting)
    holder = children.python(FLOCK_HOLDER, str(tmp_path / "store.lock"))
    code, document = run_json("--once", "--config", path)
    findings = {finding["name"]: finding for finding in document["locks"]}
    assert code == 3, document
    assert findings["store"]["state"] == "held"
    assert findings["store"]["holders"][0]["pid"] == holder.pid
    [state] = [finding for finding in document["locks"] if finding["name"] == "lockwarden:state"]
    assert (state["state"], state["severity"]) == ("unknown", "unknown")
    assert "sighting memory not saved" in state["reason"]
    assert str(tmp_path / "state") in state["reason"]


def test_the_seen_record_is_written_whole_and_not_fsynced(
    tmp_path: Path, children: Children
) -> None:
    """A real run under strace (Debian's) while a real process holds the lock: the `seen`
    record goes to a hidden file in one write() and no fsync, renamed over `seen.json`
    (SeenFile: every run writes it afresh); the journal is not written at all."""
    path = config(tmp_path, alerting=False)
    holder = children.python(FLOCK_HOLDER, str(tmp_path / "store.lock"))
    traces = _traced(tmp_path, "-m", "lockwarden", "--once", "--config", path)
    state = tmp_path / "state"
    [calls] = _calls_on(traces, f'"{state}/{SEEN_PREFIX}', "O_CREAT")
    assert calls == ["write", "close"]
    assert not any("fsync" in calls for calls in _calls_on(traces, f'"{state}"', "O_DIRECTORY"))
    assert not (state / "state.jsonl").exists()
    [line] = (state / SEEN_NAME).read_text().splitlines()
    record = json.loads(line)
    assert (record["type"], list(record["locks"])) == ("seen", ["store"])
    assert record["locks"]["store"][0].startswith(f"pid:{holder.pid}:")


def test_a_seen_record_naming_a_database_session_is_fsynced(tmp_path: Path) -> None:
    """A database session can outlive this host's crash (its server may be another host), so
    the `seen` record that names one is written and fsynced like any other record. The run's
    sighting memory is driven with a finding as a database lock makes it: a real server is
    not needed to tell how the record is written (tests/formats/test_postgres_locks.py holds
    real sessions)."""
    path = config(tmp_path, alerting=False)
    program = f"""
import sys
from datetime import UTC, datetime
sys.path.insert(0, {str(Path(__file__).parent.parent)!r})
from factories import make_finding
from lockwarden.config import load
from lockwarden.model import Bound, Held, State
from lockwarden.pipeline import RunResult
from lockwarden.run import SightingMemory
from lockwarden.state.run_state import RunState
now = datetime.now(UTC)
finding = make_finding(state=State.HELD, held=Held(bound=Bound.AT_MOST), identity="pg-backend:7:1")
config = load({path!r})
state = RunState.open(config.state.journal_path, config.state.max_bytes)
memory = SightingMemory(config, now, state)
memory.remember(RunResult("host", "boot", now, (finding,)))
assert memory.unsaved is None, memory.unsaved
"""
    traces = _traced(tmp_path, "-c", program)
    state = tmp_path / "state"
    [calls] = _calls_on(traces, f'"{state}/{SEEN_PREFIX}', "O_CREAT")
    assert calls == ["write", "fsync", "close"]
    # the directory is fsynced after the rename, so that the new name is on disk too
    assert any("fsync" in calls for calls in _calls_on(traces, f'"{state}"', "O_DIRECTORY"))
    records = [json.loads(line) for line in (state / SEEN_NAME).read_text().splitlines()]
    assert [record["locks"]["store"][0] for record in records] == ["pg-backend:7:1"]


def _traced(tmp_path: Path, *arguments: str) -> list[list[str]]:
    """Run this Python with `arguments` under strace (Debian's), one trace file per process
    (-ff: a call is never split across lines by another process's); each file's lines."""
    strace = require_tool("strace")
    prefix = tmp_path / "trace"
    traced = ["-ff", "-o", str(prefix), "-e", "trace=openat,write,fsync,close"]
    completed = subprocess.run(
        [strace, *traced, sys.executable, *arguments],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    files = sorted(tmp_path.glob("trace.*"))
    assert files, "strace wrote no trace"
    return [file.read_text().splitlines() for file in files]


def _calls_on(traces: list[list[str]], opened: str, flag: str) -> list[list[str]]:
    """For each descriptor whose openat named `opened` (a prefix of the quoted path) with
    `flag`: the write/fsync/close calls on it in the process that opened it, up to its close."""
    found: list[list[str]] = []
    for lines in traces:
        descriptor = None
        for line in lines:
            if descriptor is None:
                opened_here = re.search(r"= (\d+)$", line)
                if line.startswith("openat(") and opened in line and flag in line and opened_here:
                    descriptor = opened_here.group(1)
                    found.append([])
                continue
            named = re.match(rf"(write|fsync|close)\({descriptor}\b", line)
            if named:
                found[-1].append(named.group(1))
                if named.group(1) == "close":
                    descriptor = None
    return found


def test_inspect_of_a_configured_lock_knows_what_its_runs_have_seen(
    tmp_path: Path, children: Children
) -> None:
    """A run saw the lock held, and a later one, past the budget, pages; `inspect` of that
    lock with the same config, a moment later, said it was 'not yet known to be past its
    budget', exit 0 (a new-user trial), since it read no memory. It reads the runs' sighting
    memory (never writes it) and says what their next run says."""
    lock = tmp_path / "store.lock"
    children.python(FLOCK_HOLDER, str(lock))
    path = write_config(
        tmp_path / "config.toml",
        '[defaults]\nwarn_after = "1s"\ncritical_after = "1h"\n\n'
        f'[[lock]]\nname = "store"\npath = "{lock}"\nformat = "kernel"\n\n'
        f'[state]\npath = "{tmp_path / "state" / "state.jsonl"}"\n',
    )
    code, document = run_json("--once", "--config", path)
    assert document["locks"][0]["state"] == "held", document
    seen = (tmp_path / "state" / SEEN_NAME).read_bytes()
    time.sleep(1.5)  # past the budget since that run saw it
    code, document = run_json("--once", "--dry-run", "--config", path)
    [paged] = document["locks"]
    assert (code, paged["state"]) == (1, "held_too_long"), paged
    code, document = run_json("inspect", str(lock), "--config", path)
    [inspected] = document["locks"]
    assert (code, inspected["state"]) == (1, "held_too_long"), inspected
    same = ("bound", "since")
    assert [inspected["held"][key] for key in same] == [paged["held"][key] for key in same]
    assert (tmp_path / "state" / SEEN_NAME).read_bytes() == seen  # read, never written
