"""The command line as a user meets it: help, version, exit codes, inspect, demo."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from conftest import FLOCK_HOLDER, MKDIR_HOLDER, Children, cli_env, run_cli, run_json, write_config
from lockwarden import __version__


def test_version_and_help() -> None:
    assert run_cli("--version").stdout.strip() == f"lockwarden {__version__}"
    helped = run_cli("--help")
    assert helped.returncode == 0
    for words in ("--once", "inspect", "check-config", "demo", "64", "78", "Nagios"):
        assert words in helped.stdout
    assert "--wait-ms" in run_cli("inspect", "--help").stdout


def test_usage_errors_exit_64_not_a_nagios_code() -> None:
    assert run_cli("--bogus").returncode == 64
    assert run_cli().returncode == 64
    assert run_cli("inspect", "/tmp", "--wait-ms", "-5").returncode == 64
    completed = run_cli("inspect", "/tmp", "--warn-after", "soon")
    assert completed.returncode == 64
    assert '"soon" is not a duration' in completed.stderr


def _help_codes(command: str) -> set[int]:
    helped = run_cli(command, "--help").stdout
    return {int(code) for code in re.findall(r"^  (\d+) ", helped.split("exit codes")[1], re.M)}


def test_inspect_and_why_help_list_the_codes_they_exit_with(
    tmp_path: Path, children: Children
) -> None:
    """inspect's and why's --help listed --once's codes (75: another run holds the run lock,
    which neither takes; "--once also works as a Nagios check"). Each now lists its own: every
    code a real run of it exits with here is listed, and 75 is not."""
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    pidfile = tmp_path / "job.pid"
    pidfile.write_text(gone.stdout)  # its holder has exited: stale
    bad = tmp_path / "bad.toml"
    bad.write_text('[defaults]\nwarn_afer = "1m"\n')
    sleeper = children.start(
        [sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(60)"],
        ready="ready",
    )
    runs = {
        "inspect": [
            [str(tmp_path / "free.lock")],
            [str(pidfile)],
            [str(tmp_path / "no" / "LOCK")],
            [str(pidfile), "--config", str(bad)],
            [str(pidfile), "--wait-ms", "x"],
        ],
        "why": [[str(sleeper.pid)], ["999999999"], ["--config", str(bad)], ["x"]],
    }
    expected = {"inspect": {0, 2, 3, 64, 78}, "why": {0, 3, 64, 78}}
    for command, each in runs.items():
        listed = _help_codes(command)
        assert 75 not in listed and "--once" not in run_cli(command, "--help").stdout
        seen = {run_cli(command, *arguments).returncode for arguments in each}
        assert seen == expected[command] and seen <= listed, (command, seen, listed)


def test_the_no_config_note_points_at_what_a_pip_user_has(tmp_path: Path) -> None:
    """With no config file, --once's note said to see config.example.toml, which a pip or
    pipx install does not have anywhere. It now names `lockwarden init`, and that advice
    works: init writes a config that check-config accepts."""
    code = (
        "from datetime import UTC, datetime\n"
        "from lockwarden import config, pipeline\n"
        "builtin = config.builtin(exists=lambda path: False)\n"
        "print(*pipeline.run_once(builtin, datetime.now(UTC)).notes, sep='\\n')\n"
    )  # this checkout's pipeline (cli_env), with no config file and no well-known lock
    noted = subprocess.run(
        [sys.executable, "-c", code], env=cli_env(), capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert len(noted) == 1 and "`lockwarden init`" in noted[0], noted
    written = tmp_path / "config.toml"
    assert run_cli("init", "--path", str(written)).returncode == 0
    checked = run_cli("check-config", "--config", str(written))
    assert checked.returncode == 0, checked.stderr


DURATION_OPTIONS = [
    ("inspect", "--warn-after"),
    ("inspect", "--critical-after"),
    ("why", "--warn-after"),
    ("why", "--critical-after"),
    ("hold", "--max-hold"),
    ("hold", "--wait"),
    ("hold", "--kill-after"),
    ("hold", "--kill-grace"),
    ("hold", "--warn-every"),
]


@pytest.mark.parametrize(("command", "option"), DURATION_OPTIONS)
def test_a_bad_duration_option_is_named(tmp_path: Path, command: str, option: str) -> None:
    """A duration the parser rejects names its option and command, as a bad --now or --wait-ms
    does, exits 64, and hold takes nothing. It used to say only `lockwarden: error: "5min" is
    not a duration`, leaving the user to guess which option."""
    lock = tmp_path / "LOCK"
    tail = {"inspect": [str(lock)], "why": [], "hold": [str(lock), "--role", "t", "--", "true"]}
    completed = run_cli(command, option, "5min", *tail[command])
    assert completed.returncode == 64
    said = f'lockwarden {command}: error: argument {option}: "5min" is not a duration; use e.g.'
    assert said in completed.stderr
    assert not lock.exists()
    fine = run_cli(command, option, "20m", *tail[command])
    assert fine.returncode == 0, fine.stderr
    assert "error" not in fine.stderr


def test_inspect_a_store_directory_names_the_holder(tmp_path: Path, children: Children) -> None:
    store = tmp_path / "store"
    store.mkdir()
    started = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    holder = children.python(MKDIR_HOLDER, str(store / "LOCK"), "maintenance-job", started)
    completed = run_cli("inspect", str(store))
    assert completed.returncode == 0
    assert f"PID {holder.pid} (maintenance-job)" in completed.stdout
    assert "action" not in completed.stdout  # within its budget: nothing to do
    assert "format auto picked owner-record" in completed.stdout


def test_inspect_a_store_without_a_lock_is_free(tmp_path: Path) -> None:
    completed = run_cli("inspect", str(tmp_path), "--json")
    finding = json.loads(completed.stdout)["locks"][0]
    assert (completed.returncode, finding["state"], finding["path"]) == (
        0,
        "free",
        str(tmp_path / "LOCK"),
    )


RELEASES_ON_REQUEST = """
import json, os, socket, sys
lock = sys.argv[1]
os.mkdir(lock)
with open(os.path.join(lock, "owner.json"), "w") as handle:
    json.dump({"pid": os.getpid(), "role": "migration", "host": socket.gethostname()}, handle)
