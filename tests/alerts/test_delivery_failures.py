"""A delivery that goes badly is never silent, and one bad service holds back no other.

Real CLI runs against real receivers on 127.0.0.1; stderr goes to a file whose device:inode is
given as JOURNAL_STREAM, as systemd does, so the lines carry their journald priority.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import FLOCK_HOLDER

from .helpers import Children, Receiver, cli_env, free_port, run_cli, title_kind
from .test_end_to_end import TIDY_HOLDER, TOKEN, Scenario, scenario

__all__ = ["scenario"]  # the fixture, shared with test_end_to_end

GARBAGE = "this is not a url"


def refusing_url() -> str:
    return f"json://127.0.0.1:{free_port()}/nobody-listens"  # connection refused


class Journald:
    """Runs the CLI with stderr in a file systemd-style (JOURNAL_STREAM names it)."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.count = 0

    def run(self, *args: str) -> tuple[int, str, str]:
        self.count += 1
        path = self.tmp_path / f"stderr-{self.count}"
        with open(path, "w") as handle:
            status = os.fstat(handle.fileno())
            done = subprocess.run(
                [sys.executable, "-m", "lockwarden", *args],
                stdout=subprocess.PIPE,
                stderr=handle,
                text=True,
                timeout=60,
                env=cli_env(JOURNAL_STREAM=f"{status.st_dev}:{status.st_ino}"),
                check=False,
            )
        return done.returncode, done.stdout, path.read_text()


def metrics(path: Path) -> dict[str, float]:
    values = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith("#") and "{" not in line:
            name, value = line.split()
            values[name] = float(value)
    return values


def test_garbage_refusing_and_working_services_each_on_their_own(
    scenario: Scenario, receiver: Receiver, tmp_path: Path
) -> None:
    textfile = tmp_path / "lockwarden.prom"
    scenario.configure(
        [GARBAGE, refusing_url(), receiver.url(TOKEN)],
        extra=f'\n[prometheus]\ntextfile = "{textfile}"\n'
        f'[heartbeat]\nurl = "http://127.0.0.1:{receiver.port}/ping/check-uuid"\n',
    )
    # Before production: check-config names the garbage URL, by file and key, exit 78.
    checked = run_cli("check-config", "--config", str(scenario.config))
    assert checked.returncode == 78, checked.stderr
    assert f"{scenario.config}: notify.urls[1]: (not a URL): not an apprise URL" in checked.stderr
    assert GARBAGE not in checked.stderr

    scenario.hold()
    journald = Journald(tmp_path)
    code, stdout, stderr = journald.run(
        "--once", "--config", str(scenario.config), "--now", scenario.at(120)
    )
    assert code == 2, stderr  # the critical lock decides; the notify finding cannot hide it
    assert len(receiver.payloads) == 1  # the working service got its alert
    assert title_kind(str(receiver.payloads[0]["title"])) == "writes blocked"
    assert "<3>notify service unusable, never sent to: notify.urls[1]" in stderr
    assert "<4>alert NOT delivered to json://127.0.0.1:" in stderr and "will retry" in stderr
    assert TOKEN not in stderr + stdout
    first = metrics(textfile)
    assert first["lockwarden_alerts_undelivered"] == 1
    assert first["lockwarden_notify_services_unusable"] == 1
    assert first["lockwarden_last_delivery_timestamp_seconds"] > 0
    assert receiver.pings == ["/ping/check-uuid/fail"]  # the dead man's switch is told

    for minutes in (125, 130):  # retries go to the refusing service only: no duplicate
        code, _stdout, stderr = journald.run(
            "--once", "--config", str(scenario.config), "--now", scenario.at(minutes)
        )
        assert code == 2
        assert "<4>retry of alert NOT delivered" in stderr or "<4>alert NOT delivered" in stderr
    assert len(receiver.payloads) == 1

    scenario.release()
    code, _stdout, stderr = journald.run(
        "--once", "--config", str(scenario.config), "--now", scenario.at(140)
    )
    assert code == 3, stderr  # the lock is fine now; the undelivered alerts are not
    assert [title_kind(str(p["title"])) for p in receiver.payloads] == [
        "writes blocked",
        "resolved",
    ]
    assert "<3>notify service unusable" in stderr


