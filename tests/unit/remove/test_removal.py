"""Guarded stale-lock removal (`remove_stale = true`), through the real CLI (`python -m
lockwarden --once`), with real child processes holding real locks, real files in tmp dirs and a
real HTTP receiver (apprise `json://`) on 127.0.0.1. The clock moves with `--now`: a holder
takes its lock at about the real "now" (`base`), and runs happen at base + N minutes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psutil
import pytest

from alerts.helpers import Receiver, receiver, tiny_tmpfs
from conftest import FLOCK_HOLDER, MKDIR_HOLDER, Children, require_tool, run_cli, wait_until

__all__ = ["receiver", "tiny_tmpfs"]  # the fixtures, imported so pytest finds them here

OPENER = """
import sys, time
handle = open(sys.argv[1])
print("ready", flush=True)
time.sleep(120)
"""


GIT_ENVIRONMENT = {"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_SYSTEM": "/dev/null"}


def git(repository: Path, *argv: str, **extra: str) -> list[str]:
    environment = {**os.environ, **GIT_ENVIRONMENT, **extra}
    command = [require_tool("git"), *argv]
    subprocess.run(command, cwd=repository, check=True, env=environment)
    return command


def make_repository(path: Path) -> Path:
    path.mkdir()
    git(path, "init", "-q")
    git(path, "config", "user.email", "test@example.org")
    git(path, "config", "user.name", "Test")
    (path / "file").write_text("one\n")
    git(path, "add", "file")
    git(path, "commit", "-qm", "one")
    (path / "file").write_text("two\n")
    return path


def kill_commit_waiting_for_its_editor(children: Children, repository: Path) -> None:
    """`git commit -a --edit` whose editor sleeps holds index.lock; SIGKILL leaves it behind."""
    environment = {**os.environ, **GIT_ENVIRONMENT, "GIT_EDITOR": "sleep 120; :"}
    commit = children.start(
        [require_tool("git"), "commit", "-a", "--edit", "-q"], cwd=repository, env=environment
    )
    editor = wait_until(lambda: _sleeping_children(commit.pid), timeout=10)
    assert editor, "git did not start its editor"
    for pid in _sleeping_children(commit.pid):
        children.track(pid)  # the editor's shell and sleep, killed at teardown too
    commit.send_signal(signal.SIGKILL)
    commit.wait(timeout=10)


def _sleeping_children(pid: int) -> list[int]:
    family = psutil.Process(pid).children(recursive=True)
    if not any(child.name() == "sleep" for child in family):
        return []
    return [child.pid for child in family]


class Store:
    """One store lock with remove_stale, its state journal, and the CLI run at base + minutes."""

    def __init__(self, tmp_path: Path, children: Children, lock_name: str = "LOCK") -> None:
        self.tmp_path = tmp_path
        self.children = children
        self.store = tmp_path / "store"
        self.store.mkdir()
        self.lock = self.store / lock_name
        self.state_dir = tmp_path / "state"
        self.state_dir.mkdir(mode=0o700)
        self.journal = self.state_dir / "state.jsonl"
        self.config = tmp_path / "lockwarden.toml"
        self.base = datetime.now(UTC)
        self.configure()

    def configure(self, urls: tuple[str, ...] = (), lock_format: str = "auto") -> None:
        notify = f"[notify]\nurls = {json.dumps(list(urls))}\ntimeout = '3s'\n" if urls else ""
        self.config.write_text(
            f"""
[state]
path = {json.dumps(str(self.journal))}

