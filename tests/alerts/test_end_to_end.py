"""End to end through the real CLI (`python -m lockwarden --once`), with a real child process
holding a real mkdir lock, a real HTTP receiver (apprise `json://`) and a real SMTP server
(aiosmtpd, apprise `mailto://`) on 127.0.0.1. The clock moves with `--now`.

The holder takes its lock at about the real "now" (`base`); `--now base+2h` makes it held 2h,
past critical_after = 1h.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import apprise
import pytest

from conftest import FLOCK_HOLDER

from .helpers import Children, Receiver, Smtp, cli_env, run_cli, title_kind, wait_until

TOKEN = "Tok3nSecretAbcdefXyz"
HEARTBEAT_TOKEN = "hb0123456789abcdefSecret"
EXIT_BUSY = 75

# The holder removes its lock when told to stop, as a well-behaved job does.
TIDY_HOLDER = """
import json, os, shutil, signal, socket, sys, time
lock, role = sys.argv[1], sys.argv[2]
os.mkdir(lock)
started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
record = {"pid": os.getpid(), "role": role, "host": socket.gethostname(), "startedAt": started}
with open(os.path.join(lock, "owner.json"), "w") as handle:
    json.dump(record, handle)
def stop(*_):
    shutil.rmtree(lock)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
print("ready", flush=True)
time.sleep(120)
"""


class Scenario:
    def __init__(self, tmp_path: Path, children: Children) -> None:
        self.tmp_path = tmp_path
        self.children = children
        self.store = tmp_path / "store"
        self.store.mkdir()
        self.lock = self.store / "LOCK"
        self.state_dir = tmp_path / "state"
        self.state_dir.mkdir(mode=0o700)
        self.state_path = self.state_dir / "state.jsonl"
        self.config = tmp_path / "lockwarden.toml"
        self.base = datetime.now(UTC)
        self.holder: subprocess.Popen[str] | None = None

    def configure(
        self,
        urls: list[str],
        timeout: str = "3s",
        extra: str = "",
        state_path: str | None = None,
    ) -> None:
        self.config.write_text(
            f"""
[alerts]
repeat_interval = "1h"

[state]
path = {json.dumps(state_path or str(self.state_path))}

[notify]
urls = {json.dumps(urls)}
timeout = "{timeout}"
{extra}

