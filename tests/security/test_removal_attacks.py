"""Attacks on stale-lock removal (`remove_stale`), run as root against a real unprivileged
user (`lw-mallory`) who owns the directory the lock is configured in, through the real CLI.

Removal removes only the lock, only through a path nobody but root and the lock's owner can
change (formats/trust.py: every component walked with O_NOFOLLOW relative to the one before),
and only the lock's own files: a lock directory holding a tree is refused whole. The action
line printed for a stale lock is held to the same rules.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from conftest import Children, cli_env, run_cli, wait_until
from hung.conftest import HangingMounts, hanging
from security.conftest import User

__all__ = ["hanging"]  # the fixture, imported so pytest finds it here

RUNS = (0, 3)  # minutes after the start: a first sighting, then a removal (stale_confirm 2m)


def dead_record() -> str:
    """A JSON owner record naming this host and the PID of a process that has exited."""
    probe = subprocess.Popen(["true"])
    probe.wait(timeout=10)
    return json.dumps({"pid": probe.pid, "role": "gone", "host": socket.gethostname()})


class Removal:
    """One owner-record lock with remove_stale at `lock`, its state journal in `tmp_path`."""

    def __init__(self, tmp_path: Path, lock: Path) -> None:
        self.lock = lock
        self.config = tmp_path / "lockwarden.toml"
        state = tmp_path / "state"
        state.mkdir(mode=0o700, exist_ok=True)
        self.config.write_text(
            f"""
[state]
path = {json.dumps(str(state / "state.jsonl"))}