{notify}
[[lock]]
name = "wa-store"
path = {json.dumps(str(self.lock))}
format = "{lock_format}"
remove_stale = true
stale_confirm = "2m"
"""
        )

    def hold(self, role: str = "resync") -> subprocess.Popen[str]:
        started = self.base.strftime("%Y-%m-%dT%H:%M:%SZ")
        return self.children.python(MKDIR_HOLDER, str(self.lock), role, started)

    def hold_and_die(self, role: str = "resync") -> int:
        """A holder killed with SIGKILL: its lock directory is left behind."""
        holder = self.hold(role)
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=10)
        assert self.lock.is_dir()
        return holder.pid

    def once(self, minutes: float, *extra: str) -> dict[str, Any]:
        moment = (self.base + timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")
        done = run_cli("--once", "--json", "--config", str(self.config), "--now", moment, *extra)
        assert done.stdout, done.stderr
        document: dict[str, Any] = json.loads(done.stdout)
        return document

    def finding(self, minutes: float, *extra: str) -> dict[str, Any]:
        found: dict[str, Any] = self.once(minutes, *extra)["locks"][0]
        return found

    def records(self, kind: str) -> list[dict[str, Any]]:
        if not self.journal.exists():
            return []
        lines = self.journal.read_text().splitlines()
        return [record for record in map(json.loads, lines) if record["type"] == kind]

    def leftovers(self) -> list[str]:
        return sorted(name for name in os.listdir(self.store) if "lockwarden-removed" in name)


def dead_record(role: str = "gone") -> str:
    """A JSON owner record naming this host and the PID of a process that has exited."""
    probe = subprocess.Popen(["true"])
    probe.wait(timeout=10)
    return json.dumps({"pid": probe.pid, "role": role, "host": socket.gethostname()})


def step(finding: dict[str, Any]) -> str | None:
    """Where removal of the lock stands, as the report's removal_status says it."""
    status = finding["removal_status"]
    return None if status is None else status["step"]


def moment(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp)


@pytest.fixture
def store(tmp_path: Path, children: Children) -> Store:
    return Store(tmp_path, children)


def test_stale_lock_removed_after_two_sightings_stale_confirm_apart_and_notified(
    store: Store, receiver: Receiver
) -> None:
    store.configure(urls=(receiver.url(),))
    dead = store.hold_and_die()

    first = store.finding(0)
    assert first["state"] == "stale" and str(dead) in first["proof"]
    assert step(first) == "seen_once"
    assert first["removal"].startswith("seen once; will remove after 2m")
    status = first["removal_status"]
    assert moment(status["remove_at"]) - moment(status["stale_since"]) == timedelta(minutes=2)
    assert store.lock.is_dir()
    too_soon = store.finding(1)
    assert too_soon["state"] == "stale"
    assert step(too_soon) == "confirming"
    assert too_soon["removal_status"]["remove_at"] == status["remove_at"]
    assert too_soon["removal"].startswith("seen stale since ")
    assert "will remove at " in too_soon["removal"]
    assert store.lock.is_dir()
    assert len(store.records("sighting")) == 1  # the second sighting adds no record

    removed = store.finding(2)
    assert removed["state"] == "free", removed
    assert step(removed) == "removed"
    assert removed["removal_status"]["stale_since"] == status["stale_since"]
    assert removed["removal"].startswith(f"removed ({store.lock} was stale since ")
    assert f"PID {dead} is not running" in removed["removal"]
    assert ".LOCK.lockwarden-removed-" in removed["removal"]
    assert not store.lock.exists() and store.leftovers() == []
    [record] = store.records("removed")
    assert record["path"] == str(store.lock) and f"PID {dead}" in record["proof"]
    assert os.path.basename(record["quarantine"]).startswith(".LOCK.lockwarden-removed-")
    assert removed["removal_status"]["moved_aside_as"] == record["quarantine"]

    removal_notices = [p for p in receiver.payloads if str(p["title"]).startswith("removed")]
    assert len(removal_notices) == 1
    assert removal_notices[0]["title"] == f"removed stale lock: wa-store ({store.lock})"
    body = str(removal_notices[0]["message"])
    assert f"PID {dead} is not running" in body and ".LOCK.lockwarden-removed-" in body
    titles = [str(payload["title"]) for payload in receiver.payloads]
    resolved = next(n for n, title in enumerate(titles) if title.startswith("RESOLVED "))
    assert titles.index(removal_notices[0]["title"]) < resolved  # what was done, then the end
    assert store.finding(10)["removal"] is None  # nothing left to remove, nothing said