[[lock]]
name = "wa-store"
path = "{self.lock}"
warn_after = "30m"
critical_after = "1h"
"""
        )

    def hold(self, role: str = "maintenance-job") -> int:
        self.holder = self.children.python(TIDY_HOLDER, str(self.lock), role)
        return self.holder.pid

    def release(self) -> None:
        assert self.holder is not None
        self.holder.send_signal(signal.SIGTERM)
        self.holder.wait(timeout=10)
        assert not self.lock.exists()

    def at(self, minutes: float) -> str:
        moment = self.base + timedelta(minutes=minutes)
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")

    def once(self, minutes: float, *extra: str, **env: str) -> subprocess.CompletedProcess[str]:
        return run_cli(
            "--once", "--config", str(self.config), "--now", self.at(minutes), *extra, **env
        )

    def start_once(self, minutes: float) -> subprocess.Popen[str]:
        """`--once` in the background (for overlap tests), killed by PID at teardown."""
        run = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "lockwarden",
                "--once",
                "--config",
                str(self.config),
                "--now",
                self.at(minutes),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=cli_env(),
        )
        self.children.procs.append(run)
        return run

    def journal_text(self) -> str:
        return self.state_path.read_text() if self.state_path.exists() else ""


@pytest.fixture
def scenario(tmp_path: Path, children: Children) -> Scenario:
    return Scenario(tmp_path, children)


def titles(receiver: Receiver) -> list[str]:
    return [str(payload["title"]) for payload in receiver.payloads]


def test_alert_once_per_service_then_quiet_then_reminder_then_resolved_then_new_holder(
    scenario: Scenario, receiver: Receiver, smtp: Smtp
) -> None:
    scenario.configure([receiver.url(TOKEN), smtp.url()])
    pid = scenario.hold()

    first = scenario.once(120)
    assert first.returncode == 2, first.stderr
    assert len(receiver.payloads) == 1 and len(smtp.sink.messages) == 1
    host = socket.gethostname()
    # severity, host, lock, duration, holder (held since ~base)
    assert titles(receiver)[0].startswith(f"CRITICAL {host}: wa-store blocked 1h59m by PID")
    assert f"by PID {pid} (maintenance-job)" in titles(receiver)[0]

    for minutes in (130, 179):
        quiet = scenario.once(minutes)
        assert quiet.returncode == 2  # still critical: the report never hides it
    assert len(receiver.payloads) == 1 and len(smtp.sink.messages) == 1

    scenario.once(181)
    assert len(receiver.payloads) == 2 and len(smtp.sink.messages) == 2
    assert titles(receiver)[1].startswith(f"CRITICAL {host}: reminder: wa-store blocked")
    assert title_kind(smtp.subjects()[1]) == "reminder"
    scenario.once(190)
    assert len(receiver.payloads) == 2

    scenario.release()
    resolved = scenario.once(200)
    assert resolved.returncode == 0, resolved.stdout
    assert len(receiver.payloads) == 3 and len(smtp.sink.messages) == 3
    assert titles(receiver)[2].startswith(f"RESOLVED {host}: wa-store no longer blocked after 3h")
    assert f"held by PID {pid} (maintenance-job)" in titles(receiver)[2]
    assert "lasted 3h" in smtp.bodies()[2]
    scenario.once(300)
    assert len(receiver.payloads) == 3 and len(smtp.sink.messages) == 3

    new_pid = scenario.hold(role="other-job")
    scenario.once(400)
    assert len(receiver.payloads) == 4 and len(smtp.sink.messages) == 4
    assert f"by PID {new_pid} (other-job)" in titles(receiver)[3]
    assert title_kind(titles(receiver)[3]) == "writes blocked"


def test_a_holder_killed_while_paged_is_one_incident_said_in_one_message(
    scenario: Scenario, receiver: Receiver, smtp: Smtp
) -> None:
    """A real holder paged as held too long, then killed with SIGKILL: its owner record stays
    and the lock is stale. The next run sends one message, to mail and webhook alike, that the
    paged holder died and writes are still blocked; never a RESOLVED before it."""
    scenario.configure([receiver.url(TOKEN), smtp.url()])
    pid = scenario.hold()
    assert scenario.once(120).returncode == 2
    assert scenario.holder is not None
    scenario.holder.kill()
    scenario.holder.wait(timeout=10)
    assert scenario.lock.exists(), "a killed holder leaves its owner record"

    stale = scenario.once(121)
    assert stale.returncode == 2, stale.stdout
    assert len(receiver.payloads) == 2 and len(smtp.sink.messages) == 2
    host = socket.gethostname()
    told = titles(receiver)[1]
    assert told.startswith(f"CRITICAL {host}: writes to wa-store still blocked: PID {pid}"), told
    assert "(maintenance-job)" in told and told.endswith("died and left the lock")
    assert not any(title.startswith("RESOLVED") for title in titles(receiver))
    assert not any(subject.startswith("RESOLVED") for subject in smtp.subjects())
    assert "Was held by" in smtp.bodies()[1]


def test_mail_body_and_chat_payload_name_pid_role_command_and_action(
    scenario: Scenario, receiver: Receiver, smtp: Smtp
) -> None:
    scenario.configure([receiver.url(TOKEN), smtp.url()])
    pid = scenario.hold()
    report = json.loads(scenario.once(120, "--json").stdout)
    action, argv = report["locks"][0]["action"]["line"], report["locks"][0]["action"]["argv"]
    assert argv == ["kill", str(pid)] or argv[0] == "systemctl", argv
    chat = str(receiver.payloads[0]["message"])
    mail = smtp.bodies()[0]
    for body in (chat, mail):
        assert f"PID {pid}" in body
        assert "role maintenance-job" in body
        assert "import json, os, shutil" in body  # the holder's command line
        assert action in body
        assert str(scenario.lock) in body
        assert "Host:" in body and "Held for:" in body
    assert "**Action:**" in chat  # Markdown for chat
    assert "**" not in mail and "Action:" in mail  # plain text for email
    assert smtp.sink.messages[0].get_content_type() == "text/plain"


def test_receiver_refused_then_500_then_hanging_then_up_delivers_exactly_once(
    scenario: Scenario, receiver: Receiver
) -> None:
    """Each failing run must end within its notify budget (1 s) plus process start-up: the
    bound below (15 s) is far under the receiver's 30 s hang, so a run stuck on it fails."""
    scenario.configure([receiver.url(TOKEN)], timeout="1s")
    scenario.hold()
    receiver.stop()
    outcomes = []
    for minutes, mode in ((120, "refused"), (125, "fail"), (130, "hang")):
        if mode != "refused":
            if receiver._server is None:
                receiver.start()
            receiver.mode = mode
        started = time.monotonic()
        done = scenario.once(minutes, "--json", timeout=15)
        outcomes.append((mode, done.returncode, time.monotonic() - started))
        assert done.returncode == 2, done.stderr  # the finding is still critical
        deliveries = json.loads(done.stdout)["alerts"]["deliveries"]
        assert [delivery["delivered"] for delivery in deliveries] == [False], deliveries
    assert receiver.payloads == []
    assert receiver.requests == 2  # the 500 and the hang were real attempts
    receiver.release.set()
    receiver.mode = "ok"
    scenario.once(135)
    scenario.once(140)
    scenario.once(145)
    assert len(receiver.payloads) == 1
    assert title_kind(titles(receiver)[0]) == "writes blocked"
    late = f"Due at {scenario.at(120)} (15m00s ago) and sent late, as no earlier attempt"
    assert late in str(receiver.payloads[0]["message"])  # its figures are from then
    history = run_cli("history", "--config", str(scenario.config))
    assert history.stdout.count("failed (") == 3 and history.stdout.count("delivered") == 1


def test_two_services_one_down_each_gets_exactly_one(
    scenario: Scenario, receiver: Receiver
) -> None:
    down = Receiver()
    scenario.configure([receiver.url(TOKEN), down.url()])
    scenario.hold()
    scenario.once(120)
    scenario.once(125)
    assert len(receiver.payloads) == 1 and down.payloads == []
    down.start()
    try:
        scenario.once(130)
        scenario.once(135)
        assert len(receiver.payloads) == 1
        assert len(down.payloads) == 1
        assert down.payloads[0]["title"] == receiver.payloads[0]["title"]
    finally:
        down.stop()


def test_a_retry_to_a_service_removed_from_the_config_is_said_to_be_dropped(
    scenario: Scenario, receiver: Receiver
) -> None:
    down = Receiver()
    scenario.configure([receiver.url(TOKEN), down.url()])
    scenario.hold()
    scenario.once(120)  # delivered to one, due again to the other
    scenario.configure([receiver.url(TOKEN)])
    done = scenario.once(125, "--json")
    notes = json.loads(done.stdout)["notes"]
    assert "alert for wa-store: not retried to 1 service(s) no longer configured" in notes
    assert len(receiver.payloads) == 1 and down.payloads == []