print("ready", flush=True)
sys.stdin.readline()  # hold until the test says "release"
os.remove(os.path.join(lock, "owner.json"))
os.rmdir(lock)
"""


def test_inspect_wait_ms_sees_a_release_mid_wait(tmp_path: Path, children: Children) -> None:
    lock = tmp_path / "LOCK"
    holder = children.start(
        [sys.executable, "-c", RELEASES_ON_REQUEST, str(lock)],
        ready="ready",
        stdin=subprocess.PIPE,
    )
    watcher = children.start(
        [sys.executable, "-m", "lockwarden", "inspect", str(lock), "--wait-ms", "60000"],
        env=cli_env(),
    )
    assert watcher.stderr is not None and holder.stdin is not None
    assert "watching" in watcher.stderr.readline()  # it saw the lock held, and now waits
    holder.stdin.write("release\n")
    holder.stdin.close()
    output, _ = watcher.communicate(timeout=30)
    assert watcher.returncode == 0, output
    assert " free " in output
    assert "released after" in output  # it returned on the release, not after 60 s


def test_inspect_wait_ms_reports_a_lock_still_held(tmp_path: Path, children: Children) -> None:
    lock = tmp_path / "LOCK"
    holder = children.start(
        [sys.executable, "-c", RELEASES_ON_REQUEST, str(lock)],
        ready="ready",
        stdin=subprocess.PIPE,
    )
    assert holder.stdin is not None
    completed = run_cli("inspect", str(lock), "--wait-ms", "300")
    assert completed.returncode == 0
    assert "still held after waiting 300 ms" in completed.stdout


def test_once_without_config_checks_the_builtin_locks() -> None:
    completed = run_cli("--once", "--json")
    document = json.loads(completed.stdout)
    assert completed.returncode in (0, 1, 2, 3)
    assert document["host"] == socket.gethostname()
    assert document["version"] == 2
    assert any("no config file" in note for note in document["notes"])
    assert {lock["format"] for lock in document["locks"]} <= {"dpkg", "kernel"}
    assert any(lock["format"] == "dpkg" for lock in document["locks"])


def test_json_document_has_the_documented_shape(tmp_path: Path, children: Children) -> None:
    """Version 2 (run_cli also validates it against schema/report-v2.schema.json)."""
    lock = tmp_path / "LOCK"
    started = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    holder = children.python(MKDIR_HOLDER, str(lock), "maintenance-job", started)
    document = json.loads(run_cli("inspect", str(lock), "--json").stdout)
    assert (document["version"], document["command"]) == (2, "inspect")
    finding = document["locks"][0]
    assert finding["name"] == str(lock)  # the whole path: two inspected locks never collide
    assert finding["format"] == "owner-record"  # what auto resolved to
    status = lock.stat()
    assert finding["file"] == {
        "device": f"{os.major(status.st_dev)}:{os.minor(status.st_dev)}",
        "inode": status.st_ino,
    }
    assert finding["held"]["bound"] == "exact" and finding["held"]["since"].endswith("Z")
    [only] = finding["holders"]
    assert (only["pid"], only["role"], only["via"], only["lock"]) == (
        holder.pid,
        "maintenance-job",
        "record",
        None,
    )
    assert finding["action"] is None  # held within its budget: nothing to do
    assert (finding["waiters"], finding["waiters_unnamed"]) == ([], 0)
    assert document["checked_at"].endswith("Z")


def test_demo_shows_the_blocked_write_and_exits_zero() -> None:
    started = time.monotonic()
    completed = run_cli("demo", timeout=20)
    elapsed = time.monotonic() - started
    assert completed.returncode == 0, completed.stdout + completed.stderr
    output = completed.stdout
    assert "BLOCKED: the store's lock is held by PID" in output
    assert "(maintenance-job), running" in output
    assert "retrying harder never helps" in output
    assert "None" not in output and "True" not in output  # words, not Python values
    assert "lock acquired after" in output
    assert "cleaned up" in output
    assert not Path(output.rsplit("cleaned up ", 1)[1].strip()).exists()
    print(f"demo took {elapsed:.2f} s")


def test_options_before_the_subcommand_apply_to_it_or_are_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[[lock]]\nname = "a"\n')
    assert run_cli("--config", str(bad), "check-config").returncode == 78
    moved = run_cli("--json", "inspect", str(tmp_path))
    assert json.loads(moved.stdout)["locks"][0]["state"] == "free"
    applied = run_cli("--config", str(bad), "inspect", str(tmp_path))  # its locks' budgets
    assert applied.returncode == 78, applied.stderr
    refused = run_cli("--config", str(bad), "demo")
    assert refused.returncode == 64
    assert "--config does not apply to 'demo'" in refused.stderr
    combined = run_cli("--once", "inspect", str(tmp_path))
    assert combined.returncode == 64
    assert "--once does not combine with 'inspect'" in combined.stderr


def test_inspect_refuses_a_warning_budget_longer_than_the_critical_one(tmp_path: Path) -> None:
    completed = run_cli("inspect", str(tmp_path), "--warn-after", "2h", "--critical-after", "1h")
    assert completed.returncode == 64
    assert "a warning must come first" in completed.stderr


def test_a_lock_in_a_missing_directory_is_unknown_not_free(tmp_path: Path) -> None:
    completed = run_cli("inspect", str(tmp_path / "nowhere" / "LOCK"), "--json")
    finding = json.loads(completed.stdout)["locks"][0]
    assert (completed.returncode, finding["state"]) == (3, "unknown")
    assert finding["unknown_cause"] == "missing_directory"
    assert str(tmp_path / "nowhere") in finding["reason"]  # which directory, for the person


def test_a_config_without_locks_is_unknown_to_a_monitor(tmp_path: Path) -> None:
    """Nothing to watch at all (no [[lock]], blocked writers off) is unknown; with the host's
    blocked writers looked for, the run did check something."""
    empty = tmp_path / "empty.toml"
    empty.write_text('[defaults]\nwarn_after = "5m"\n[host]\nblocked_writers = false\n')
    completed = run_cli("--once", "--config", str(empty))
    assert completed.returncode == 3
    assert "lists no [[lock]]: nothing was checked" in completed.stderr
    host_only = tmp_path / "host-only.toml"
    host_only.write_text('[defaults]\nwarn_after = "5m"\n')
    completed = run_cli("--once", "--config", str(host_only), "-v")
    assert completed.returncode == 0, completed.stderr
    assert "only blocked writers were looked for" in completed.stderr


def test_a_reader_that_goes_away_ends_the_run_like_a_pipeline(tmp_path: Path) -> None:
    """Enough locks that the JSON report overflows a pipe: closing the reader first makes the
    write fail with EPIPE, which must end the run with 141 (128 + SIGPIPE), not a traceback."""
    tables = "".join(
        f'[[lock]]\nname = "l{number}"\npath = "{tmp_path}/l{number}.lock"\n'
        for number in range(400)
    )
    config = tmp_path / "many.toml"
    config.write_text(tables)
    reader, writer = os.pipe()
    os.close(reader)
    try:
        completed = subprocess.run(
            [sys.executable, "-m", "lockwarden", "--once", "--json", "--config", str(config)],
            stdout=writer,
            stderr=subprocess.PIPE,
            text=True,
            env=cli_env(),
            timeout=60,
            check=False,
        )
    finally:
        os.close(writer)
    assert completed.returncode == 141, completed.stderr
    assert "Traceback" not in completed.stderr


HOLDER_WITH_NEWLINES = """
import fcntl, sys, time
handle = open(sys.argv[1], "a")
fcntl.flock(handle, fcntl.LOCK_EX)
print("ready", flush=True)
time.sleep(120)
"""


def test_a_late_kernel_lock_says_its_duration_is_an_upper_bound_and_escapes_newlines(
    tmp_path: Path, children: Children
) -> None:
    """A holder's running time is only an upper bound: said as one, and never a page; past
    the budget it is neither "within" it nor past it. A what-if an hour on (`--now`) projects
    the hold seen now, as a run then would have counted it."""
    lock = tmp_path / "k.lock"
    lock.touch()
    holder = children.start(
        [sys.executable, "-c", HOLDER_WITH_NEWLINES, str(lock), "line one\nFAKE  forged line"],
        ready="ready",
    )
    time.sleep(1.5)  # the holder has run longer than the 1 s budget
    completed = run_cli("inspect", str(lock), "--warn-after", "1s")
    assert completed.returncode == 0, completed.stdout
    assert f"PID {holder.pid}" in completed.stdout
    assert "for up to 1s (its running time" in completed.stdout
    assert "not yet known to be past its 1s budget" in completed.stdout
    assert "line one\\nFAKE  forged line" in completed.stdout
    assert "\nFAKE" not in completed.stdout

    later = (datetime.now(UTC) + timedelta(hours=3, seconds=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    what_if = run_cli("inspect", str(lock), "--now", later)
    assert what_if.returncode == 2, what_if.stdout
    assert "for at least 3h00m" in what_if.stdout


def test_once_through_the_entry_point_names_the_holder(tmp_path: Path, children: Children) -> None:
    """`python -m lockwarden` goes through cli.run, the installed command's entry point."""
    lock = tmp_path / "store.lock"
    lock.touch()
    holder = children.python(FLOCK_HOLDER, str(lock))
    config = write_config(
        tmp_path / "config.toml",
        f'[[lock]]\nname = "store"\npath = "{lock}"\nformat = "kernel"\n',
    )
    code, document = run_json("--once", "--config", config)
    assert code == 0
    (finding,) = document["locks"]
    assert finding["state"] == "held"
    assert finding["holders"][0]["pid"] == holder.pid
    assert os.path.exists(lock)


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ((), "nothing to do"),
        (("--dry-run",), "--dry-run needs --once"),
        (("--json",), "--json needs --once"),
    ],
)
def test_a_call_with_nothing_to_do_says_why_after_the_help(
    arguments: tuple[str, ...], says: str
) -> None:
    completed = run_cli(*arguments)
    assert completed.returncode == 64
    last = completed.stderr.splitlines()[-1]
    assert last == f"lockwarden: error: {says}: give --once or a COMMAND (see above)"
    assert completed.stdout == ""