def test_two_sightings_closer_than_stale_confirm_remove_nothing(store: Store) -> None:
    store.hold_and_die()
    for minutes in (0, 0.5, 1, 1.9):
        finding = store.finding(minutes)
        assert finding["state"] == "stale"
        assert step(finding) in {"seen_once", "confirming"}, finding
    assert store.lock.is_dir()
    assert store.records("removed") == []


def test_no_removal_without_a_usable_state_journal(store: Store) -> None:
    """Sightings live in the journal: a state directory anyone can write is refused, and then
    nothing is ever removed (nor recorded)."""
    store.hold_and_die()
    store.state_dir.chmod(0o777)
    for minutes in (0, 3, 10):
        finding = store.finding(minutes)
        assert step(finding) == "not_removed"
        assert finding["removal"].startswith("not removed: the state journal is unusable")
        assert "writable by every user" in finding["removal"]
    assert store.lock.is_dir() and not store.journal.exists()


def test_a_live_holder_is_never_removed(store: Store) -> None:
    holder = store.hold()
    for minutes in (0, 3, 30, 120):
        finding = store.finding(minutes)
        assert finding["state"] in ("held", "held_too_long")
        assert finding["holders"][0]["pid"] == holder.pid
        assert finding["removal"] is None
    assert store.lock.is_dir() and store.records("sighting") == []


def test_a_lock_reacquired_between_sightings_is_not_removed(store: Store) -> None:
    store.hold_and_die("first")
    assert step(store.finding(0)) == "seen_once"
    shutil.rmtree(store.lock)  # the next job breaks the stale lock and takes its own
    second = store.hold("second")
    held = store.finding(3)
    assert held["state"] == "held" and held["holders"][0]["pid"] == second.pid
    assert store.lock.is_dir()
    second.send_signal(signal.SIGKILL)
    second.wait(timeout=10)
    stale_again = store.finding(4)  # stale again, but another record (and likely inode)
    assert stale_again["state"] == "stale" and str(second.pid) in stale_again["proof"]
    assert step(stale_again) == "seen_once"
    assert store.lock.is_dir() and store.records("removed") == []
    assert len({record["key"] for record in store.records("sighting")}) == 2


def test_a_record_rewritten_in_place_between_sightings_is_a_new_sighting(
    tmp_path: Path, children: Children
) -> None:
    """Same inode, same dead PID, other bytes: the finding identity (inode + PID) alone would
    call it the same lock; the record's digest and mtime do not."""
    store = Store(tmp_path, children, lock_name="LOCK.json")
    record = json.loads(dead_record("first"))
    store.lock.write_text(json.dumps(record))
    inode = store.lock.stat().st_ino
    assert step(store.finding(0)) == "seen_once"
    with open(store.lock, "r+") as handle:  # in place: the inode stays
        handle.write(json.dumps({**record, "role": "second"}))
        handle.truncate()
    assert store.lock.stat().st_ino == inode
    again = store.finding(3)
    assert again["state"] == "stale" and step(again) == "seen_once"
    assert store.lock.exists() and store.records("removed") == []
    assert step(store.finding(5)) == "removed"