def test_an_alert_nobody_got_goes_to_the_service_that_replaced_its_own(
    scenario: Scenario, receiver: Receiver
) -> None:
    """The one service was down (or its URL wrong) when the alert was due; the operator then
    replaces it. Nobody has the alert, so it goes to the new service now, not at the first
    reminder an hour later."""
    down = Receiver()
    scenario.configure([down.url()])
    scenario.hold()
    scenario.once(120)  # due, and not delivered
    assert down.payloads == [] and receiver.payloads == []
    scenario.configure([receiver.url(TOKEN)])
    done = scenario.once(125, "--json")
    [payload] = receiver.payloads
    assert "wa-store" in payload["title"] and "reminder" not in payload["title"]
    assert not any("no longer configured" in note for note in json.loads(done.stdout)["notes"])
    scenario.once(130)
    assert len(receiver.payloads) == 1  # delivered once: not again


def test_torn_last_line_and_corrupt_middle_line_cause_no_duplicate(
    scenario: Scenario, receiver: Receiver
) -> None:
    scenario.configure([receiver.url(TOKEN)])
    scenario.hold()
    scenario.once(120)
    records = scenario.journal_text().splitlines()
    corrupted = [records[0], "{not json at all", *records[1:]]
    scenario.state_path.write_text("\n".join(corrupted) + '\n{"type":"sent","at":"20')
    again = scenario.once(125)
    assert "line 2 is not a journal record; skipped" in again.stderr
    assert "torn" in again.stderr
    assert len(receiver.payloads) == 1
    assert scenario.state_path.read_bytes().endswith(b"\n")
    scenario.once(181)
    assert len(receiver.payloads) == 2  # the reminder still comes on time


def test_enospc_state_still_alerts_and_reports_state_degraded(
    scenario: Scenario, receiver: Receiver, tiny_tmpfs: Path
) -> None:
    """State on a real 64 KiB tmpfs, filled: the alert is delivered, the run has a "state
    degraded" finding (unknown) beside the critical lock, which still decides the exit code (2),
    and one "state degraded" notice goes out."""
    state_dir = tiny_tmpfs / "state"
    state_dir.mkdir(mode=0o700)
    scenario.configure([receiver.url(TOKEN)], state_path=str(state_dir / "state.jsonl"))
    scenario.hold()
    filler = os.open(tiny_tmpfs / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        with pytest.raises(OSError):
            while True:
                os.write(filler, b"x" * 4096)
    finally:
        os.close(filler)
    done = scenario.once(120, "--json")
    assert done.returncode == 2, done.stderr  # critical outranks the state's unknown
    report = json.loads(done.stdout)
    states = {lock["name"]: lock for lock in report["locks"]}
    assert states["wa-store"]["state"] == "held_too_long"  # the finding is not hidden
    assert states["lockwarden:state"]["state"] == "unknown"
    assert states["lockwarden:state"]["severity"] == "unknown"
    assert report["alerts"]["state_problems"]
    assert [d["delivered"] for d in report["alerts"]["deliveries"]] == [True, True]
    assert [title_kind(t) for t in titles(receiver)] == ["writes blocked", "state degraded"]
    os.unlink(tiny_tmpfs / "filler")
    recovered = scenario.once(125, "--json")
    assert recovered.returncode == 2
    report = json.loads(recovered.stdout)
    assert [lock["name"] for lock in report["locks"]] == ["wa-store"]
    assert report["alerts"]["state_problems"] == []


@pytest.mark.parametrize("fault", ["missing-parent", "symlink", "world-writable", "read-only"])
def test_unusable_state_dir_still_alerts_and_says_why(
    scenario: Scenario, receiver: Receiver, fault: str, tmp_path: Path
) -> None:
    target = tmp_path / "bad-state"
    if fault == "missing-parent":
        state_dir = tmp_path / "no" / "such"
    elif fault == "symlink":
        target.mkdir(mode=0o700)
        state_dir = tmp_path / "link"
        state_dir.symlink_to(target)
    elif fault == "world-writable":
        state_dir = target
        state_dir.mkdir()
        state_dir.chmod(0o777)
    else:
        state_dir = target
        state_dir.mkdir(mode=0o700)
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "ro,size=64k,mode=0700", "tmpfs", str(state_dir)],
            check=False,
            capture_output=True,
        )
        if not os.path.ismount(state_dir):
            message = "cannot mount a read-only tmpfs here"
            if os.environ.get("CI") == "true":
                pytest.fail(message)
            pytest.skip(message)
    try:
        scenario.configure([receiver.url(TOKEN)], state_path=str(state_dir / "state.jsonl"))
        scenario.hold()
        done = scenario.once(120, "--json")
        assert done.returncode == 2, done.stderr  # the critical lock, not the state, decides
        states = {lock["name"]: lock for lock in json.loads(done.stdout)["locks"]}
        assert states["lockwarden:state"]["state"] == "unknown"
        expected = {
            "missing-parent": "does not exist",
            "symlink": "symlink",
            "world-writable": "writable by every user",
            "read-only": "Read-only file system",
        }[fault]
        assert expected in states["lockwarden:state"]["reason"]
        assert title_kind(titles(receiver)[0]) == "writes blocked"
        assert len(receiver.payloads) == 2  # the alert and one "state degraded" notice
        if fault in ("symlink", "world-writable"):
            assert sorted(p.name for p in target.iterdir()) == []
    finally:
        if fault == "read-only":
            subprocess.run(["umount", "-l", str(state_dir)], check=False)


def test_a_young_run_lock_holder_skips_the_run_at_notice_naming_it(
    scenario: Scenario, receiver: Receiver, children: Children
) -> None:
    """A process that holds the run lock skips the run: exit 75, naming it (the kernel's
    holder of the lock); past ten minutes it is an error of its own (alerts tests/unit)."""
    scenario.configure([receiver.url(TOKEN)])
    run_lock = scenario.state_dir / "run.lock"
    wedged = children.python(FLOCK_HOLDER, str(run_lock))
    skipped = scenario.once(0)
    assert skipped.returncode == EXIT_BUSY, skipped.stderr
    assert f"PID {wedged.pid}" in skipped.stderr and "error" not in skipped.stderr
    assert receiver.payloads == []