[[lock]]
name = "store"
path = {json.dumps(str(lock))}
format = "owner-record"
remove_stale = true
stale_confirm = "2m"
"""
        )
        self.base = datetime.now(UTC)

    def finding(self, minutes: float) -> dict[str, Any]:
        moment = (self.base + timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")
        done = run_cli("--once", "--json", "--config", str(self.config), "--now", moment)
        assert done.stdout, done.stderr
        found: dict[str, Any] = json.loads(done.stdout)["locks"][0]
        return found

    def runs(self) -> list[dict[str, Any]]:
        return [self.finding(minutes) for minutes in RUNS]


def refused(finding: dict[str, Any]) -> str:
    status = finding["removal_status"]
    assert status is not None and status["step"] == "not_removed", finding
    return str(finding["removal"])


@pytest.fixture
def shared() -> Iterator[Path]:
    """A root-owned directory every user may enter (tmp_path is root's alone), for the
    attacker's own directory to live in."""
    base = Path(tempfile.mkdtemp(prefix="lw-removal-", dir="/tmp"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def as_user(user: User, script: str, *args: str) -> None:
    subprocess.run(user.command("/bin/sh", "-c", script, "sh", *args), check=True, timeout=30)


def attackers_directory(shared: Path, user: User) -> Path:
    home = shared / "mallory"
    home.mkdir(mode=0o755)
    os.chown(home, user.uid, user.gid)
    return home


def victim_tree(tmp_path: Path) -> Path:
    """Root's directory with a lock directory that looks stale and a database beside it."""
    victim = tmp_path / "victim"
    (victim / "LOCK" / "data").mkdir(parents=True)
    (victim / "LOCK" / "owner.json").write_text(dead_record())
    (victim / "LOCK" / "data" / "important.db").write_text("root's data")
    victim.chmod(0o755)
    return victim


def test_a_parent_swapped_for_a_symlink_to_roots_directory_removes_nothing_of_it(
    tmp_path: Path, shared: Path, attacker: User
) -> None:
    home = attackers_directory(shared, attacker)
    victim = victim_tree(tmp_path)
    lock = home / "d" / "LOCK"
    as_user(
        attacker,
        'mkdir -p "$1/LOCK" && printf %s "$2" > "$1/LOCK/owner.json"',
        str(home / "d"),
        dead_record(),
    )
    removal = Removal(tmp_path, lock)
    # her own stale lock, then `d` swapped for a symlink to root's directory before the runs
    as_user(attacker, 'mv "$1/d" "$1/d.mine" && ln -s "$2" "$1/d"', str(home), str(victim))
    for finding in removal.runs():
        assert finding["state"] == "stale", finding
        why = refused(finding)
        assert f"symbolic link {home / 'd'}" in why and f"uid {attacker.uid}" in why, why
        assert finding["action"] is None  # no `rm -r` through her symlink either
        assert "no command to remove it is offered" in (finding["note"] or ""), finding
    assert (victim / "LOCK" / "data" / "important.db").read_text() == "root's data"
    assert (victim / "LOCK" / "owner.json").exists()
    assert not [name for name in os.listdir(victim) if "lockwarden-removed" in name]


RACER = """
cd "$1" || exit 1
while :; do
    mv d d.real 2>/dev/null && ln -s "$2" d 2>/dev/null
    rm -f d 2>/dev/null; mv d.real d 2>/dev/null
done
"""


def test_a_parent_swapped_back_and_forth_during_the_runs_never_leads_root_to_the_victim(
    tmp_path: Path, shared: Path, attacker: User, children: Children
) -> None:
    home = attackers_directory(shared, attacker)
    victim = victim_tree(tmp_path)
    as_user(
        attacker,
        'mkdir -p "$1/LOCK" && printf %s "$2" > "$1/LOCK/owner.json"',
        str(home / "d"),
        dead_record(),
    )
    removal = Removal(tmp_path, home / "d" / "LOCK")
    racer = children.start(attacker.command("/bin/sh", "-c", RACER, "sh", str(home), str(victim)))
    assert wait_until(lambda: (home / "d").is_symlink() or (home / "d.real").exists(), 10)
    for minutes in (0, 3, 6, 9, 12):
        finding = removal.finding(minutes)
        action = finding["action"]["line"] if finding["action"] else ""
        assert not action.startswith("rm "), finding
    racer.kill()
    racer.wait(timeout=10)
    assert (victim / "LOCK" / "data" / "important.db").read_text() == "root's data"
    assert (victim / "LOCK" / "owner.json").exists()


def test_her_own_stale_lock_is_removed_and_its_command_runs_as_her(
    tmp_path: Path, shared: Path, attacker: User
) -> None:
    home = attackers_directory(shared, attacker)
    lock = home / "d" / "LOCK"
    as_user(attacker, 'mkdir -p "$1" && printf %s "$2" > "$1/owner.json"', str(lock), dead_record())
    removal = Removal(tmp_path, lock)
    first, second = removal.runs()
    # She can swap what is hers, so a command pasted into a root shell later runs as her.
    assert first["action"]["line"] == (
        f"setpriv --reuid={attacker.uid} --regid={attacker.gid} --clear-groups -- rm -r -- {lock}"
    )
    assert second["removal_status"]["step"] == "removed", second
    assert not lock.exists()


def lock_directory(tmp_path: Path) -> Path:
    lock = tmp_path / "store" / "LOCK"
    lock.mkdir(parents=True)
    (lock / "owner.json").write_text(dead_record())
    return lock


def test_a_lock_directory_holding_a_spool_of_1000_files_is_not_removed(tmp_path: Path) -> None:
    lock = lock_directory(tmp_path)
    spool = lock / "spool"
    spool.mkdir()
    for number in range(1000):
        (spool / f"message-{number}").write_text("queued")
    for finding in Removal(tmp_path, lock).runs():
        assert "more than 256 entries" in refused(finding), finding
        assert finding["action"] is None
    assert len(os.listdir(spool)) == 1000 and (lock / "owner.json").exists()


def test_a_lock_directory_deeper_than_a_lock_is_not_removed(tmp_path: Path) -> None:
    lock = lock_directory(tmp_path)
    deep = lock / "a" / "b" / "c"
    deep.mkdir(parents=True)
    (deep / "kept").write_text("keep me")
    for finding in Removal(tmp_path, lock).runs():
        assert "deeper than a lock directory's 2 levels" in refused(finding), finding
        assert finding["action"] is None
    assert (deep / "kept").read_text() == "keep me" and (lock / "owner.json").exists()


def test_a_lock_directory_with_a_few_files_of_its_own_is_still_removed(tmp_path: Path) -> None:
    lock = lock_directory(tmp_path)
    (lock / "extra").mkdir()
    (lock / "extra" / "note").write_text("the holder's own")
    first, second = Removal(tmp_path, lock).runs()
    assert first["action"]["line"] == f"rm -r -- {lock}"
    assert second["removal_status"]["step"] == "removed", second
    assert not lock.exists()


# A flaky mount must not hang the removal stage: the lock is read fine by the check stage,
# then its file system stops answering right before removal (the run's `after-snapshot`
# checkpoint makes the flag hangfs waits for). The run must end within its deadlines, the
# lock's removal refused with the mount named.

FLAG_AT_STEP = """
import sys
from pathlib import Path
from lockwarden.cli.commands import main

flag, argv = sys.argv[1], sys.argv[2:]

def checkpoint(step):
    if step == "after-snapshot":  # right before the removal stage
        Path(flag).touch()

sys.exit(main(argv, checkpoint=checkpoint))
"""
HUNG_RUN_LIMIT_S = 30


def test_a_mount_that_stops_answering_before_removal_costs_that_lock_not_the_run(
    tmp_path: Path, hanging: HangingMounts
) -> None:
    probe = subprocess.Popen(["true"])
    probe.wait(timeout=10)
    flag = tmp_path / "hang-now"
    mount = hanging.mount("hang-when-flagged", record_pid=probe.pid, flag=flag)
    removal = Removal(tmp_path, mount / "store" / "LOCK")
    text = removal.config.read_text().replace(
        "[[lock]]", '[defaults]\nfs_timeout = "1s"\n\n[[lock]]'
    )
    removal.config.write_text(text)
    argv = ["--once", "--json", "--config", str(removal.config)]
    run = subprocess.Popen(
        [sys.executable, "-c", FLAG_AT_STEP, str(flag), *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(),
    )
    try:
        stdout, stderr = run.communicate(timeout=HUNG_RUN_LIMIT_S)
    except subprocess.TimeoutExpired:
        hanging.abort_all()  # what frees a process stuck on the mount: SIGKILL alone does not
        run.kill()
        run.communicate()
        pytest.fail(f"the run was still in its removal stage after {HUNG_RUN_LIMIT_S} s: hung")
    assert flag.exists(), stderr  # the check stage read it, then the mount stopped answering
    finding = json.loads(stdout)["locks"][0]
    assert finding["state"] == "stale", finding
    why = refused(finding)
    assert "did not answer within 1s" in why and str(mount) in why, why