def test_a_kernel_locked_file_is_never_removed(tmp_path: Path, children: Children) -> None:
    """A JSON owner record naming a dead PID, but flocked by a live process: held, not stale;
    and a plain file that `auto` reads as a kernel lock is never removed, held or not."""
    store = Store(tmp_path, children, lock_name="LOCK.json")
    store.lock.write_text(dead_record())
    flock = children.python(FLOCK_HOLDER, str(store.lock))
    for minutes in (0, 3, 10):
        finding = store.finding(minutes)
        assert finding["state"] in ("held", "held_too_long")
        assert finding["holders"][0]["pid"] == flock.pid
        assert finding["removal"] is None
    assert store.lock.exists()

    flock.send_signal(signal.SIGKILL)
    flock.wait(timeout=10)

    (tmp_path / "plain").mkdir()
    plain = Store(tmp_path / "plain", children)  # an empty file: `auto` reads it as kernel
    plain.lock.touch()
    plain_flock = children.python(FLOCK_HOLDER, str(plain.lock))
    assert plain.finding(0)["state"] == "held"
    plain_flock.send_signal(signal.SIGKILL)
    plain_flock.wait(timeout=10)
    for minutes in (20, 30):
        finding = plain.finding(minutes)
        assert finding["state"] == "free" and finding["format"] == "kernel"
    assert plain.lock.exists() and plain.records("removed") == []


@pytest.mark.parametrize("lock_format", ["kernel", "sqlite", "dpkg", "borg", "postgres"])
def test_check_config_refuses_remove_stale_on_formats_never_removed(
    store: Store, lock_format: str
) -> None:
    store.configure(lock_format=lock_format)
    done = run_cli("check-config", "--config", str(store.config))
    assert done.returncode == 78, done.stdout
    assert f"lock[1].remove_stale: format '{lock_format}' is never removed" in done.stderr


def test_a_stale_record_still_open_in_a_process_is_never_removed(
    tmp_path: Path, children: Children
) -> None:
    store = Store(tmp_path, children, lock_name="LOCK.json")
    store.lock.write_text(dead_record())
    opener = children.python(OPENER, str(store.lock))
    for minutes in (0, 3, 10):
        finding = store.finding(minutes)
        assert finding["state"] == "stale"
        assert step(finding) == "not_removed"
        assert finding["removal"] == f"not removed: PID {opener.pid} still has it open"
    assert store.lock.exists() and store.records("removed") == []

    opener.send_signal(signal.SIGKILL)  # once nobody has it open, the two sightings count
    opener.wait(timeout=10)
    assert step(store.finding(11)) == "seen_once"
    assert step(store.finding(14)) == "removed"
    assert not store.lock.exists()


def test_dry_run_removes_nothing_and_says_what_it_would(store: Store) -> None:
    store.hold_and_die()
    unseen = store.finding(0, "--dry-run")
    assert step(unseen) == "seen_once"
    assert unseen["removal_status"]["stale_since"] is unseen["removal_status"]["remove_at"] is None
    assert unseen["removal"].startswith("seen once; will remove after 2m")
    assert "a dry run records nothing" in unseen["removal"]
    assert not store.journal.exists()

    store.finding(1)
    journal = store.journal.read_text()
    would = store.finding(5, "--dry-run")
    assert would["state"] == "stale"
    assert step(would) == "would_remove"
    assert would["removal"].startswith(f"would remove {store.lock} (stale since ")
    assert store.lock.is_dir() and store.leftovers() == []
    assert store.journal.read_text() == journal


def test_a_symlink_at_the_lock_path_is_never_followed(store: Store, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "owner.json").write_text(dead_record())
    store.lock.symlink_to(victim)
    store.configure(lock_format="owner-record")
    for minutes in (0, 3, 10):
        finding = store.finding(minutes)
        assert finding["state"] == "unknown" and finding["removal"] is None
    assert store.lock.is_symlink() and (victim / "owner.json").exists()


def test_a_lock_swapped_for_a_symlink_after_its_sighting_is_not_removed(
    store: Store, tmp_path: Path
) -> None:
    store.configure(lock_format="owner-record")
    store.hold_and_die()
    assert step(store.finding(0)) == "seen_once"
    victim = tmp_path / "victim"
    shutil.move(store.lock, victim)  # the same record, now behind a symlink
    store.lock.symlink_to(victim)
    store.configure(lock_format="owner-record")
    for minutes in (3, 10):
        finding = store.finding(minutes)
        assert finding["state"] == "unknown" and finding["removal"] is None
    assert store.lock.is_symlink() and (victim / "owner.json").exists()
    assert store.records("removed") == []