def test_overlapping_runs_send_no_duplicate_and_the_second_names_the_first(
    scenario: Scenario, receiver: Receiver
) -> None:
    scenario.configure([receiver.url(TOKEN)], timeout="25s")
    scenario.hold()
    receiver.mode = "slow"  # the first run is mid-send until the second has come and gone
    first = scenario.start_once(120)
    assert wait_until(lambda: receiver.requests == 1, timeout=15)
    second = scenario.once(120)
    assert second.returncode == EXIT_BUSY
    assert f"another lockwarden run is in progress (PID {first.pid}" in second.stderr
    assert second.stdout == ""
    receiver.release.set()
    first.wait(timeout=15)
    assert first.returncode == 2
    assert len(receiver.payloads) == 1
    scenario.once(125)
    assert len(receiver.payloads) == 1


def test_tokens_appear_nowhere_even_with_debug_logging_and_an_echoing_receiver(
    scenario: Scenario, receiver: Receiver
) -> None:
    heartbeat = f"http://127.0.0.1:{receiver.port}/ping/{HEARTBEAT_TOKEN}"
    scenario.configure([receiver.url(TOKEN)], extra=f'\n[heartbeat]\nurl = "{heartbeat}"\n')
    scenario.hold()
    receiver.mode = "fail"  # echoes the request path and headers back in its error body
    outputs = [scenario.once(120, "-v"), scenario.once(125, "-v", "--json")]
    receiver.mode = "ok"
    outputs.append(scenario.once(130, "-v"))
    outputs.append(run_cli("check-config", "--config", str(scenario.config)))
    outputs.append(run_cli("notify-test", "--config", str(scenario.config), "-v"))
    outputs.append(run_cli("history", "--config", str(scenario.config), "--json"))
    assert len(receiver.payloads) == 2  # the alert (on recovery) and the test message
    assert receiver.pings  # the heartbeat really was pinged
    for done in outputs:
        for secret in (TOKEN, HEARTBEAT_TOKEN):
            assert secret not in done.stdout and secret not in done.stderr
    assert "****" in outputs[2].stdout  # deliveries are named in apprise's privacy form
    assert TOKEN not in scenario.journal_text()
    assert HEARTBEAT_TOKEN not in scenario.journal_text()


def test_heartbeat_pings_after_each_run_and_fail_when_delivery_failed(
    scenario: Scenario, receiver: Receiver
) -> None:
    dead = Receiver()  # never started: refused
    heartbeat = f"http://127.0.0.1:{receiver.port}/ping/{HEARTBEAT_TOKEN}"
    scenario.configure(
        [dead.url()], extra=f'\n[heartbeat]\nurl = "{heartbeat}"\nsend_start = true\n'
    )
    scenario.once(10)  # free lock: nothing to send, the run did its job
    scenario.hold()
    scenario.once(120)  # the alert cannot be delivered: the run failed its job
    assert receiver.pings == [
        f"/ping/{HEARTBEAT_TOKEN}/start",
        f"/ping/{HEARTBEAT_TOKEN}",
        f"/ping/{HEARTBEAT_TOKEN}/start",
        f"/ping/{HEARTBEAT_TOKEN}/fail",
    ]
    receiver.stop()
    unheard = scenario.once(125)
    assert unheard.returncode == 2  # a dead heartbeat endpoint is logged, never fatal
    assert "heartbeat ping" in unheard.stderr and HEARTBEAT_TOKEN not in unheard.stderr


def test_dry_run_prints_what_would_be_sent_and_sends_and_writes_nothing(
    scenario: Scenario, receiver: Receiver
) -> None:
    scenario.configure([receiver.url(TOKEN)])
    pid = scenario.hold()
    done = scenario.once(120, "--dry-run")
    assert done.returncode == 2
    assert "dry run: would send alert for wa-store" in done.stdout
    assert f"PID {pid}" in done.stdout
    as_json = json.loads(scenario.once(120, "--dry-run", "--json").stdout)
    assert [item["kind"] for item in as_json["would_send"]] == ["alert"]
    assert receiver.requests == 0
    assert sorted(p.name for p in scenario.state_dir.iterdir()) == []


def test_a_dry_run_says_what_a_real_run_says_of_the_notify_services(
    scenario: Scenario, receiver: Receiver
) -> None:
    """A dry run is how the alerting set-up is tried: an unusable URL is its notify finding
    and exit code too, and it remembers nothing (the next real run checks for itself)."""
    scenario.configure(["nosuch://example", receiver.url(TOKEN)])
    done = scenario.once(0, "--dry-run", "--json")
    assert done.returncode == 3, done.stderr
    [notify] = [f for f in json.loads(done.stdout)["locks"] if f["name"] == "lockwarden:notify"]
    assert "notify.urls[1]: nosuch://…" in notify["reason"]
    assert not check_marker(scenario).exists()
    assert sorted(p.name for p in scenario.state_dir.iterdir()) == []


def test_dry_run_names_the_lock_of_a_retry(scenario: Scenario, receiver: Receiver) -> None:
    """A message a service has not confirmed is retried; a dry run says which lock it is for."""
    scenario.configure([receiver.url(TOKEN)], timeout="1s")
    scenario.hold()
    receiver.stop()
    assert scenario.once(120).returncode == 2  # refused: journaled, due again next run
    done = scenario.once(125, "--dry-run")
    assert "dry run: would send retry of alert for wa-store" in done.stdout, done.stdout
    as_json = json.loads(scenario.once(125, "--dry-run", "--json").stdout)
    assert [(item["kind"], item["lock"]) for item in as_json["would_send"]] == [
        ("retry of alert", "wa-store")
    ]


