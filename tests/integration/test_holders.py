"""Real processes holding real locks, judged through the real CLI (`--json`)."""

from __future__ import annotations

import fcntl
import os
import platform
import signal
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from conftest import (
    MKDIR_HOLDER,
    OFD_HOLDER,
    POSIX_HOLDER,
    Children,
    proc_locks_pid,
    run_json,
    wait_until,
    write_config,
)


def iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def store_config(tmp_path: Path, lock: Path, **extra: str) -> str:
    settings = "\n".join(f'{key} = "{value}"' for key, value in extra.items())
    return write_config(
        tmp_path / "config.toml",
        f"""
        [defaults]
        warn_after = "15m"
        critical_after = "1h"

        [[lock]]
        name = "wa-store"
        path = "{lock}"
        {settings}
        """,
    )


def only_lock(document: dict) -> dict:  # type: ignore[type-arg]
    assert len(document["locks"]) == 1
    return document["locks"][0]  # type: ignore[no-any-return]


def test_live_owner_record_holder_within_budget_is_held_and_named(
    tmp_path: Path, children: Children
) -> None:
    lock = tmp_path / "store" / "LOCK"
    lock.parent.mkdir()
    holder = children.python(MKDIR_HOLDER, str(lock), "maintenance-job", iso(datetime.now(UTC)))
    code, document = run_json("--once", "--config", store_config(tmp_path, lock))
    finding = only_lock(document)
    assert (code, finding["state"], finding["severity"]) == (0, "held", "ok")
    assert finding["holders"][0]["pid"] == holder.pid
    assert finding["holders"][0]["role"] == "maintenance-job"
    assert finding["holders"][0]["alive"] is True
    assert finding["action"] is None  # within its budget: no action is advised


def test_live_holder_past_warn_and_critical_budgets(tmp_path: Path, children: Children) -> None:
    lock = tmp_path / "store" / "LOCK"
    lock.parent.mkdir()
    holder = children.python(MKDIR_HOLDER, str(lock), "maintenance-job", iso(datetime.now(UTC)))
    config = store_config(tmp_path, lock)
    later = datetime.now(UTC) + timedelta(minutes=20)
    code, document = run_json("--once", "--config", config, "--now", iso(later))
    assert (code, only_lock(document)["state"], only_lock(document)["severity"]) == (
        1,
        "held_too_long",
        "warning",
    )
    much_later = datetime.now(UTC) + timedelta(hours=2, minutes=1)
    code, document = run_json("--once", "--config", config, "--now", iso(much_later))
    finding = only_lock(document)
    assert (code, finding["state"], finding["severity"]) == (2, "held_too_long", "critical")
    assert finding["reason"].startswith(f"writes to wa-store blocked: PID {holder.pid}")
    assert "has held the lock for 2h0" in finding["reason"]
    assert finding["reason"].endswith("stop it")


def test_killed_holder_leaves_a_stale_lock_with_proof(tmp_path: Path, children: Children) -> None:
    lock = tmp_path / "store" / "LOCK"
    lock.parent.mkdir()
    holder = children.python(MKDIR_HOLDER, str(lock), "maintenance-job", iso(datetime.now(UTC)))
    holder.kill()
    holder.wait()
    code, document = run_json("--once", "--config", store_config(tmp_path, lock))
    finding = only_lock(document)
    assert (code, finding["state"], finding["severity"]) == (2, "stale", "critical")
    assert f"PID {holder.pid} is not running on this host" in finding["proof"]
    assert finding["action"]["argv"] == ["rm", "-r", "--", str(lock)]


def test_pid_reused_by_a_younger_process_is_unknown_never_held(
    tmp_path: Path, children: Children
) -> None:
    """A process younger than its record is no holder, but wall-clock times are no proof
    either (a clock stepped an hour forward makes a live holder look younger than its record:
    tests/reliability/test_clock.py): unknown, with the reason. Start ticks in the record make
    it proof (test_start_ticks_mismatch_proves_reuse)."""
    lock = tmp_path / "LOCK"
    stranger = children.start(["sleep", "60"])
    taken = iso(datetime.now(UTC) - timedelta(hours=3))
    lock.write_text(f'{{"pid": {stranger.pid}, "startedAt": "{taken}"}}')
    code, document = run_json("--once", "--config", store_config(tmp_path, lock))
    finding = only_lock(document)
    assert (code, finding["state"]) == (3, "unknown")
    assert "probably another process that reused the PID" in finding["reason"]


def test_record_from_another_host_is_unknown(tmp_path: Path, children: Children) -> None:
    lock = tmp_path / "LOCK"
    lock.write_text('{"pid": 4242, "role": "re-sync", "host": "some-other-host"}')
    code, document = run_json("--once", "--config", store_config(tmp_path, lock))
    finding = only_lock(document)
    assert (code, finding["state"], finding["severity"]) == (3, "unknown", "unknown")
    assert "some-other-host" in finding["reason"]