def test_removing_a_lock_directory_never_follows_a_symlink_inside_it(
    store: Store, tmp_path: Path
) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious").write_text("keep me")
    store.hold_and_die()
    (store.lock / "escape").symlink_to(victim)
    store.finding(0)
    assert step(store.finding(2)) == "removed"
    assert not store.lock.exists()
    assert (victim / "precious").read_text() == "keep me"


def test_a_stale_git_index_lock_is_removed_and_git_commits_again(
    tmp_path: Path, children: Children
) -> None:
    """A real `git commit` killed while it waits for its editor leaves .git/index.lock; once
    older than stale_after with no git process in the repository, two sightings remove it."""
    repository = make_repository(tmp_path / "repo")
    kill_commit_waiting_for_its_editor(children, repository)
    index_lock = repository / ".git" / "index.lock"
    assert index_lock.exists()
    store = Store(tmp_path, children)
    store.lock = index_lock
    store.configure(lock_format="git")

    assert store.finding(5)["state"] != "stale"  # younger than stale_after (10m): not yet
    assert step(store.finding(11)) == "seen_once"
    removed = store.finding(13)
    assert step(removed) == "removed"
    assert removed["removal"].startswith(f"removed ({index_lock} was stale since ")
    assert not index_lock.exists()
    assert [n for n in os.listdir(index_lock.parent) if "lockwarden-removed" in n] == []
    git(repository, "commit", "-qam", "two")


def test_a_stale_mercurial_wlock_is_removed_without_following_its_link(
    tmp_path: Path, children: Children
) -> None:
    """A real `hg debuglocks --set-wlock` killed with SIGKILL leaves `.hg/wlock -> HOST/NS:PID`.
    A file planted at the link's target (relative to .hg) must survive the removal."""
    hg = require_tool("hg")
    environment = {**os.environ, "HGPLAIN": "1", "HGRCPATH": os.devnull}
    repository = tmp_path / "repo"
    subprocess.run([hg, "init", str(repository)], check=True, env=environment)
    holder = children.start(
        [hg, "debuglocks", "--set-wlock"], stdin=subprocess.PIPE, cwd=repository, env=environment
    )
    wlock = repository / ".hg" / "wlock"
    assert wait_until(wlock.is_symlink, timeout=20)
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=10)
    planted = repository / ".hg" / os.readlink(wlock)
    planted.parent.mkdir(parents=True, exist_ok=True)
    planted.write_text("not the lock")
    store = Store(tmp_path, children)
    store.lock = wlock
    store.configure(lock_format="mercurial")

    first = store.finding(0)
    assert first["state"] == "stale" and str(holder.pid) in first["proof"]
    removed = store.finding(2)
    assert step(removed) == "removed"
    assert removed["removal"].startswith(f"removed ({wlock} was stale since ")
    assert not wlock.is_symlink() and planted.read_text() == "not the lock"
    locks = subprocess.run(
        [hg, "debuglocks"], cwd=repository, env=environment, capture_output=True, text=True
    )
    assert "wlock: free" in locks.stdout.splitlines(), locks.stdout


def test_a_lock_replaced_after_the_last_look_is_left_alone(store: Store) -> None:
    """In-process: the judged lock is swapped for another directory between the last look and
    the move (as a racing job would); the move refuses, and both stay where they are."""
    from lockwarden.config import load
    from lockwarden.remove.removal import Refused, judge_now, move_aside_and_delete

    store.hold_and_die()
    lock = load(str(store.config)).locks[0]
    candidate = judge_now(lock, store.base + timedelta(minutes=5))
    judged = store.store / "judged"
    store.lock.rename(judged)  # kept, so the new directory cannot reuse its inode
    store.hold_and_die("racer")
    with pytest.raises(Refused, match="not the lock that was judged"):
        move_aside_and_delete(candidate, store.base + timedelta(minutes=5))
    assert store.lock.is_dir() and judged.is_dir() and store.leftovers() == []