# apprise's own words for a failed send; apprise 1.2 (Debian 12) sends on a thread of its own
# and keeps no log of it, so there a delivery says only "failure".
APPRISE_1_2 = apprise.__version__.startswith("1.2.")
REFUSED_REASON = (
    "" if APPRISE_1_2 else ": A Connection error occurred sending JSON notification to 127.0.0.1."
)
SERVER_ERROR = "Failed to send JSON POST notification: Internal server error., error=500."


def test_notify_test_reports_each_service(
    scenario: Scenario, receiver: Receiver, smtp: Smtp
) -> None:
    dead = Receiver()
    scenario.configure([receiver.url(TOKEN), f"ops={smtp.url()}", dead.url()])
    done = run_cli("notify-test", "--config", str(scenario.config))
    lines = done.stdout.splitlines()
    assert done.returncode == 1
    assert [line.split()[0] for line in lines] == ["delivered", "delivered", "FAILED"]
    assert "(notify.urls[2], tags ops)" in lines[1]
    assert lines[2].endswith(f"(notify.urls[3]): failure{REFUSED_REASON}"), lines[2]
    assert len(receiver.payloads) == 1 and len(smtp.sink.messages) == 1
    tagged = run_cli("notify-test", "--config", str(scenario.config), "--tag", "ops")
    assert tagged.returncode == 0
    assert len(tagged.stdout.splitlines()) == 1 and tagged.stdout.startswith("delivered")
    assert len(smtp.sink.messages) == 2 and len(receiver.payloads) == 1
    receiver.mode = "fail"  # an HTTP 500 says so, and --json has each service's facts
    as_json = run_cli("notify-test", "--config", str(scenario.config), "--json")
    assert as_json.returncode == 1
    services = json.loads(as_json.stdout)["services"]
    assert [(s["origin"], s["tags"], s["delivered"]) for s in services] == [
        ("notify.urls[1]", [], False),
        ("notify.urls[2]", ["ops"], True),
        ("notify.urls[3]", [], False),
    ]
    assert services[0]["status"] == ("failure" if APPRISE_1_2 else f"failure: {SERVER_ERROR}")
    assert TOKEN not in as_json.stdout


def test_notify_tags_route_a_lock_to_its_services(
    scenario: Scenario, receiver: Receiver, smtp: Smtp
) -> None:
    scenario.configure([receiver.url(TOKEN), f"ops,db={smtp.url()}"])
    text = scenario.config.read_text().replace(
        'critical_after = "1h"', 'critical_after = "1h"\nnotify_tags = ["db"]'
    )
    scenario.config.write_text(text)
    scenario.hold()
    scenario.once(120)
    assert receiver.payloads == [] and len(smtp.sink.messages) == 1


def test_a_lock_whose_notify_tags_no_service_carries_is_said_never_silent(
    scenario: Scenario, receiver: Receiver
) -> None:
    """A mistyped tag ("opz" for "ops") would send a critical alert to nobody: check-config
    refuses it, and every run says so on stderr and as the notify finding, which the exit
    code counts (a critical lock still outranks it), and counts the unsent alert."""
    scenario.configure([f"ops={receiver.url(TOKEN)}"])
    textfile = scenario.tmp_path / "lockwarden.prom"
    text = (
        scenario.config.read_text()
        .replace('critical_after = "1h"', 'critical_after = "1h"\nnotify_tags = ["opz"]')
        .replace("[notify]", f'[prometheus]\ntextfile = "{textfile}"\n\n[notify]')
    )
    scenario.config.write_text(text)
    checked = run_cli("check-config", "--config", str(scenario.config))
    assert checked.returncode == 78, checked.stderr
    assert "lock[1].notify_tags: notify_tags opz match no notify service" in checked.stderr
    said = (
        "lock wa-store: notify_tags opz match no notify service (the services' tags are ops): "
        "its alerts reach nobody"
    )
    tested = run_cli("notify-test", "--config", str(scenario.config))
    assert tested.returncode == 78
    assert tested.stdout.splitlines()[-1] == (
        "UNROUTED  lock wa-store: notify_tags opz match no notify service (the services' tags "
        "are ops): its alerts reach nobody"
    )
    assert len(receiver.payloads) == 1  # the test message itself went to the ops service
    receiver.payloads.clear()
    quiet = scenario.once(0, "--json")  # nothing due yet: said all the same
    assert quiet.returncode == 3, quiet.stderr
    assert said in quiet.stderr
    scenario.hold()
    for minutes, undelivered in ((120, 1), (121, 0)):  # the alert's run, then a later one
        done = scenario.once(minutes, "--json")
        assert done.returncode == 2, done.stderr
        assert said in done.stderr
        findings = {finding["name"]: finding for finding in json.loads(done.stdout)["locks"]}
        assert findings["wa-store"]["state"] == "held_too_long"
        assert findings["lockwarden:notify"]["state"] == "unknown"
        assert said in findings["lockwarden:notify"]["reason"]
        assert json.loads(done.stdout)["alerts"]["unrouted"] == [said]
        assert f"lockwarden_alerts_undelivered {undelivered}" in textfile.read_text()
    assert receiver.payloads == []
    history = run_cli("history", "--config", str(scenario.config)).stdout
    assert "        sent to no service: none matched (notify_tags opz)" in history, history
    routed = text.replace('notify_tags = ["opz"]', 'notify_tags = ["ops"]')
    scenario.config.write_text(routed)
    assert run_cli("check-config", "--config", str(scenario.config)).returncode == 0