def test_check_config_refuses_a_password_file_no_run_could_read(tmp_path: Path) -> None:
    """Each run would report the database lock unknown for it: check-config says so first.
    A credential name is the service's alone (named, not checked); a file other users can
    read is warned about."""
    lock = (
        '[[lock]]\nname = "app-db"\ndatabase = "postgresql"\n'
        'connection = "host=127.0.0.1 dbname=app user=monitor"\nadvisory_key = "prisma"\n'
    )
    missing = tmp_path / "no-such-password"
    config = write_config(tmp_path / "a.toml", lock + f'password_file = "{missing}"\n')
    refused = run_cli("check-config", "--config", config)
    assert refused.returncode == 78, refused.stderr
    assert f"lock[1].password_file: cannot read {missing}: No such file or directory" in (
        refused.stderr
    )
    readable = tmp_path / "password"
    readable.write_text("secret\n")
    readable.chmod(0o644)
    config = write_config(tmp_path / "b.toml", lock + f'password_file = "{readable}"\n')
    warned = run_cli("check-config", "--config", config)
    assert warned.returncode == 0, warned.stderr
    assert f"{readable} is readable by other users (mode 0644)" in warned.stderr
    config = write_config(tmp_path / "c.toml", lock + 'password_file = "app-db-password"\n')
    unseen = run_cli("check-config", "--config", config)
    assert unseen.returncode == 0, unseen.stderr
    assert "'app-db-password' is a systemd credential, which only the service sees" in (
        unseen.stderr
    )


