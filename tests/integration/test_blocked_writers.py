"""Blocked writers anywhere on the host, with no config for their lock: real holders and real
waiters (flock(2) and fcntl(F_SETLKW)) on files nobody configured, judged by the real `--once`
run after run (`--now` steps the clock, the state journal keeps the sighting memory), against
the ground truth the test made: which files someone waits on, and who holds them."""

from __future__ import annotations

import json
import random
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from conftest import (
    FLOCK_HOLDER,
    OFD_HOLDER,
    POSIX_HOLDER,
    Children,
    expected_code,
    run_cli,
    wait_until,
    write_config,
)
from integration.test_why import WAITER, blocked_in_lock_call

HOLDERS = {"flock": FLOCK_HOLDER, "posix": POSIX_HOLDER, "ofd": OFD_HOLDER}


def config_for(tmp_path: Path, extra: str = "") -> str:
    """A config whose only lock is an unrelated one: the blocked locks are nobody's."""
    quiet = tmp_path / "quiet.lock"
    quiet.touch()
    return write_config(
        tmp_path / "config.toml",
        f'[state]\npath = "{tmp_path / "state" / "state.jsonl"}"\n'
        '[host]\nblocked_after = "10m"\nblocked_critical_after = "1h"\n'
        f'{extra}[[lock]]\nname = "quiet"\npath = "{quiet}"\nformat = "kernel"\n',
    )


def held_and_awaited(
    children: Children, lock: Path
) -> tuple[subprocess.Popen[str], subprocess.Popen[str]]:
    """A flock holder of `lock` and a writer the kernel shows blocked behind it."""
    lock.touch()
    holder = children.python(FLOCK_HOLDER, str(lock))
    waiter = children.python(WAITER, str(lock), "flock")
    assert wait_until(lambda: blocked_in_lock_call(waiter.pid), timeout=10)
    return holder, waiter


def once(config: str, at: datetime) -> tuple[int, dict[str, Any]]:
    completed = run_cli("--once", "--json", "--config", config, "--now", at.isoformat())
    assert completed.stdout, completed.stderr
    return completed.returncode, json.loads(completed.stdout)


def blocked(document: dict[str, Any], root: Path) -> dict[str, dict[str, Any]]:
    """The blocked-writer findings on the test's own files (under `root`): a writer blocked
    elsewhere on the host is not the test's to judge."""
    return {
        lock["path"]: lock
        for lock in document["locks"]
        if lock["name"].startswith("blocked:") and Path(lock["path"]).is_relative_to(root)
    }


def test_a_writer_blocked_on_an_unconfigured_lock_pages_after_the_budget_then_resolves(
    tmp_path: Path, children: Children
) -> None:
    """The first run sees the wait and only starts counting; ten minutes of runs later it is
    a warning naming the waiter, the lock, the holder and `kill`; past an hour critical; once
    the holder is gone and the waiter has its lock, nothing is blocked."""
    lock = tmp_path / "orders.lock"
    holder, waiter = held_and_awaited(children, lock)
    config = config_for(tmp_path)
    start = datetime.now(UTC)

    code, first = once(config, start)
    assert code == expected_code(0, first, tmp_path), first
    assert blocked(first, tmp_path) == {}, first  # within budget: remembered, not said
    minutes = [1, 2, 5, 8, 11]
    for minute in minutes:
        code, document = once(config, start + timedelta(minutes=minute))
    assert code == expected_code(1, document, tmp_path), document
    finding = blocked(document, tmp_path)[str(lock)]
    assert finding["name"] == f"blocked:{lock}"
    assert finding["state"] == "held_too_long" and finding["severity"] == "warning"
    assert [h["pid"] for h in finding["holders"]] == [holder.pid]
    assert [w["pid"] for w in finding["waiters"]] == [waiter.pid]
    assert finding["action"]["argv"] == ["kill", str(holder.pid)]
    assert finding["held"]["bound"] == "at_least" and finding["held"]["seconds"] >= 660
    assert f"PID {waiter.pid} (" in finding["reason"] and f"PID {holder.pid}" in finding["reason"]

    code, later = once(config, start + timedelta(minutes=62))
    assert code == expected_code(0, later, tmp_path), later
    assert blocked(later, tmp_path) == {}, later  # a 51-minute gap: counted afresh
    for minute in range(63, 136, 9):  # the last at 126: 64 minutes blocked
        code, later = once(config, start + timedelta(minutes=minute))
    assert code == expected_code(2, later, tmp_path), later
    assert blocked(later, tmp_path)[str(lock)]["severity"] == "critical", later

    holder.kill()
    holder.wait(timeout=10)
    assert wait_until(lambda: not blocked_in_lock_call(waiter.pid), timeout=10)
    code, after = once(config, start + timedelta(minutes=128))
    assert code == expected_code(0, after, tmp_path), after
    assert blocked(after, tmp_path) == {}, after