def test_urls_from_a_systemd_credential_file_and_an_environment_variable(
    scenario: Scenario, receiver: Receiver, tmp_path: Path
) -> None:
    other = Receiver()
    other.start()
    try:
        credentials = tmp_path / "credentials"
        credentials.mkdir(mode=0o700)
        (credentials / "apprise-urls").write_text(f"# comment\n{receiver.url(TOKEN)}\n")
        scenario.configure(
            [], extra='urls_file = "apprise-urls"\nurls_env = "LOCKWARDEN_TEST_URLS"\n'
        )
        scenario.hold()
        done = scenario.once(
            120,
            CREDENTIALS_DIRECTORY=str(credentials),
            LOCKWARDEN_TEST_URLS=other.url(HEARTBEAT_TOKEN),
        )
        assert done.returncode == 2, done.stderr
        assert len(receiver.payloads) == 1 and len(other.payloads) == 1
        assert TOKEN not in done.stdout and HEARTBEAT_TOKEN not in done.stdout
        missing = run_cli(
            "notify-test",
            "--config",
            str(scenario.config),
            LOCKWARDEN_TEST_URLS=other.url(HEARTBEAT_TOKEN),
        )
        assert missing.returncode == 78
        assert "$CREDENTIALS_DIRECTORY is not set" in missing.stderr
    finally:
        other.stop()


def test_history_lists_incidents_with_their_deliveries(
    scenario: Scenario, receiver: Receiver
) -> None:
    scenario.configure([receiver.url(TOKEN)])
    pid = scenario.hold()
    scenario.once(120)
    scenario.once(181)
    scenario.release()
    scenario.once(200)
    done = run_cli("history", "--config", str(scenario.config), "--lock", "wa-store")
    assert done.returncode == 0
    lines = done.stdout.splitlines()
    assert f"PID {pid} (maintenance-job)" in lines[0] and "resolved" in lines[0]
    kinds = [line.split()[0] for line in lines if line.startswith("    ") and "due" in line]
    assert kinds == ["alert", "reminder", "resolved"]
    assert done.stdout.count("delivered") == 3
    document = json.loads(run_cli("history", "--config", str(scenario.config), "--json").stdout)
    assert [m["kind"] for m in document["incidents"][0]["messages"]] == kinds
    empty = run_cli("history", "--config", str(scenario.config), "--lock", "nope")
    assert empty.stdout == (
        f"no incidents in {scenario.state_path} for nope "
        "(no lock of that name is configured: wa-store)\n"
    )


QUIET_PROBE = """
import sys
from lockwarden.cli.commands import main
code = main(sys.argv[1:])
print(code, "apprise" in sys.modules, "requests" in sys.modules, file=sys.stderr)
"""


def test_a_quiet_run_imports_neither_apprise_nor_requests(
    scenario: Scenario, receiver: Receiver
) -> None:
    scenario.configure([receiver.url(TOKEN)])

    def quiet_run() -> str:
        quiet = subprocess.run(
            [sys.executable, "-c", QUIET_PROBE, "--once", "--config", str(scenario.config)],
            capture_output=True,
            text=True,
            env=cli_env(),
            check=False,
            timeout=30,
        )
        return quiet.stderr.strip().splitlines()[-1]

    # The first run checks the notify URLs once (that loads apprise); the next says what that
    # check found without loading it.
    assert quiet_run().startswith("0 ")
    assert quiet_run() == "0 False False"
    assert not scenario.state_path.exists()  # and writes no journal record either
    scenario.hold()
    loud = subprocess.run(
        [
            sys.executable,
            "-c",
            QUIET_PROBE,
            "--once",
            "--config",
            str(scenario.config),
            "--now",
            scenario.at(120),
        ],
        capture_output=True,
        text=True,
        env=cli_env(),
        check=False,
        timeout=30,
    )
    assert loud.stderr.strip().splitlines()[-1].startswith("2 True")  # the probe can tell


def test_an_unusable_notify_url_is_said_on_runs_with_nothing_to_send(
    scenario: Scenario, receiver: Receiver
) -> None:
    """A URL apprise cannot use is reported on every run, not only once an alert is due: the
    first quiet run checks the URLs, the later ones say what it found without loading apprise,
    and a changed config is checked anew."""
    scenario.configure(["nosuch://example", receiver.url(TOKEN)])
    for _run in range(2):
        done = scenario.once(1, "--json")
        assert done.returncode == 3, done.stderr
        document = json.loads(done.stdout)
        [notify] = [f for f in document["locks"] if f["name"] == "lockwarden:notify"]
        assert (
            "notify service unusable, never sent to: notify.urls[1]: nosuch://…" in notify["reason"]
        )
        assert [line.split(": ")[:2] for line in document["alerts"]["unusable_services"]] == [
            ["notify.urls[1]", "nosuch://…"]
        ]
        said = "lockwarden: notify service unusable, never sent to: notify.urls[1]: nosuch://…"
        assert said in done.stderr, done.stderr
    scenario.configure([receiver.url(TOKEN)])
    fixed = scenario.once(2, "--json")
    assert fixed.returncode == 0, fixed.stderr
    assert [f["name"] for f in json.loads(fixed.stdout)["locks"]] == ["wa-store"]
    assert receiver.payloads == []


def check_marker(scenario: Scenario) -> Path:
    """Where a run remembers its last check of the notify services (the runtime directory)."""
    name = str(scenario.state_path).replace("%", "%25").replace("/", "%2F")
    return Path(os.environ["RUNTIME_DIRECTORY"]) / name / "notify-checked"


def test_the_last_check_of_the_notify_services_is_trusted_only_while_it_is_fresh(
    scenario: Scenario, receiver: Receiver
) -> None:
    """A run with nothing to send says what the remembered check found (a fake problem planted
    in it is said), but not a check from the future (a clock stepped back) or older than an
    hour: those are made again."""
    scenario.configure([receiver.url(TOKEN)])
    assert scenario.once(0).returncode == 0
    marker = check_marker(scenario)
    fingerprint = marker.read_text().splitlines()[0]
    marker.write_text(f"{fingerprint}\ninvalid\tnotify.urls[9]: planted://…: remembered\n")
    remembered = scenario.once(1)
    assert remembered.returncode == 3
    assert "notify.urls[9]: planted://…: remembered" in remembered.stderr
    for shift in (2 * 3600, -2 * 3600):  # from the future; too old
        marker.write_text(f"{fingerprint}\ninvalid\tnotify.urls[9]: planted://…: remembered\n")
        moment = time.time() + shift
        os.utime(marker, (moment, moment))
        checked = scenario.once(2)
        assert checked.returncode == 0, checked.stderr
        assert "planted" not in marker.read_text()


