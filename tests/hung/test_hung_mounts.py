"""A hung mount costs one lock, never the run: real FUSE file systems whose getattr never
returns (hangfs.py), beside local locks held by real processes, through the real CLI.

The figure docs/reliability.md's table quotes (the worst run time with a hung mount) is
what these tests print with -s: `hung mount: run took X s with fs_timeout Y s`.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from alerts.helpers import Receiver
from conftest import (
    FLOCK_HOLDER,
    MKDIR_HOLDER,
    Children,
    cli_env,
    wait_until,
    write_config,
)

from .conftest import HangingMounts, Orphans

FS_TIMEOUT_S = 1.0
RUN_LIMIT_S = 30
LATER = timedelta(hours=2)  # --now this far ahead: the local holders are past critical_after


def _config(tmp_path: Path, hung_paths: list[str], local: dict[str, str], url: str | None) -> str:
    """`url` None: alerting off, as the run that primes the sighting memory (_prime)."""
    tables = [
        f'[[lock]]\nname = "{name}"\npath = "{path}"\nformat = "{kind}"\n'
        for name, (path, kind) in {
            **{f"hung-{n}": (p, "auto") for n, p in enumerate(hung_paths)},
            **{name: (path, kind) for name, (path, kind) in _split(local).items()},
        }.items()
    ]
    return write_config(
        tmp_path / f"config-{len(hung_paths)}.toml",
        f"""
[defaults]
fs_timeout = "{FS_TIMEOUT_S:g}s"
warn_after = "1h"
critical_after = "1h"