def test_one_bad_url_no_longer_silences_the_good_one(
    scenario: Scenario, receiver: Receiver
) -> None:
    """Problem 1 as measured: a good json:// and a truncated slack:// -> 0 requests."""
    scenario.configure([receiver.url(TOKEN), "slack://onlyonetoken"])
    scenario.hold()
    done = scenario.once(120)
    assert done.returncode == 2
    assert len(receiver.payloads) == 1
    assert "notify.urls[2]: slack://…: apprise cannot parse this slack:// URL" in done.stderr


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("this is not a url", "(not a URL): not an apprise URL"),
        ("json:/", "(not a URL): not an apprise URL"),
        ("slack://onlyonetoken", "slack://…: apprise cannot parse this slack:// URL"),
        ("nosuchservice://host/x", "nosuchservice://…: unknown scheme 'nosuchservice'"),
    ],
)
def test_check_config_rejects_each_bad_url_by_file_and_key(
    tmp_path: Path, receiver: Receiver, url: str, problem: str
) -> None:
    config = tmp_path / "c.toml"
    config.write_text(
        f'[state]\npath = "{tmp_path}/state/s.jsonl"\n'
        f'[notify]\nurls = ["{receiver.url()}", "{url}"]\n'
    )
    checked = run_cli("check-config", "--config", str(config))
    assert checked.returncode == 78
    assert f"{config}: notify.urls[2]: {problem}" in checked.stderr
    assert "notify.urls[1]" not in checked.stderr  # the good one is fine


def test_check_config_reports_a_bad_url_beside_the_other_problems(tmp_path: Path) -> None:
    """Every problem at once: a typo in a lock does not hide the bad notify URL until it is
    fixed; a [notify] section that is itself wrong is reported as such, its URLs unchecked."""
    config = tmp_path / "c.toml"
    config.write_text(
        '[notify]\nurls = ["nosuch://host/x", "ops=json://127.0.0.1:9/hook"]\n'
        '[[lock]]\nname = "a"\npath = "/tmp/a"\nwarn_afer = "1h"\n'
        '[[lock]]\nname = "b"\npath = "/tmp/b"\nnotify_tags = ["pager"]\n'
    )
    checked = run_cli("check-config", "--config", str(config))
    assert checked.returncode == 78
    problems = [line for line in checked.stderr.splitlines() if "config error" in line]
    assert [problem.split(": ")[3] for problem in problems] == [
        "lock[1].warn_afer",
        "notify.urls[1]",
        "lock[2].notify_tags",
    ], checked.stderr
    config.write_text(config.read_text().replace("[notify]\n", '[notify]\ntimeout = "x"\n'))
    broken = run_cli("check-config", "--config", str(config))
    assert "notify.timeout" in broken.stderr and "notify.urls[1]" not in broken.stderr


def test_check_config_checks_urls_file_and_urls_env_too(tmp_path: Path, receiver: Receiver) -> None:
    urls = tmp_path / "urls"
    urls.write_text(f"# comment\n{receiver.url()}\nslack://short\n")
    urls.chmod(0o600)
    config = tmp_path / "c.toml"
    config.write_text(
        f'[state]\npath = "{tmp_path}/state/s.jsonl"\n'
        f'[notify]\nurls_file = "{urls}"\nurls_env = "LW_URLS"\n'
    )
    checked = run_cli("check-config", "--config", str(config), LW_URLS="nosuch://a/b")
    assert checked.returncode == 78
    assert f"notify.urls_file ({urls} line 3): slack://…" in checked.stderr
    assert "notify.urls_env ($LW_URLS word 1): nosuch://…: unknown scheme" in checked.stderr


def test_notify_test_names_every_bad_url_and_still_sends_to_the_good(
    tmp_path: Path, receiver: Receiver
) -> None:
    config = tmp_path / "c.toml"
    config.write_text(f'[notify]\nurls = ["json:/", "{receiver.url()}", "slack://x"]\n')
    done = run_cli("notify-test", "--config", str(config))
    assert done.returncode == 78
    assert len(receiver.payloads) == 1
    assert f"UNUSABLE  {config}: notify.urls[1]: (not a URL)" in done.stdout
    assert f"{config}: notify.urls[3]: slack://…" in done.stdout