def test_host_alias_makes_a_renamed_host_this_host(tmp_path: Path, children: Children) -> None:
    lock = tmp_path / "LOCK"
    sleeper = children.start(["sleep", "60"])
    lock.write_text(f'{{"pid": {sleeper.pid}, "host": "old-name"}}')
    config = write_config(
        tmp_path / "c.toml",
        f"""
        [[lock]]
        name = "s"
        path = "{lock}"
        host_aliases = ["old-name"]
        """,
    )
    _code, document = run_json("--once", "--config", config)
    assert only_lock(document)["state"] == "held"
    assert only_lock(document)["holders"][0]["pid"] == sleeper.pid


def test_ofd_lock_holder_is_found_although_proc_locks_prints_minus_one(
    tmp_path: Path, children: Children
) -> None:
    lock = tmp_path / "ofd.lock"
    lock.touch()
    holder = children.python(OFD_HOLDER, str(lock))
    assert proc_locks_pid(lock) == -1
    code, document = run_json("--once", "--config", store_config(tmp_path, lock, format="kernel"))
    finding = only_lock(document)
    assert (code, finding["state"]) == (0, "held")
    assert finding["holders"][0]["pid"] == holder.pid
    # The holder has run a second, so the lock cannot be older: within its budget, truly.
    assert finding["reason"].endswith("within its 15m00s budget"), finding["reason"]


def test_a_hold_of_unknown_length_is_never_said_to_be_within_its_budget(
    tmp_path: Path, children: Children
) -> None:
    """An OFD lock records no taker, so nothing dates it but its holder's running time: once
    that passes the budget, the lock may be past it too. Neither a page nor "within"."""
    lock = tmp_path / "ofd.lock"
    lock.touch()
    holder = children.python(OFD_HOLDER, str(lock))
    time.sleep(1.5)  # the holder has run longer than the 1 s budget
    config = store_config(tmp_path, lock, format="kernel", warn_after="1s")
    code, document = run_json("--once", "--dry-run", "--config", config)
    finding = only_lock(document)
    assert (code, finding["state"], finding["holders"][0]["pid"]) == (0, "held", holder.pid)
    assert "within" not in finding["reason"], finding["reason"]
    assert "not yet known to be past its 1s budget" in finding["reason"], finding["reason"]


def test_a_what_if_two_hours_on_projects_the_hold_seen_now(
    tmp_path: Path, children: Children
) -> None:
    """`--now` two hours ahead answers what a run then would say if the lock stayed held: that
    run would have seen it held since this sighting, two hours at least."""
    lock = tmp_path / "ofd.lock"
    lock.touch()
    children.python(OFD_HOLDER, str(lock))
    later = iso(datetime.now(UTC) + timedelta(hours=2))
    config = store_config(tmp_path, lock, format="kernel")
    code, document = run_json("--once", "--dry-run", "--now", later, "--config", config)
    finding = only_lock(document)
    assert (code, finding["state"], finding["held"]["bound"]) == (2, "held_too_long", "at_least")
    assert finding["held"]["seconds"] >= 2 * 3600 - 5


POSIX_WAITER = """
import fcntl, sys
handle = open(sys.argv[1], "a")
print("ready", flush=True)
fcntl.lockf(handle, fcntl.LOCK_EX)
"""


def test_posix_lock_with_a_waiter_lists_the_waiter(tmp_path: Path, children: Children) -> None:
    lock = tmp_path / "posix.lock"
    lock.touch()
    holder = children.python(POSIX_HOLDER, str(lock))
    waiter = children.python(POSIX_WAITER, str(lock))
    assert wait_until(lambda: "->" in Path("/proc/locks").read_text())
    _code, document = run_json("--once", "--config", store_config(tmp_path, lock, format="kernel"))
    finding = only_lock(document)
    assert finding["holders"][0]["pid"] == holder.pid
    assert [w["pid"] for w in finding["waiters"]] == [waiter.pid]
    assert (
        finding["waiters"][0]["cmdline"][0].endswith(("python", "python3"))
        or "python" in (finding["waiters"][0]["cmdline"][0])
    )


ZOMBIE_LEADER = """
import ctypes, json, os, platform, socket, sys, threading, time
lock = sys.argv[1]
os.mkdir(lock)
with open(os.path.join(lock, "owner.json"), "w") as handle:
    json.dump({"pid": os.getpid(), "role": "threaded", "host": socket.gethostname()}, handle)
threading.Thread(target=time.sleep, args=(120,)).start()
print("ready", flush=True)
# Exit the main thread only (the raw exit syscall, not exit_group): the process becomes a
# zombie leader while its other thread runs on.
ctypes.CDLL(None).syscall({"x86_64": 60, "aarch64": 93}[platform.machine()], 0)
"""


def test_zombie_main_thread_with_a_live_thread_is_alive(tmp_path: Path, children: Children) -> None:
    assert platform.machine() in ("x86_64", "aarch64")
    lock = tmp_path / "LOCK"
    holder = children.python(ZOMBIE_LEADER, str(lock))
    assert wait_until(lambda: _state(holder.pid) == "Z")
    _code, document = run_json("--once", "--config", store_config(tmp_path, lock))
    finding = only_lock(document)
    assert (finding["state"], finding["holders"][0]["pid"]) == ("held", holder.pid)
    assert finding["holders"][0]["alive"] is True
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    _code, document = run_json("--once", "--config", store_config(tmp_path, lock))
    assert only_lock(document)["state"] == "stale"