def test_a_url_file_that_changes_is_checked_again(
    scenario: Scenario, receiver: Receiver, tmp_path: Path
) -> None:
    """The URL file's content is part of what the remembered check is for: a bad URL written
    into it is said on the next run, not an hour later."""
    urls = tmp_path / "urls"
    urls.write_text(f"{receiver.url(TOKEN)}\n")
    urls.chmod(0o600)
    scenario.configure([], extra=f'urls_file = "{urls}"\n')
    assert scenario.once(0).returncode == 0
    urls.write_text(f"{receiver.url(TOKEN)}\nnosuch://example\n")
    changed = scenario.once(1)
    assert changed.returncode == 3
    assert f"notify.urls_file ({urls} line 2): nosuch://…" in changed.stderr


def test_compaction_keeps_the_journal_bounded_without_duplicate_alerts(
    scenario: Scenario, receiver: Receiver
) -> None:
    scenario.configure([receiver.url(TOKEN)])
    text = scenario.config.read_text().replace("[notify]", "max_bytes = 3000\n\n[notify]")
    scenario.config.write_text(text)
    scenario.hold()
    sizes = []
    for minutes in range(120, 200, 10):
        scenario.once(minutes)
        sizes.append(scenario.state_path.stat().st_size)
    assert sizes[4] == sizes[5]  # past the bound, each run's record replaces the oldest one
    records = [json.loads(line) for line in scenario.journal_text().splitlines()]
    assert sum(1 for record in records if record["type"] == "run") == 5
    assert [title_kind(t) for t in titles(receiver)] == ["writes blocked", "reminder"]
    assert sorted(p.name for p in scenario.state_dir.iterdir()) == ["run.lock", "state.jsonl"]


def test_compaction_leaves_room_so_quiet_runs_do_not_compact_again(
    scenario: Scenario, receiver: Receiver
) -> None:
    """60 closed incidents (real ones, alerted and resolved by this build, copied with fresh
    ids) weigh more than max_bytes: the first quiet run compacts, keeping only the newest
    closed incidents that fit in half of it, so the next quiet run finds nothing to do and
    leaves the file alone (same inode, same bytes)."""
    scenario.configure([receiver.url(TOKEN)])
    scenario.hold()
    assert scenario.once(120).returncode == 2
    scenario.release()
    assert scenario.once(121).returncode == 0
    assert [title_kind(t) for t in titles(receiver)] == ["writes blocked", "resolved"]
    lifecycle = [json.loads(line) for line in scenario.journal_text().splitlines()]
    copies = []
    for number in range(60):
        for record in lifecycle:
            copy = dict(record)
            for key in ("incident", "message"):
                if isinstance(copy.get(key), str):
                    copy[key] = f"{copy[key]}-{number}"
            copies.append(json.dumps(copy, sort_keys=True) + "\n")
    scenario.state_path.write_text("".join(copies))
    max_bytes = scenario.state_path.stat().st_size // 4
    text = scenario.config.read_text().replace("[notify]", f"max_bytes = {max_bytes}\n\n[notify]")
    scenario.config.write_text(text)
    before = scenario.state_path.stat().st_ino
    assert scenario.once(122).returncode == 0
    compacted = scenario.state_path.stat()
    assert compacted.st_ino != before  # compaction renamed a new file into place
    kept = [json.loads(line) for line in scenario.journal_text().splitlines()]
    incidents = {record["incident"] for record in kept if record["type"] == "open"}
    assert 0 < len(incidents) < 60
    opened = next(record for record in lifecycle if record["type"] == "open")
    assert f"{opened['incident']}-59" in incidents  # the newest are the ones kept
    assert compacted.st_size <= max_bytes // 2 + 1024  # closed incidents: half, plus runs
    assert scenario.once(123).returncode == 0
    after = scenario.state_path.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
        compacted.st_ino,
        compacted.st_size,
        compacted.st_mtime_ns,
    )
    assert len(receiver.payloads) == 2  # nothing was sent again


def test_apprise_config_file_with_tags(
    scenario: Scenario, receiver: Receiver, smtp: Smtp, tmp_path: Path
) -> None:
    apprise_config = tmp_path / "apprise.txt"
    apprise_config.write_text(f"chat={receiver.url(TOKEN)}\nmail={smtp.url()}\n")
    scenario.configure([], extra=f'config = "{apprise_config}"\n')
    done = run_cli("notify-test", "--config", str(scenario.config), "--tag", "mail")
    assert done.returncode == 0, done.stderr
    assert len(smtp.sink.messages) == 1 and receiver.payloads == []
    assert TOKEN not in done.stdout


def test_without_notify_alerting_is_off_and_no_state_is_written(scenario: Scenario) -> None:
    scenario.config.write_text(
        f'[state]\npath = "{scenario.state_path}"\n\n'
        f'[[lock]]\nname = "wa-store"\npath = "{scenario.lock}"\ncritical_after = "1h"\n'
    )
    scenario.hold()
    done = scenario.once(120)
    assert done.returncode == 2
    assert "alerting is off: 1 alert(s) not sent" in done.stdout
    assert list(scenario.state_dir.iterdir()) == []