@pytest.mark.parametrize("notify", [True, False], ids=["notify", "no-notify"])
@pytest.mark.parametrize("fault", ["world-writable", "symlink", "missing-parent", "none"])
def test_check_config_reports_the_state_directory(
    children: Children, tmp_path: Path, fault: str, notify: bool
) -> None:
    """check-config names a state directory a run refuses, exit 78, exactly when a real --once
    of the same config, its lock held by a real flock, reports lockwarden:state, with or without
    [notify]: a run saves a held kernel lock's sightings there. Without [notify], check-config
    used to call such a config valid (exit 0) while every run that saw the lock held exited 3."""
    state = tmp_path / "state"
    if fault == "world-writable":
        state.mkdir()
        state.chmod(0o777)
    elif fault == "symlink":
        (tmp_path / "real").mkdir(mode=0o700)
        state.symlink_to(tmp_path / "real")
    elif fault == "missing-parent":
        state = tmp_path / "no" / "state"
    config = tmp_path / "c.toml"
    lock = f'[[lock]]\nname = "spare"\npath = "{tmp_path / "spare.lock"}"\n'
    sending = '[notify]\nurls = ["json://127.0.0.1:9/x"]\n' if notify else ""
    config.write_text(f'[state]\npath = "{state}/s.jsonl"\n{sending}{lock}')
    children.python(FLOCK_HOLDER, str(tmp_path / "spare.lock"))
    checked = run_cli("check-config", "--config", str(config))
    ran = run_cli("--once", "--json", "--config", str(config))
    refused = [f for f in json.loads(ran.stdout)["locks"] if f["name"] == "lockwarden:state"]
    if fault == "none":
        assert (checked.returncode, ran.returncode, refused) == (0, 0, []), checked.stderr
        return
    assert checked.returncode == 78
    expected = {
        "world-writable": "writable by every user",
        "symlink": "is a symlink",
        "missing-parent": "nor does its parent",
    }[fault]
    assert f"{config}: state.path: state directory {state}" in checked.stderr
    assert expected in checked.stderr
    assert ran.returncode == 3
    assert [f["state"] for f in refused] == ["unknown"]
    assert expected in refused[0]["reason"]


def test_a_new_users_default_state_directory_is_no_config_error(children: Children) -> None:
    """A user's default state directory ($HOME/.local/state/lockwarden) on a new account, whose
    ~/.local/state does not exist yet, is made by the first run (the XDG spec's 0700), so
    check-config calls it fine, now that it checks the state directory without [notify]
    too; a real run as that user makes it and reports no lockwarden:state. (As Debian's
    python3, which that user can run, with the Debian packages the .deb depends on.)"""
    with tempfile.TemporaryDirectory(dir="/tmp") as scratch:
        base = Path(scratch)
        base.chmod(0o755)
        home = base / "home"
        home.mkdir(mode=0o700)
        os.chown(home, NOBODY, NOBODY)
        held = base / "held.lock"
        held.touch()
        config = base / "c.toml"
        config.write_text(f'[[lock]]\nname = "held"\npath = "{held}"\n')
        children.python(FLOCK_HOLDER, str(held))  # held: its sighting is to be saved
        env = cli_env(HOME=str(home))
        env.pop("XDG_STATE_HOME", None)
        env.pop("RUNTIME_DIRECTORY", None)
        env.pop("XDG_RUNTIME_DIR", None)

        def as_nobody(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [DEBIAN_PYTHON, "-m", "lockwarden", *args, "--config", str(config)],
                capture_output=True,
                text=True,
                env=env,
                user=NOBODY,
                group=NOBODY,
                extra_groups=[],
                timeout=30,
                check=False,
                cwd=scratch,
            )

        checked = as_nobody("check-config")
        assert checked.returncode == 0, checked.stderr
        ran = as_nobody("--once", "--json")
        names = [finding["name"] for finding in json.loads(ran.stdout)["locks"]]
        assert "lockwarden:state" not in names, ran.stdout
        assert (home / ".local" / "state" / "lockwarden").is_dir()


NOBODY = 65534
DEBIAN_PYTHON = "/usr/bin/python3"