def test_check_config_and_notify_test_read_the_units_credential_where_systemd_finds_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """As root in a shell there is no $CREDENTIALS_DIRECTORY: the notify credential is read
    from the first store LoadCredential= searches that has it, and the run says which file.
    Only that credential (the one the shipped unit loads): other credential names, such as a
    database's password_file, are not looked up there."""
    from lockwarden.cli.commands import the_units_credential
    from lockwarden.config import NotifySettings

    stores = [tmp_path / "etc-credstore", tmp_path / "run-credstore"]
    for store in stores:
        store.mkdir()
    credential = stores[1] / "lockwarden-notify-urls"
    credential.write_text("json://127.0.0.1:9/hook\n")
    paths = [str(store) for store in stores]
    found = the_units_credential(NotifySettings(), {}, paths)
    if os.geteuid() != 0:  # a user's shell: the system service's credential is not its own
        assert found == NotifySettings()
        return
    assert found == NotifySettings(urls_file=str(credential))
    assert f"reading {credential}, as LoadCredential= passes it" in capsys.readouterr().err
    given = {"CREDENTIALS_DIRECTORY": ""}  # set, even empty: not looked up
    assert the_units_credential(NotifySettings(), given, paths) == NotifySettings()
    own = NotifySettings(urls_file="/etc/lockwarden/urls")  # the config's own wins
    assert the_units_credential(own, {}, paths) == own
    assert capsys.readouterr().err == ""