"""
        + (f'[notify]\nurls = ["{url}"]\n\n' if url else "")
        + f'[state]\npath = "{tmp_path / "state" / f"journal-{len(hung_paths)}.jsonl"}"\n\n'
        + "\n".join(tables),
    )


def _prime(tmp_path: Path, hung_paths: list[str], local: dict[str, str], now: datetime) -> None:
    """A run an hour before `now`, alerting off, on the same state journal: a kernel lock's
    hold is known only from the runs that saw it (sightings.py), so the run at `now` can tell
    the flock has been held at least its critical_after (a gap up to warn_after is continuous).
    Written under the name the config with `hung_paths` uses, without touching those paths."""
    config = _config(tmp_path, [], local, None)
    text = Path(config).read_text().replace("journal-0.jsonl", f"journal-{len(hung_paths)}.jsonl")
    Path(config).write_text(text)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "lockwarden",
            "--once",
            "--config",
            config,
            "--json",
            "--now",
            (now - timedelta(hours=1)).isoformat(),
        ],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=RUN_LIMIT_S,
        check=False,
    )
    primed = {lock["name"]: lock["state"] for lock in json.loads(done.stdout)["locks"]}
    assert primed["db"] == "held", done.stdout  # seen; not yet known to be past its budget


def _split(local: dict[str, str]) -> dict[str, tuple[str, str]]:
    return {name: (spec.split("|")[0], spec.split("|")[1]) for name, spec in local.items()}


def _lockwarden(hanging: HangingMounts, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the real CLI; one still running after RUN_LIMIT_S is stuck on a mount: the mounts
    are aborted (which frees it: SIGKILL alone does not) and the test fails, rather than
    waiting on it forever as subprocess.run would."""
    run = subprocess.Popen(
        [sys.executable, "-m", "lockwarden", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(),
    )
    try:
        stdout, stderr = run.communicate(timeout=RUN_LIMIT_S)
    except subprocess.TimeoutExpired:
        hanging.abort_all()
        run.kill()
        run.communicate()
        pytest.fail(f"lockwarden {args[0]} was still running after {RUN_LIMIT_S} s: hung")
    return subprocess.CompletedProcess(run.args, run.returncode, stdout, stderr)


def _timed_run(config: str, now: datetime, hanging: HangingMounts) -> tuple[float, dict]:  # type: ignore[type-arg]
    started = time.monotonic()
    done = _lockwarden(hanging, "--once", "--config", config, "--json", "--now", now.isoformat())
    elapsed = time.monotonic() - started
    assert done.stdout, done.stderr
    return elapsed, json.loads(done.stdout)


def _by_name(report: dict) -> dict[str, dict]:  # type: ignore[type-arg]
    return {lock["name"]: lock for lock in report["locks"]}


def _local_holders(tmp_path: Path, children: Children) -> tuple[dict[str, str], dict[str, int]]:
    started = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    record_lock = tmp_path / "store" / "LOCK"
    record_lock.parent.mkdir()
    flock_file = tmp_path / "db.lock"
    recorded = children.python(MKDIR_HOLDER, str(record_lock), "maintenance-job", started)
    flocked = children.python(FLOCK_HOLDER, str(flock_file))
    locks = {"store": f"{record_lock}|owner-record", "db": f"{flock_file}|kernel"}
    return locks, {"store": recorded.pid, "db": flocked.pid}


def test_hung_mount_costs_one_lock_and_the_run_finishes_within_its_deadline(
    tmp_path: Path,
    children: Children,
    hanging: HangingMounts,
    orphans: Orphans,
    receiver: Receiver,
) -> None:
    local, pids = _local_holders(tmp_path, children)
    now = (datetime.now(UTC) + LATER).replace(microsecond=0)  # the journal keeps whole seconds
    _prime(tmp_path, [], local, now)
    # The same locks without the hung one first: the floor the hung run is measured against.
    baseline_s, baseline = _timed_run(_config(tmp_path, [], local, receiver.url()), now, hanging)
    assert {lock["state"] for lock in baseline["locks"]} == {"held_too_long"}
    receiver.payloads.clear()

    mount = hanging.mount("hang")
    _prime(tmp_path, [str(mount / "store" / "LOCK")], local, now)
    hung_config = _config(tmp_path, [str(mount / "store" / "LOCK")], local, receiver.url())
    elapsed, report = _timed_run(hung_config, now, hanging)
    print(
        f"\nhung mount: run took {elapsed:.2f} s with fs_timeout {FS_TIMEOUT_S:g} s "
        f"(the same run without it: {baseline_s:.2f} s)"
    )

    locks = _by_name(report)
    hung = locks["hung-0"]
    assert (hung["state"], hung["unknown_cause"]) == ("unknown", "no_answer")
    assert f"{mount} (fuse.hangfs)" in hung["reason"]  # which mount, for the person
    for name, pid in pids.items():
        assert locks[name]["state"] == "held_too_long", locks[name]
        assert locks[name]["holders"][0]["pid"] == pid
    alerted = json.dumps(receiver.payloads)
    assert all(str(pid) in alerted for pid in pids.values()), alerted
    # The bound: within its deadline plus one second (over the run without the mount).
    assert elapsed - baseline_s < FS_TIMEOUT_S + 1.0

    stuck = orphans.workers()
    assert stuck, "the reading process stuck on the mount was abandoned, not waited for"
    hanging.abort(mount)
    assert orphans.reap(stuck) == [], "a reading process outlived the aborted mount"


def test_every_lock_on_a_hung_mount_is_unknown_and_the_mount_is_asked_once(
    tmp_path: Path, children: Children, hanging: HangingMounts, orphans: Orphans
) -> None:
    mount = hanging.mount("hang")
    paths = [str(mount / "store" / "LOCK"), str(mount / "store"), str(mount / "other" / "LOCK")]
    config = write_config(
        tmp_path / "config.toml",
        f'[defaults]\nfs_timeout = "{FS_TIMEOUT_S:g}s"\n'
        + "".join(f'[[lock]]\nname = "l{n}"\npath = "{p}"\n' for n, p in enumerate(paths)),
    )
    done = _lockwarden(hanging, "--once", "--config", config, "--json")
    locks = json.loads(done.stdout)["locks"]
    assert [(lock["state"], lock["unknown_cause"]) for lock in locks] == [
        ("unknown", "no_answer")
    ] * 3
    assert all(f"{mount} (fuse.hangfs)" in lock["reason"] for lock in locks)
    assert done.returncode == 3  # UNKNOWN
    # Three locks, one process stuck: once seen hung, the mount is not asked again.
    assert len(orphans.workers()) == 1
    hanging.abort(mount)


def test_a_state_directory_and_a_lock_on_one_hung_mount_cost_one_deadline(
    tmp_path: Path, children: Children, hanging: HangingMounts, orphans: Orphans
) -> None:
    """The state directory's probe and the claims are read by one process: the mount seen hung
    by the probe is not asked again for the lock on it, and the local lock is read as usual."""
    flock_file = tmp_path / "db.lock"
    flocked = children.python(FLOCK_HOLDER, str(flock_file))
    mount = hanging.mount("hang")
    config = write_config(
        tmp_path / "config.toml",
        f"""
[defaults]
fs_timeout = "{FS_TIMEOUT_S:g}s"
[state]
path = "{mount / "state" / "journal.jsonl"}"
[[lock]]
name = "on-mount"
path = "{mount / "store" / "LOCK"}"
[[lock]]
name = "db"
path = "{flock_file}"
format = "kernel"
""",
    )
    done = _lockwarden(hanging, "--once", "--config", config, "--json")
    locks = _by_name(json.loads(done.stdout))
    on_mount = locks["on-mount"]
    assert (on_mount["state"], on_mount["unknown_cause"]) == ("unknown", "no_answer")
    assert f"{mount} (fuse.hangfs)" in on_mount["reason"]  # which mount, for the person
    assert locks["db"]["state"] == "held"
    assert locks["db"]["holders"][0]["pid"] == flocked.pid
    assert f"state directory {mount / 'state'}" in done.stderr, done.stderr  # the lost memory
    assert len(orphans.workers()) == 1  # the probe's process, stuck; the claims went on
    hanging.abort(mount)


def test_a_mount_whose_contents_never_come_costs_the_lock_too(
    tmp_path: Path, hanging: HangingMounts, orphans: Orphans
) -> None:
    """Names and attributes answer (lstat, open), the read of the record never does."""
    mount = hanging.mount("hang-reads")
    config = write_config(
        tmp_path / "config.toml",
        f'[defaults]\nfs_timeout = "{FS_TIMEOUT_S:g}s"\n[[lock]]\nname = "reads"\n'
        f'path = "{mount / "store" / "LOCK"}"\nformat = "owner-record"\n',
    )
    done = _lockwarden(hanging, "--once", "--config", config, "--json")
    lock = json.loads(done.stdout)["locks"][0]
    assert (lock["state"], lock["unknown_cause"]) == ("unknown", "no_answer")
    assert f"{mount} (fuse.hangfs)" in lock["reason"]
    # A read waits for its page killably: the abandoned reader is gone at once, mount or not.
    assert wait_until(lambda: orphans.workers() == [])


def test_a_slow_mount_that_answers_within_the_deadline_is_read_normally(
    tmp_path: Path, hanging: HangingMounts, orphans: Orphans
) -> None:
    exited = subprocess.Popen(["true"])
    exited.wait()  # reaped: its PID now names no process
    mount = hanging.mount("slow", record_pid=exited.pid)
    config = write_config(
        tmp_path / "config.toml",
        f'[defaults]\nfs_timeout = "10s"\n[[lock]]\nname = "slow"\n'
        f'path = "{mount / "store" / "LOCK"}"\nformat = "owner-record"\n',
    )
    done = _lockwarden(hanging, "--once", "--config", config, "--json")
    lock = json.loads(done.stdout)["locks"][0]
    # The record names a PID no process has: read through the slow mount, judged stale.
    assert lock["state"] == "stale", lock["reason"]
    assert str(exited.pid) in lock["reason"]
    assert orphans.workers() == []


def test_discover_walking_into_a_hung_mount_names_it_and_finds_the_rest(
    tmp_path: Path, hanging: HangingMounts, orphans: Orphans
) -> None:
    root = tmp_path / "mnt"
    root.mkdir()
    emacs_lock = root / ".#notes.txt"
    os.symlink(f"someone@{socket.gethostname()}.{os.getpid()}:0", emacs_lock)
    mount = hanging.mount("hang")
    started = time.monotonic()
    done = _lockwarden(hanging, "discover", str(root), "--json")
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    paths = [lock["path"] for lock in found["locks"]]
    assert str(emacs_lock) in paths
    notes = " ".join(found["notes"])
    assert f"{mount}: not walked (its file system did not answer" in notes
    assert f"{mount} (fuse.hangfs)" in notes
    assert elapsed < 3 * 3.0 + 5  # bounded by the default fs_timeout, never hung
    stuck = orphans.workers()
    hanging.abort(mount)
    assert orphans.reap(stuck) == []


def test_init_walking_into_a_hung_mount_writes_the_config_without_it(
    tmp_path: Path, hanging: HangingMounts, orphans: Orphans
) -> None:
    root = tmp_path / "mnt"
    root.mkdir()
    emacs_lock = root / ".#notes.txt"
    os.symlink(f"someone@{socket.gethostname()}.{os.getpid()}:0", emacs_lock)
    mount = hanging.mount("hang")
    written = tmp_path / "config.toml"
    done = _lockwarden(hanging, "init", str(root), "--path", str(written))
    assert done.returncode == 0, done.stderr
    text = written.read_text()
    assert str(emacs_lock) in text
    assert str(mount) not in text
    stuck = orphans.workers()
    hanging.abort(mount)
    assert orphans.reap(stuck) == []


def test_state_directory_on_a_hung_mount_the_run_reports_and_the_next_run_recovers(
    tmp_path: Path,
    children: Children,
    hanging: HangingMounts,
    orphans: Orphans,
    receiver: Receiver,
) -> None:
    # A lock with a dated record: with the state directory unusable there is no sighting
    # memory, so a kernel lock could not be shown past its budget (sightings.py).
    lock = tmp_path / "db" / "LOCK"
    lock.parent.mkdir()
    started = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    holder = children.python(MKDIR_HOLDER, str(lock), "migration", started)
    mount = hanging.mount("hang")
    config = write_config(
        tmp_path / "config.toml",
        f"""
[defaults]
fs_timeout = "{FS_TIMEOUT_S:g}s"
[notify]
urls = ["{receiver.url()}"]
[state]
path = "{mount / "state" / "journal.jsonl"}"
[[lock]]
name = "db"
path = "{lock}"
format = "owner-record"
""",
    )
    now = (datetime.now(UTC) + LATER).isoformat()
    done = _lockwarden(hanging, "--once", "--config", config, "--json", "--now", now)
    locks = _by_name(json.loads(done.stdout))
    assert locks["db"]["state"] == "held_too_long"
    assert str(holder.pid) in json.dumps(receiver.payloads)  # alerted all the same
    degraded = " ".join(lock["reason"] for lock in locks.values())
    assert "state degraded" in degraded and f"{mount} (fuse.hangfs)" in degraded
    stuck = orphans.workers()
    hanging.abort(mount)
    assert orphans.reap(stuck) == []

    # The share is gone (unmounted): the next run finds a plain directory and works again.
    receiver.payloads.clear()
    again = _lockwarden(hanging, "--once", "--config", config, "--json", "--now", now)
    report = _by_name(json.loads(again.stdout))
    assert set(report) == {"db"}, report
    # What the degraded run sent was kept in the runtime directory and is moved into the
    # journal now: the alert is not sent again, only the notice that the state is usable.
    titles = [str(payload["title"]) for payload in receiver.payloads]
    assert len(titles) == 1 and titles[0].endswith("lockwarden state usable again"), titles
    assert str(holder.pid) in (mount / "state" / "journal.jsonl").read_text()


def test_a_mount_that_stops_answering_mid_run_is_not_asked_again_by_a_later_look(
    tmp_path: Path, children: Children, hanging: HangingMounts, orphans: Orphans
) -> None:
    """The first lock's record is read, then the mount stops answering (the second lock's
    read is the first it leaves unanswered). The first lock names a dead PID: stale, so it
    gets a second look, which must not ask the mount seen hung again: one deadline and one
    stuck reading process for the run, not one per look."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    mount = hanging.mount("hang-from-trap", record_pid=gone.pid)
    config = write_config(
        tmp_path / "config.toml",
        f'[defaults]\nfs_timeout = "{FS_TIMEOUT_S:g}s"\n'
        f'[[lock]]\nname = "read"\npath = "{mount / "store" / "LOCK"}"\nformat = "owner-record"\n'
        f'[[lock]]\nname = "trap"\npath = "{mount / "trap" / "LOCK"}"\nformat = "kernel"\n',
    )
    started = time.monotonic()
    done = _lockwarden(hanging, "--once", "--config", config, "--json")
    elapsed = time.monotonic() - started
    locks = _by_name(json.loads(done.stdout))
    assert (locks["trap"]["state"], locks["trap"]["unknown_cause"]) == ("unknown", "no_answer")
    read = locks["read"]
    assert (read["state"], read["unknown_cause"]) == ("unknown", "no_answer"), read
    assert f"{mount} (fuse.hangfs)" in read["reason"]
    assert len(orphans.workers()) == 1, "a later look asked the hung mount again"
    assert elapsed < 2 * FS_TIMEOUT_S, f"{elapsed:.2f} s: more than one deadline"
    hanging.abort(mount)


def test_inspect_of_a_configured_lock_judges_it_with_its_state_directory_on_a_hung_mount(
    tmp_path: Path, children: Children, hanging: HangingMounts, orphans: Orphans
) -> None:
    """`inspect --config` reads the runs' sighting memory in the state directory: on a mount
    that does not answer it must judge without it, as a run does, not wait on it forever."""
    flock_file = tmp_path / "db.lock"
    flocked = children.python(FLOCK_HOLDER, str(flock_file))
    mount = hanging.mount("hang")
    config = write_config(
        tmp_path / "config.toml",
        f"""
[defaults]
fs_timeout = "{FS_TIMEOUT_S:g}s"
[state]
path = "{mount / "state" / "journal.jsonl"}"
[[lock]]
name = "db"
path = "{flock_file}"
format = "kernel"
""",
    )
    done = _lockwarden(hanging, "inspect", "--config", config, "--json", str(flock_file))
    [lock] = json.loads(done.stdout)["locks"]
    assert lock["state"] == "held", done.stdout
    assert lock["holders"][0]["pid"] == flocked.pid
    assert f"state directory {mount / 'state'}" in done.stderr, done.stderr  # the lost memory
    hanging.abort(mount)
    assert orphans.reap(orphans.workers()) == []