def test_world_writable_state_pages_once_not_every_run_and_resolves(
    scenario: Scenario, receiver: Receiver, tmp_path: Path
) -> None:
    """Problem 3: each run re-sent the alert plus "state degraded"."""
    open_dir = tmp_path / "open-state"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    scenario.configure([receiver.url(TOKEN)], state_path=str(open_dir / "state.jsonl"))
    scenario.hold()
    journald = Journald(tmp_path)
    for minutes in (120, 121, 122, 123):
        code, stdout, stderr = journald.run(
            "--once", "--config", str(scenario.config), "--now", scenario.at(minutes), "--json"
        )
        assert code == 2
        states = {lock["name"]: lock["state"] for lock in json.loads(stdout)["locks"]}
        assert states["lockwarden:state"] == "unknown"
        assert "<4>state degraded: state directory" in stderr  # said every run, paged once
    kinds = [title_kind(str(p["title"])) for p in receiver.payloads]
    assert kinds == ["writes blocked", "state degraded"]
    assert [p["type"] for p in receiver.payloads] == ["failure", "warning"]
    open_dir.chmod(0o700)
    scenario.once(124)
    scenario.once(125)
    titles = [str(p["title"]) for p in receiver.payloads]
    assert sum("lockwarden state usable again" in title for title in titles) == 1
    assert sorted(p.name for p in open_dir.iterdir()) != []  # the journal is written again


RUN_LOCK_HOLDER = """
import fcntl, os, sys, time
handle = open(sys.argv[1], "w")
fcntl.flock(handle, fcntl.LOCK_EX)
handle.write(sys.argv[2] + "\\n")  # a dead run's PID, as a crashed writer would leave it
handle.flush()
print("ready", flush=True)
time.sleep(120)
"""


def test_busy_run_names_the_live_holder_not_the_pid_in_the_file(
    scenario: Scenario, receiver: Receiver, children: Children
) -> None:
    scenario.configure([receiver.url(TOKEN)])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(timeout=30)  # its PID is free now: what a crashed run leaves in run.lock
    holder = children.python(RUN_LOCK_HOLDER, str(scenario.state_dir / "run.lock"), str(dead.pid))
    done = scenario.once(120)
    assert done.returncode == 75
    assert f"in progress (PID {holder.pid}, run lock {scenario.state_dir}/run.lock" in done.stderr
    assert f"the kernel names its holder: PID {holder.pid}" in done.stderr
    assert f"PID {dead.pid}" not in done.stderr