def test_inspect_of_a_configured_lock_judges_it_with_that_locks_budgets(
    tmp_path: Path, children: Children
) -> None:
    """The timer pages CRITICAL for a lock whose critical_after is 2m; `inspect` of the same
    path with that config says so too, and says whose budgets it used. Budgets given on the
    command line still win; without the config, the defaults (15m) apply."""
    store = tmp_path / "store"
    store.mkdir()
    lock = store / "LOCK"
    taken = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=2)
    children.python(MKDIR_HOLDER, str(lock), "maintenance-job", taken.isoformat())
    config = write_config(
        tmp_path / "config.toml",
        f'[[lock]]\nname = "wa-store"\npath = "{lock}"\nwarn_after = "1m"\ncritical_after = "2m"\n',
    )
    later = (taken + timedelta(minutes=5)).isoformat()
    configured = run_cli("inspect", str(store), "--config", config, "--now", later)
    assert configured.returncode == 2, configured.stdout
    assert "held_too_long" in configured.stdout
    assert f"judged as [[lock]] 'wa-store' of {config}: warn after 1m, critical after 2m" in (
        configured.stdout
    )
    overridden = run_cli(
        "inspect", str(lock), "--config", config, "--now", later, "--critical-after", "1h"
    )
    assert overridden.returncode == 1, overridden.stdout  # past warn_after 1m, not 1h
    plain = run_cli("inspect", str(lock), "--now", later)
    assert plain.returncode == 0 and "within its 15m00s budget" in plain.stdout, plain.stdout