def test_a_lock_handed_over_between_the_last_read_and_its_capture_is_refused(
    store: Store,
) -> None:
    """In-process: the last look reads the lock of a holder that then lets go (its directory
    removed, the holder gone) while another takes the lock, all before the capture. The
    record names a dead PID, yet the lock is the new holder's: the last look refuses it
    itself, and the new holder's lock stays."""
    from factories import CaptureAfter
    from lockwarden.config import load
    from lockwarden.remove.removal import Refused, judge_now

    first = store.hold("resync")
    racer: list[subprocess.Popen[str]] = []

    def handed_over() -> None:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        shutil.rmtree(store.lock)
        racer.append(store.hold("racer"))

    lock = load(str(store.config)).locks[0]
    with pytest.raises(Refused, match="changed while it was judged"):
        judge_now(lock, store.base + timedelta(minutes=5), host=CaptureAfter(handed_over))
    assert json.loads((store.lock / "owner.json").read_text())["pid"] == racer[0].pid


def test_remove_stale_refuses_formats_whose_lock_is_the_kernels(tmp_path: Path) -> None:
    """Pure: the refusal rule for formats that must never be removed."""
    from lockwarden.formats import FORMATS
    from lockwarden.remove.removal import refusal

    dpkg = FORMATS["dpkg"].read(str(tmp_path / "lock"), 4194304)
    kernel = FORMATS["kernel"].read(str(tmp_path / "lock"), 4194304)
    assert refusal(dpkg) is not None and refusal(kernel) is not None


def test_compaction_keeps_each_locks_current_sighting_and_the_latest_removals() -> None:
    """Pure: what removal needs of the journal survives compaction."""
    from lockwarden.state.history import KEEP_REMOVALS, fold, keep_for_removal

    def sighting(at: str, lock: str, key: str) -> dict[str, Any]:
        return {"type": "sighting", "at": at, "lock": lock, "key": key}

    from lockwarden.state.records import from_json, to_json

    stored = [
        sighting("2026-01-01T00:00:00Z", "a", "k1"),
        sighting("2026-01-01T00:01:00Z", "a", "k2"),  # a new key replaces k1
        sighting("2026-01-01T00:00:00Z", "b", "k3"),
        *(
            {"type": "removed", "at": "2026-01-01T00:02:00Z", "lock": "b", "key": f"old{n}"}
            for n in range(KEEP_REMOVALS + 5)
        ),
    ]
    records = [from_json(record) for record in stored]
    kept = [to_json(record) for record in keep_for_removal(records)]
    assert [r["key"] for r in kept if r["type"] == "sighting"] == ["k2", "k3"]
    assert len([r for r in kept if r["type"] == "removed"]) == KEEP_REMOVALS
    records_kept = [from_json(record) for record in kept]
    assert fold(records_kept).sightings == fold(records).sightings