def _state(pid: int) -> str:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rfind(")") + 2 :].split()[0]


def test_key_value_store_lock_is_judged_by_its_flock(tmp_path: Path, children: Children) -> None:
    lock = tmp_path / "LOCK"
    code_text = """
    import fcntl, os, sys, time
    handle = open(sys.argv[1], "w")
    handle.write(f"pid={os.getpid()}\\nacquired_at=2026-12-02T10:00:00Z\\n")
    handle.flush()
    fcntl.flock(handle, fcntl.LOCK_EX)
    print("ready", flush=True)
    time.sleep(120)
    """
    holder = children.python(code_text, str(lock))
    _code, document = run_json("--once", "--config", store_config(tmp_path, lock))
    finding = only_lock(document)
    assert (finding["state"], finding["holders"][0]["pid"]) == ("held", holder.pid)
    assert finding["format"] == "owner-record"
    holder.kill()
    holder.wait()
    code, document = run_json("--once", "--config", store_config(tmp_path, lock))
    assert (code, only_lock(document)["state"]) == (0, "free")
    assert f"PID {holder.pid}" in only_lock(document)["reason"]


def test_pidfile_of_a_live_process_is_held(tmp_path: Path, children: Children) -> None:
    sleeper = children.start(["sleep", "60"])
    pidfile = tmp_path / "daemon.pid"
    pidfile.write_text(f"{sleeper.pid}\n")
    _code, document = run_json("--once", "--config", store_config(tmp_path, pidfile))
    finding = only_lock(document)
    assert (finding["format"], finding["state"]) == ("pidfile", "held")
    assert "format auto picked pidfile" in finding["note"]
    sleeper.kill()
    sleeper.wait()
    _code, document = run_json("--once", "--config", store_config(tmp_path, pidfile))
    assert only_lock(document)["state"] == "stale"


def test_flock_file_left_in_place_without_a_holder_is_free(tmp_path: Path) -> None:
    lock = tmp_path / "filelock.lock"
    lock.touch()
    with open(lock, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        fcntl.flock(handle, fcntl.LOCK_UN)
    code, document = run_json("--once", "--config", store_config(tmp_path, lock))
    assert (code, only_lock(document)["state"]) == (0, "free")


def test_empty_lock_directory_from_this_boot_is_unknown_not_stale(tmp_path: Path) -> None:
    lock = tmp_path / "LOCK"
    lock.mkdir()
    code, document = run_json("--once", "--config", store_config(tmp_path, lock))
    finding = only_lock(document)
    assert (code, finding["state"]) == (3, "unknown")
    assert "names no process" in finding["reason"]


def test_empty_lock_directory_from_before_this_boot_is_unknown_with_a_hint(
    tmp_path: Path,
) -> None:
    """A file time before this boot is no proof: a machine without an RTC boots in 1970 and
    makes its locks then, before NTP steps the clock."""
    lock = tmp_path / "LOCK"
    lock.mkdir()
    before_boot = time.time() - float(Path("/proc/uptime").read_text().split()[0]) - 3600
    os.utime(lock, (before_boot, before_boot))
    code, document = run_json("--once", "--config", store_config(tmp_path, lock))
    finding = only_lock(document)
    assert (code, finding["state"]) == (3, "unknown")
    assert "probably left over from before the last boot" in finding["reason"]


def test_record_from_another_boot_is_stale_with_the_boot_ids_as_proof(tmp_path: Path) -> None:
    lock = tmp_path / "LOCK"
    lock.write_text(
        '{"pid": 4242, "boot_id": "00000000-0000-0000-0000-000000000000", "start_ticks": 5}'
    )
    _code, document = run_json("--once", "--config", store_config(tmp_path, lock))
    finding = only_lock(document)
    assert finding["state"] == "stale"
    assert "another boot" in finding["proof"]


def test_start_ticks_mismatch_proves_reuse(tmp_path: Path, children: Children) -> None:
    sleeper = children.start(["sleep", "60"])
    ticks = int(_stat_field(sleeper.pid, 22))
    lock = tmp_path / "LOCK"
    lock.write_text(f'{{"pid": {sleeper.pid}, "start_ticks": {ticks}}}')
    _code, document = run_json("--once", "--config", store_config(tmp_path, lock))
    assert only_lock(document)["state"] == "held"
    lock.write_text(f'{{"pid": {sleeper.pid}, "start_ticks": {ticks + 1}}}')
    _code, document = run_json("--once", "--config", store_config(tmp_path, lock))
    finding = only_lock(document)
    assert finding["state"] == "stale"
    assert f"tick {ticks + 1}" in finding["proof"]


def _stat_field(pid: int, number: int) -> str:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rfind(")") + 2 :].split()[number - 3]