def test_the_configured_role_of_a_store_reaches_the_report_json_and_textfile(
    tmp_path: Path, children: Children
) -> None:
    """`role` of a [[lock]] ("shown in alerts") is what the store is: the text report, the JSON
    and the textfile's holder labels say it, beside the holder's own role."""
    lock = tmp_path / "store.lock"
    children.python(FLOCK_HOLDER, str(lock))
    textfile = tmp_path / "lockwarden.prom"
    config = write_config(
        tmp_path / "config.toml",
        f'[prometheus]\ntextfile = "{textfile}"\n'
        f'[[lock]]\nname = "wa-store"\npath = "{lock}"\nformat = "kernel"\n'
        'role = "WhatsApp session store"\n',
    )
    text = run_cli("--once", "--config", config)
    assert re.search(r"^ +store +WhatsApp session store$", text.stdout, re.M), text.stdout
    _code, document = run_json("--once", "--config", config)
    assert document["locks"][0]["store"] == "WhatsApp session store"
    assert 'store="WhatsApp session store"' in textfile.read_text()


@pytest.mark.parametrize(("minutes", "stuck"), [(1, False), (9, False), (11, True), (600, True)])
def test_a_run_lock_held_past_ten_minutes_is_an_error_naming_what_to_stop(
    minutes: int, stuck: bool
) -> None:
    """A run takes seconds and the unit ends one after 5 minutes: a holder of the run lock
    past ten (a child stuck on a hung mount keeps its descriptor) skips every run, so it is
    said as an error with the action, not a quiet skip."""
    from lockwarden.cli.alert_commands import stuck_message
    from lockwarden.model import Holder
    from lockwarden.state.journal import RunBusy

    now = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
    holder = Holder(pid=4242, alive=True, name="lockwarden",
                    started_at=now - timedelta(minutes=minutes))  # fmt: skip
    said = stuck_message(RunBusy(4242, "/var/lib/lockwarden/run.lock"), holder, now)
    assert (said is not None) is stuck
    if said is not None:
        assert "every run is skipped while it holds it" in said and "kill 4242" in said


def test_inspect_of_a_directory_is_not_judged_as_a_file_configured_in_it(tmp_path: Path) -> None:
    """`[[lock]] path = DIR/backup.lock` is that file's; `inspect DIR` is about the directory
    (its STORE/LOCK), never judged with the file's budgets. A configured STORE/LOCK is its
    store directory's."""
    directory = tmp_path / "var-lock"
    directory.mkdir()
    config = write_config(
        tmp_path / "config.toml",
        f'[[lock]]\nname = "backup"\npath = "{directory / "backup.lock"}"\n'
        f'[[lock]]\nname = "store"\npath = "{tmp_path / "store" / "LOCK"}"\n',
    )
    (tmp_path / "store").mkdir()
    unrelated = run_cli("inspect", str(directory), "--config", config)
    assert "judged as [[lock]]" not in unrelated.stdout, unrelated.stdout
    store = run_cli("inspect", str(tmp_path / "store"), "--config", config)
    assert "judged as [[lock]] 'store'" in store.stdout, store.stdout


def test_history_with_alerting_off_says_why_it_has_no_incidents(tmp_path: Path) -> None:
    """Runs journal incidents only for alerts: with none configured, 'no incidents' after
    critical runs read as if nothing had happened (a new-user trial)."""
    config = write_config(
        tmp_path / "config.toml",
        f'[state]\npath = "{tmp_path / "state" / "state.jsonl"}"\n\n'
        f'[[lock]]\nname = "x"\npath = "{tmp_path / "x.lock"}"\nformat = "kernel"\n',
    )
    shown = run_cli("history", "--config", config)
    assert shown.returncode == 0, shown.stderr
    assert "alerting is off: runs journal incidents only for alerts" in shown.stdout
    alerting = tmp_path / "alerting.toml"
    alerting.write_text(Path(config).read_text() + '\n[notify]\nurls = ["json://127.0.0.1:9"]\n')
    alerting.chmod(0o600)
    assert "alerting is off" not in run_cli("history", "--config", str(alerting)).stdout


def test_only_the_once_runs_help_says_now_is_journaled() -> None:
    """`--now` is journaled by --once alone: inspect's, why's and discover's help said it
    too, of commands that journal nothing (a new-user trial)."""
    assert "--once also journals it" in " ".join(run_cli("--help").stdout.split())
    for command in ("inspect", "why", "discover", "history"):
        shown = " ".join(run_cli(command, "--help").stdout.split())
        assert "--now RFC3339" in shown and "journals it" not in shown, command