def test_a_removal_only_config_keeps_its_journal_bounded(
    tmp_path: Path, children: Children
) -> None:
    """With no alerting, the journal is written by removal only (here: nothing to remove,
    so never), and a run that writes it compacts it too, or it would grow until it is refused
    as too large. The sighting memory (a flock held with no dated record writes a `seen`
    record every run) replaces its own file, one record long, and never grows the journal."""
    held = tmp_path / "held.lock"
    children.python(FLOCK_HOLDER, str(held))
    (tmp_path / "store").mkdir()  # its lock free: nothing to remove, removal still on
    journal = tmp_path / "state" / "state.jsonl"
    config = tmp_path / "lockwarden.toml"
    config.write_text(
        f'[state]\npath = "{journal}"\nmax_bytes = 1500\n'
        "[host]\nblocked_writers = false\n"  # a writer blocked elsewhere on the host: not ours
        '[defaults]\nwarn_after = "24h"\ncritical_after = "48h"\n'
        f'[[lock]]\nname = "held"\npath = "{held}"\nformat = "kernel"\n'
        f'[[lock]]\nname = "store"\npath = "{tmp_path / "store" / "LOCK"}"\n'
        "remove_stale = true\n"
    )
    base = datetime.now(UTC)
    sizes = []
    for minute in range(30):
        moment = (base + timedelta(minutes=minute)).strftime("%Y-%m-%dT%H:%M:%SZ")
        done = run_cli("--once", "--config", str(config), "--now", moment)
        assert done.returncode == 0, done.stderr
        sizes.append(journal.stat().st_size if journal.exists() else 0)
    assert max(sizes) <= 1500 + 400, sizes  # compacted past the threshold: one record over
    assert not journal.exists()  # 30 runs, each with a `seen` record, and no journal
    [seen] = (journal.parent / "seen.json").read_text().splitlines()
    assert "held" in json.loads(seen)["locks"]


def test_nothing_is_removed_in_a_run_whose_journal_stopped_taking_writes(
    tmp_path: Path, children: Children, receiver: Receiver, tiny_tmpfs: Path
) -> None:
    """A full disk under the state directory (a real 64 KiB tmpfs): the run's first write, a
    new stale lock's sighting, goes to the fallback journal in the runtime directory. The
    state journal then no longer holds what this run did, so a second lock confirmed stale
    earlier is not removed in that run either, and the first is not counted as seen."""
    state_dir = tiny_tmpfs / "state"
    state_dir.mkdir(mode=0o700)
    locks = {name: tmp_path / name / "LOCK" for name in ("first", "second")}
    tables = "".join(
        f'[[lock]]\nname = "{name}"\npath = "{path}"\nremove_stale = true\nstale_confirm = "2m"\n'
        for name, path in locks.items()
    )
    config = tmp_path / "lockwarden.toml"
    config.write_text(
        f'[state]\npath = "{state_dir / "state.jsonl"}"\n'
        f"[notify]\nurls = {json.dumps([receiver.url()])}\ntimeout = '3s'\n{tables}"
    )
    base = datetime.now(UTC)

    def once(minutes: float) -> dict[str, dict[str, Any]]:
        moment = (base + timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")
        done = run_cli("--once", "--json", "--config", str(config), "--now", moment)
        assert done.stdout, done.stderr
        return {lock["name"]: lock for lock in json.loads(done.stdout)["locks"]}

    def leave_stale(lock: Path) -> None:
        lock.parent.mkdir()
        holder = children.python(MKDIR_HOLDER, str(lock), "resync", base.isoformat())
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=10)

    leave_stale(locks["second"])
    assert step(once(0)["second"]) == "seen_once"
    fill(tiny_tmpfs / "filler", b"x" * 1024)
    # and the slack of the journal's last page, with blank lines (which a load skips)
    fill(state_dir / "state.jsonl", b"\n")
    leave_stale(locks["first"])
    found = once(3)  # past the second's stale_confirm
    assert step(found["first"]) == step(found["second"]) == "not_removed"
    assert found["first"]["removal"].startswith("not removed: cannot record the sighting")
    assert found["second"]["removal"].startswith("not removed: the state journal is unusable")
    assert (
        "No space left" in found["second"]["removal"] or "short write" in found["second"]["removal"]
    )
    assert locks["first"].is_dir() and locks["second"].is_dir()


def fill(path: Path, chunk: bytes) -> None:
    """Append `chunk` to `path` until its file system is full (ENOSPC)."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        with pytest.raises(OSError, match="No space left"):
            while True:
                os.write(descriptor, chunk)
    finally:
        os.close(descriptor)