def test_a_daemons_lock_with_nobody_waiting_and_a_configured_locks_waiter_are_not_findings(
    tmp_path: Path, children: Children
) -> None:
    daemon = tmp_path / "daemon.pid"
    daemon.touch()
    children.python(FLOCK_HOLDER, str(daemon))  # held for its lifetime, nobody waits
    configured = tmp_path / "quiet.lock"
    _holder, waiter = held_and_awaited(children, configured)
    config = config_for(tmp_path)
    start = datetime.now(UTC)
    for minute in (0, 1, 5, 9, 13, 20):
        _code, document = once(config, start + timedelta(minutes=minute))
    assert blocked(document, tmp_path) == {}, document
    [quiet] = [lock for lock in document["locks"] if lock["name"] == "quiet"]
    assert [w["pid"] for w in quiet["waiters"]] == [waiter.pid]  # said there, once


def test_blocked_writers_can_be_turned_off(tmp_path: Path, children: Children) -> None:
    lock = tmp_path / "orders.lock"
    _holder, _waiter = held_and_awaited(children, lock)
    config = config_for(tmp_path)
    config = write_config(
        Path(config),
        Path(config).read_text().replace("[host]\n", "[host]\nblocked_writers = false\n"),
    )
    start = datetime.now(UTC)
    for minute in (0, 6, 12):
        code, document = once(config, start + timedelta(minutes=minute))
    assert code == expected_code(0, document, tmp_path), document
    assert blocked(document, tmp_path) == {}, document


def test_randomized_blocked_writers_match_the_ground_truth(
    tmp_path: Path, children: Children
) -> None:
    """Random files, each free, held with nobody waiting, or held with one or two waiters, in
    flock, POSIX and OFD styles (an OFD wait shows no PID in /proc/locks): after the budget,
    exactly the files someone waits on are findings, each naming exactly the holder the test
    started and every waiter."""
    rng = random.Random(0x10C4)
    for round_number in range(4):
        directory = tmp_path / f"round-{round_number}"
        directory.mkdir()
        truth: dict[str, tuple[int, set[int]]] = {}
        for index in range(rng.randint(2, 4)):
            path = directory / f"file-{index}.lock"
            path.touch()
            kind = rng.choice(["free", "held", "waited", "waited"])
            if kind == "free":
                continue
            style = rng.choice(["flock", "posix", "ofd"])
            holder = children.python(HOLDERS[style], str(path))
            if kind == "held":
                continue
            waiters = [children.python(WAITER, str(path), style) for _ in range(rng.randint(1, 2))]
            for waiter in waiters:
                assert wait_until(lambda w=waiter: blocked_in_lock_call(w.pid), timeout=10)
            truth[str(path)] = (holder.pid, {waiter.pid for waiter in waiters})
        config = config_for(directory)
        start = datetime.now(UTC)
        for minute in (0, 4, 8, 11):
            _code, document = once(config, start + timedelta(minutes=minute))
        found = blocked(document, directory)
        assert set(found) == set(truth), (round_number, truth, found)
        for path, (holder_pid, waiter_pids) in truth.items():
            assert [h["pid"] for h in found[path]["holders"]] == [holder_pid], found[path]
            assert {w["pid"] for w in found[path]["waiters"]} == waiter_pids, found[path]
            assert found[path]["action"]["argv"] == ["kill", str(holder_pid)]
        children.cleanup()  # the next round starts from nothing held


def test_a_holder_that_blocks_each_client_for_a_moment_is_not_a_long_wait(
    tmp_path: Path, children: Children
) -> None:
    """Every run sees someone blocked behind the same holder, but never the same writer: no
    writer has been seen waiting across runs, so no wait is known to be long."""
    lock = tmp_path / "orders.lock"
    lock.touch()
    children.python(FLOCK_HOLDER, str(lock))
    config = config_for(tmp_path)
    start = datetime.now(UTC)
    for minute in (0, 4, 8, 11, 15):
        waiter = children.python(WAITER, str(lock), "flock")
        assert wait_until(lambda w=waiter: blocked_in_lock_call(w.pid), timeout=10)
        code, document = once(config, start + timedelta(minutes=minute))
        waiter.kill()
        waiter.wait(timeout=10)
    assert code == expected_code(0, document, tmp_path), document
    assert blocked(document, tmp_path) == {}, document


def test_under_a_private_mount_namespace_the_lock_keeps_its_host_path(
    tmp_path: Path, children: Children
) -> None:
    """The shipped unit runs lockwarden in a mount namespace of its own (ProtectSystem=,
    PrivateMounts=): a waiter on the host is still named by the host's path, so the finding's
    name does not change with the waiter (a `/proc/PID/root/...` name would)."""
    import sys

    from conftest import cli_env, require_tool

    lock = tmp_path / "orders.lock"
    _holder, _waiter = held_and_awaited(children, lock)
    config = config_for(tmp_path)
    start = datetime.now(UTC)
    for minute in (0, 6, 12):
        completed = subprocess.run(
            [require_tool("unshare"), "--mount", "--propagation", "private",
             sys.executable, "-m", "lockwarden", "--once", "--json", "--config", config,
             "--now", (start + timedelta(minutes=minute)).isoformat()],
            capture_output=True, text=True, timeout=60, env=cli_env(), check=False,
        )  # fmt: skip
    assert set(blocked(json.loads(completed.stdout), tmp_path)) == {str(lock)}, completed.stdout[
        -2000:
    ]