def test_a_lock_behind_a_directory_it_may_not_enter_is_a_permission_problem(
    tmp_path: Path,
) -> None:
    """Root without CAP_DAC_OVERRIDE/CAP_DAC_READ_SEARCH (setpriv drops them) cannot enter a
    0700 directory owned by another user: the finding names the directory and the right."""
    setpriv = require_setpriv()
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (private / "LOCK").write_text("")
    os.chown(private, 65534, 65534)
    config = tmp_path / "c.toml"
    config.write_text(f'[[lock]]\nname = "p"\npath = "{private}/LOCK"\n')
    drop = [setpriv, "--bounding-set=-dac_override,-dac_read_search", "--"]
    done = subprocess.run(
        [*drop, sys.executable, "-m", "lockwarden", "--once", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        env=cli_env(),
        check=False,
    )
    assert done.returncode == 3, done.stderr
    assert f"permission denied: cannot search directory {private} (needs execute" in done.stdout
    assert "internal error" not in done.stdout


def require_setpriv() -> str:
    from conftest import require_tool

    return require_tool("setpriv")


DPKG_HOLDER = """
import fcntl, sys, time
handle = open(sys.argv[1], "a")
fcntl.lockf(handle, fcntl.LOCK_EX)
print("ready", flush=True)
time.sleep(120)
"""


def test_a_package_manager_lock_past_its_budget_advises_waiting_never_kill(
    tmp_path: Path, children: Children
) -> None:
    """A copy of dpkg's layout under a temporary root is dpkg's lock (formats/dpkg.py)."""
    lock = tmp_path / "root" / "var" / "lib" / "dpkg" / "lock-frontend"
    lock.parent.mkdir(parents=True)
    lock.write_text("")
    holder = children.python(DPKG_HOLDER, str(lock))
    config = tmp_path / "c.toml"
    config.write_text(
        f'[[lock]]\nname = "dpkg"\npath = "{lock}"\nwarn_after = "1m"\ncritical_after = "1m"\n'
        f'[state]\npath = "{tmp_path}/state/s.jsonl"\n'
    )
    # A kernel lock's hold is known from the runs that saw it: the first run records it, the
    # second (a minute later by its clock) judges it past the budget.
    run_cli("--once", "--config", str(config), "--json", "--now", "2099-01-01T00:00:00Z")
    done = run_cli("--once", "--config", str(config), "--json", "--now", "2099-01-01T00:01:00Z")
    import json

    finding = json.loads(done.stdout)["locks"][0]
    assert finding["holders"][0]["pid"] == holder.pid
    assert finding["state"] == "held_too_long"
    assert finding["action"]["argv"] is None  # words, not a command to run
    assert finding["action"]["line"].startswith(f"wait for PID {holder.pid}")
    assert "never kill a package manager" in finding["action"]["line"]
    assert "kill " + str(holder.pid) not in finding["action"]["line"]


def test_a_hanging_service_holds_back_no_other_services_messages(
    tmp_path: Path, children: Children
) -> None:
    """Two locks blocked, so two alerts in one run; one service never answers. The good one
    gets both in that run (it used to get none past the first once the budget was spent on
    the hanging one), and the run still ends: the receiver hangs 30 s, the call's limit is 25 s."""
    good, hanging = Receiver(), Receiver()
    hanging.mode = "hang"
    for server in (good, hanging):
        server.start()
    try:
        config = tmp_path / "c.toml"
        locks = ""
        for name in ("store-a", "store-b"):
            lock = tmp_path / name / "LOCK"
            lock.parent.mkdir()
            children.python(TIDY_HOLDER, str(lock), "job")
            locks += f'[[lock]]\nname = "{name}"\npath = "{lock}"\n'
        config.write_text(
            f'[state]\npath = "{tmp_path}/state/s.jsonl"\n'
            f'[notify]\nurls = ["{hanging.url()}", "{good.url()}"]\ntimeout = "1s"\n' + locks
        )
        done = run_cli(
            "--once", "--config", str(config), "--now", "2099-01-01T00:00:00Z", timeout=25
        )
        assert done.returncode == 2, done.stderr  # both held far past critical_after
        assert sorted(title_kind(str(p["title"])) for p in good.payloads) == [
            "writes blocked",
            "writes blocked",
        ]
        assert "timed out" in done.stderr
    finally:
        for server in (good, hanging):
            server.release.set()
            server.stop()


@pytest.mark.parametrize("broken", ["textfile", "state"])
def test_the_dead_mans_switch_hears_of_a_textfile_or_state_that_cannot_be_written(
    tmp_path: Path, receiver: Receiver, children: Children, broken: str
) -> None:
    """Alerting off, every lock fine: still, lockwarden's own job failed (a textfile in a
    missing directory, a sighting memory that cannot be saved), so the heartbeat gets /fail,
    as the exit code (3) and the report say it."""
    held = tmp_path / "store.lock"
    state = tmp_path / ("state" if broken == "textfile" else "a-file") / "state.jsonl"
    if broken == "state":
        state.parent.write_text("a file where the state directory should be\n")
    textfile = tmp_path / ("here" if broken == "state" else "missing") / "lockwarden.prom"
    (tmp_path / "here").mkdir()
    config = tmp_path / "config.toml"
    config.write_text(
        f'[state]\npath = "{state}"\n[prometheus]\ntextfile = "{textfile}"\n'
        f'[heartbeat]\nurl = "http://127.0.0.1:{receiver.port}/ping/check-uuid"\n'
        f'[[lock]]\nname = "store"\npath = "{held}"\nformat = "kernel"\n'
    )
    config.chmod(0o600)
    children.python(FLOCK_HOLDER, str(held))  # held: its sighting is to be saved
    done = run_cli("--once", "--json", "--config", str(config))
    names = {finding["name"] for finding in json.loads(done.stdout)["locks"]}
    assert done.returncode == 3, done.stderr
    assert ("lockwarden:prometheus" if broken == "textfile" else "lockwarden:state") in names
    assert receiver.pings == ["/ping/check-uuid/fail"]