def test_alert_due_while_notify_is_broken_is_sent_once_it_works(
    scenario: Scenario, receiver: Receiver
) -> None:
    scenario.configure([], extra='urls_env = "LOCKWARDEN_TEST_URLS"\n')
    scenario.hold()
    broken = scenario.once(120)
    assert broken.returncode == 2
    assert "$LOCKWARDEN_TEST_URLS is not set" in broken.stdout
    fixed = scenario.once(125, LOCKWARDEN_TEST_URLS=receiver.url(TOKEN))
    assert fixed.returncode == 2
    scenario.once(130, LOCKWARDEN_TEST_URLS=receiver.url(TOKEN))
    assert titles(receiver) == [titles(receiver)[0]]
    assert title_kind(titles(receiver)[0]) == "writes blocked"


def test_eight_concurrent_runs_on_a_fresh_state_dir_send_one_alert(
    scenario: Scenario, receiver: Receiver, tmp_path: Path
) -> None:
    """The state directory does not exist yet: every run races to make it, one wins the run
    lock, the others exit 75 naming a PID (or are done before the next one starts)."""
    fresh = tmp_path / "fresh-state"
    scenario.configure([receiver.url(TOKEN)], state_path=str(fresh / "state.jsonl"))
    scenario.hold()
    runs = [scenario.start_once(120) for _ in range(8)]
    codes = []
    for run in runs:
        _, stderr = run.communicate(timeout=30)
        codes.append(run.returncode)
        if run.returncode == EXIT_BUSY:
            assert "another lockwarden run is in progress (PID " in stderr
    assert set(codes) <= {2, EXIT_BUSY} and 2 in codes
    assert len(receiver.payloads) == 1
    assert os.stat(fresh).st_mode & 0o777 == 0o700


def test_a_mail_servers_own_rate_limit_is_part_of_the_budget_not_a_failure(
    tmp_path: Path, children: Children, smtp: Smtp
) -> None:
    """apprise waits 5.5 s between two mails to one server (its request_rate_per_sec): two
    locks paged, then resolved, in one run each, with a 2 s [notify] timeout. A healthy mail
    server gets every message in that run; nothing is reported undelivered."""
    locks = [tmp_path / f"store{n}" / "LOCK" for n in (1, 2)]
    for lock in locks:
        lock.parent.mkdir()
    holders = [children.python(TIDY_HOLDER, str(lock), f"job-{n}") for n, lock in enumerate(locks)]
    tables = "".join(
        f'[[lock]]\nname = "store{n}"\npath = "{lock}"\nwarn_after = "1m"\ncritical_after = "2m"\n'
        for n, lock in enumerate(locks, 1)
    )
    config = tmp_path / "lockwarden.toml"
    config.write_text(
        f'[state]\npath = "{tmp_path / "state.jsonl"}"\n'
        f'[notify]\nurls = ["{smtp.url()}"]\ntimeout = "2s"\n{tables}'
    )
    later = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    paged = run_cli("--once", "--config", str(config), "--now", later, timeout=60)
    assert paged.returncode == 2, paged.stderr  # critical, and no "alerts may not reach"
    assert "lockwarden:notify" not in paged.stdout and "timed out" not in paged.stderr
    assert len(smtp.sink.messages) == 2
    for holder in holders:
        holder.send_signal(signal.SIGTERM)
        holder.wait(timeout=10)
    resolved = run_cli("--once", "--config", str(config), "--now", later, timeout=60)
    assert resolved.returncode == 0, resolved.stdout + resolved.stderr
    assert len(smtp.sink.messages) == 4
    assert [title_kind(subject) for subject in smtp.subjects()[2:]] == ["resolved", "resolved"]


def test_a_url_in_both_the_config_and_the_credential_is_sent_to_once(
    scenario: Scenario, receiver: Receiver, tmp_path: Path
) -> None:
    """The unit's credential (LoadCredential=lockwarden-notify-urls) and [notify] urls both
    name the webhook: one message, not two."""
    credentials = tmp_path / "credentials"
    credentials.mkdir(mode=0o700)
    (credentials / "lockwarden-notify-urls").write_text(receiver.url(TOKEN) + "\n")
    scenario.configure([receiver.url(TOKEN)])
    scenario.hold()
    once = scenario.once(120, "-v", CREDENTIALS_DIRECTORY=str(credentials))
    assert once.returncode == 2, once.stderr
    assert "is configured twice (notify.urls[1], notify.urls_file" in once.stderr, once.stderr
    assert "NOT delivered" not in once.stdout + once.stderr, once.stdout  # no phantom twin
    assert len(receiver.payloads) == 1, titles(receiver)
    again = scenario.once(121, CREDENTIALS_DIRECTORY=str(credentials))
    assert "NOT delivered" not in again.stdout + again.stderr, again.stdout
    assert len(receiver.payloads) == 1, titles(receiver)  # no retry of a copy that "timed out"
    tested = run_cli(
        "notify-test", "--config", str(scenario.config), CREDENTIALS_DIRECTORY=str(credentials)
    )
    assert tested.returncode == 0, tested.stderr
    assert len(receiver.payloads) == 2  # the test message, once too


def test_two_webhooks_on_one_host_and_port_never_print_alike(
    scenario: Scenario, receiver: Receiver
) -> None:
    """Their paths (often tokens) are hidden, so json://h:p/a and json://h:p/b both read
    json://h:p/…: each is told apart by the start of its id, and neither path is shown."""
    base = receiver.url().removesuffix("/hook")
    scenario.configure([f"{base}/alerts-ops", f"{base}/alerts-db"])
    tested = run_cli("notify-test", "--config", str(scenario.config))
    assert tested.returncode == 0, tested.stderr
    shown = re.findall(r"json://127\.0\.0\.1:\d+/… #[0-9a-f]{6}", tested.stdout + tested.stderr)
    assert len(set(shown)) == 2, tested.stdout + tested.stderr
    assert "alerts-ops" not in tested.stdout + tested.stderr
