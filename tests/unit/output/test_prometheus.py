"""The Prometheus textfile: parses with prometheus-client's own text parser, labels escaped,
written atomically so a reader polling it never sees half a file; the shipped alert rules pass
promtool (Debian's `prometheus` package)."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import (
    FLOCK_HOLDER,
    MKDIR_HOLDER,
    Children,
    require_tool,
    run_cli,
    wait_until,
    write_config,
)
from factories import make_finding
from lockwarden import __version__
from lockwarden.model import Bound, Finding, Held, Holder, Severity, State
from lockwarden.output.prometheus import HOLDER_LABELS, METRICS, RunFacts, render_metrics
from lockwarden.support.atomic import write_atomically

ROOT = Path(__file__).resolve().parents[3]
RULES = ROOT / "packaging" / "prometheus" / "lockwarden.rules.yml"
RULE_TESTS = ROOT / "packaging" / "prometheus" / "lockwarden.rules.test.yml"
HOLD_STARTED = "lockwarden_lock_hold_started_timestamp_seconds"
NASTY = 'role "quoted" \\ back\nslash }'
# Owner records refuse control characters in a role, so a real holder's role has no newline.
QUOTED = 'role "quoted" \\ back }'


def samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Every sample by metric name, parsed by the reference parser (it raises on bad input)."""
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        assert family.type == "gauge", family.name
        for sample in family.samples:
            found.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return found


def finding(name: str, state: State, severity: Severity, **extra: object) -> Finding:
    return make_finding(
        name=name, path=f"/srv/{name}/LOCK", state=state, severity=severity, reason="test", **extra
    )


def one_hot(parsed: dict[str, list[tuple[dict[str, str], float]]], lock: str) -> dict[str, float]:
    return {
        labels["state"]: value
        for labels, value in parsed["lockwarden_lock_state"]
        if labels["lock"] == lock
    }


def by_lock(parsed: dict[str, list[tuple[dict[str, str], float]]], name: str) -> dict[str, float]:
    return {labels["lock"]: value for labels, value in parsed[name]}


def test_metrics_parse_and_carry_every_label_escaped() -> None:
    holder = Holder(pid=42, alive=True, role=NASTY, unit="wa-resync.service", user="wa")
    checked_at = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
    findings = (
        finding("free-one", State.FREE, Severity.OK),
        finding(
            "held-one",
            State.HELD_TOO_LONG,
            Severity.CRITICAL,
            holder=holder,
            sharers=(Holder(pid=43, alive=True),),  # `flock FILE cmd`: flock and its command
            held=Held.of(7260.5, Bound.UNKNOWN, checked_at),
            action="kill 42 43",
        ),
        finding("unknown-one", State.UNKNOWN, Severity.UNKNOWN),
    )
    text = render_metrics(findings, RunFacts(checked_at, duration_s=0.25, undelivered=2))
    parsed = samples(text)
    assert one_hot(parsed, "held-one") == {
        "free": 0,
        "held": 0,
        "held_too_long": 1,
        "stale": 0,
        "unknown": 0,
    }
    assert one_hot(parsed, "free-one")["free"] == 1 and one_hot(parsed, "unknown-one")["unknown"]
    assert {labels["path"] for labels, _ in parsed["lockwarden_lock_state"]} == {
        "/srv/free-one/LOCK",
        "/srv/held-one/LOCK",
        "/srv/unknown-one/LOCK",
    }
    severities = {
        labels["lock"]: labels["severity"]
        for labels, value in parsed["lockwarden_lock_severity"]
        if value == 1
    }  # one-hot: a numeric enum ranks unknown above critical under `max`
    assert severities == {"free-one": "ok", "held-one": "critical", "unknown-one": "unknown"}
    assert len(parsed["lockwarden_lock_severity"]) == 3 * 4
    assert "lockwarden_lock_holder_pid" not in parsed  # a PID is no sample value
    info = {labels["lock"]: labels for labels, _ in parsed["lockwarden_lock_holder_info"]}
    assert info["held-one"] == {
        "lock": "held-one",
        "path": "/srv/held-one/LOCK",
        "holder_pid": "42",
        "holder_pids": "42 43",
        "holder_role": NASTY,
        "holder_unit": "wa-resync.service",
        "holder_user": "wa",
        "action": "kill 42 43",
    }  # no store configured: no empty store label
    assert set(info) == {"held-one"}  # nothing to say of a free or unknown one's holder
    assert all(all(labels.values()) for labels in info.values())
    held = by_lock(parsed, "lockwarden_lock_held_seconds")
    assert held["held-one"] == 7260.5 and held["free-one"] == 0
    assert "unknown-one" not in held  # not known: no sample (a NaN poisons sum and max)
    started = by_lock(parsed, HOLD_STARTED)
    assert started == {"held-one": checked_at.timestamp() - 7260.5}  # free, unknown: absent
    bounds = {
        (labels["lock"], labels["bound"]): value
        for labels, value in parsed["lockwarden_lock_held_bound"]
    }
    assert bounds[("held-one", "unknown")] == 1 and bounds[("held-one", "exact")] == 0
    assert bounds[("unknown-one", "unknown")] == 1 and ("free-one", "unknown") not in bounds
    assert parsed["lockwarden_build_info"] == [({"version": __version__}, 1)]
    nan = [sample for family in parsed.values() for _labels, sample in family if sample != sample]
    assert nan == []
    assert parsed["lockwarden_last_run_timestamp_seconds"] == [({}, checked_at.timestamp())]
    assert parsed["lockwarden_run_duration_seconds"] == [({}, 0.25)]
    assert parsed["lockwarden_alerts_undelivered"] == [({}, 2)]
    # No sample carries a timestamp (the scrape time is the truth).
    stamped = [
        sample
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.timestamp is not None
    ]
    assert stamped == []


def test_every_metric_in_the_textfile_is_in_the_one_table() -> None:
    findings = (finding("a", State.HELD, Severity.OK, holder=Holder(pid=7, alive=True)),)
    now = datetime.now(UTC)
    text = render_metrics(findings, RunFacts(now, 0.1, last_delivered_at=now))
    written = {family.name for family in text_string_to_metric_families(text)}
    assert written == {metric.name for metric in METRICS}


def prometheus_config(tmp_path: Path, lock: Path, textfile: Path) -> str:
    return write_config(
        tmp_path / "config.toml",
        f"""
        [prometheus]
        textfile = "{textfile}"

        [[lock]]
        name = "store"
        path = "{lock}"
        format = "owner-record"
        """,
    )


def test_a_run_writes_the_textfile_for_a_real_held_lock(tmp_path: Path, children: Children) -> None:
    lock = tmp_path / "LOCK"
    # Whole seconds, and at least 1 s after the holder starts (a record older than its
    # process would prove a reused PID).
    taken = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=2)
    holder = children.python(MKDIR_HOLDER, str(lock), QUOTED, taken.isoformat())
    textfile = tmp_path / "lockwarden.prom"
    config = prometheus_config(tmp_path, lock, textfile)
    later = (taken + timedelta(minutes=5)).isoformat()
    completed = run_cli("--once", "--config", config, "--now", later)
    assert completed.returncode == 0, completed.stdout
    parsed = samples(textfile.read_text())
    assert one_hot(parsed, "store")["held"] == 1
    assert ({"lock": "store", "path": str(lock), "severity": "ok"}, 1) in parsed[
        "lockwarden_lock_severity"
    ]
    [(labels, _)] = parsed["lockwarden_lock_holder_info"]
    assert labels["holder_role"] == QUOTED and labels["holder_pid"] == str(holder.pid)
    assert parsed["lockwarden_alerts_undelivered"] == [({}, 0)]
    # Held since the record's time or the holder's start, whichever is later: about 300 s.
    assert 290 <= parsed["lockwarden_lock_held_seconds"][0][1] <= 300
    assert parsed["lockwarden_lock_waiters"][0][1] == 0
    assert parsed["lockwarden_run_duration_seconds"][0][1] > 0
    assert holder.poll() is None
    assert (textfile.stat().st_mode & 0o777) == 0o644  # node-exporter runs as another user
    assert sorted(os.listdir(tmp_path)) == ["LOCK", "config.toml", "lockwarden.prom"]


def test_a_waiter_is_counted(tmp_path: Path, children: Children) -> None:
    lock = tmp_path / "flocked"
    children.python(FLOCK_HOLDER, str(lock))
    flock = require_tool("flock")
    waiter = children.start([flock, "-x", str(lock), "true"])
    textfile = tmp_path / "lockwarden.prom"
    config = write_config(
        tmp_path / "c.toml",
        f'[prometheus]\ntextfile = "{textfile}"\n[[lock]]\nname = "k"\npath = "{lock}"\n'
        'format = "kernel"\n',
    )

    def counted() -> float:
        run_cli("--once", "--config", config)
        return samples(textfile.read_text())["lockwarden_lock_waiters"][0][1]

    assert wait_until(lambda: counted() == 1, timeout=10, interval=0.1)
    assert waiter.poll() is None


def test_an_unwritable_textfile_is_an_unknown_finding_and_the_report_stands(
    tmp_path: Path,
) -> None:
    """A textfile never written has no series for the rules' "agent silent" alert to see go
    stale, so the run says it (exit 3; a critical lock would still exit 2)."""
    missing = tmp_path / "no-such-dir" / "lockwarden.prom"
    config = prometheus_config(tmp_path, tmp_path / "LOCK", missing)
    completed = run_cli("--once", "--config", config, "--json")
    assert completed.returncode == 3
    assert "could not write the Prometheus textfile" in completed.stderr
    document = json.loads(completed.stdout)
    assert document["status"] == "unknown"
    findings = {finding["name"]: finding for finding in document["locks"]}
    assert findings["lockwarden:prometheus"]["path"] == str(missing)
    assert findings["lockwarden:prometheus"]["state"] == "unknown"
    assert [f["state"] for n, f in findings.items() if n != "lockwarden:prometheus"] == ["free"]
    checked = run_cli("check-config", "--config", config)  # which check-config says first
    assert checked.returncode == 78
    assert f"prometheus.textfile: its directory {missing.parent} does not exist" in checked.stderr


def complete(text: str) -> bool:
    return text.endswith("\n") and "lockwarden_run_duration_seconds " in text


def test_a_polling_reader_never_sees_a_half_written_file(tmp_path: Path) -> None:
    """Large files (hundreds of KB, many write() calls each) rewritten back to back by the real
    atomic writer, then by real CLI runs, while a reader polls; every read must be whole."""
    textfile = tmp_path / "lockwarden.prom"
    bodies = [f"# filler {n} {'x' * 60}\n" * 4000 for n in range(2)]
    write_atomically(str(textfile), bodies[0] + "lockwarden_run_duration_seconds 1\n", 0o644)
    stop = threading.Event()
    reads: list[int] = []
    torn: list[str] = []

    def poll() -> None:
        while not stop.is_set():
            text = textfile.read_text()
            reads.append(len(text))
            if not complete(text):
                torn.append(text[-80:])

    reader = threading.Thread(target=poll)
    reader.start()
    try:
        for round_number in range(80):
            body = bodies[round_number % 2]
            write_atomically(str(textfile), body + "lockwarden_run_duration_seconds 1\n", 0o644)
        config = prometheus_config(tmp_path, tmp_path / "LOCK", textfile)
        for _ in range(3):
            assert run_cli("--once", "--config", config).returncode == 0
    finally:
        stop.set()
        reader.join(timeout=10)
    assert torn == []
    assert len(reads) > 20, "the reader must actually have raced the writers"
    samples(textfile.read_text())
    assert [name for name in os.listdir(tmp_path) if name.endswith(".tmp")] == []


def test_alert_rules_pass_promtool_check() -> None:
    promtool = require_tool("promtool")
    checked = subprocess.run(
        [promtool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 7 rules found" in checked.stdout


def test_alert_rules_fire_on_the_right_series() -> None:
    """promtool's rule unit tests: held too long (naming the holder, a new holder a new alert),
    stale, unknown, agent silent and undelivered alerts fire, and only then."""
    promtool = require_tool("promtool")
    tested = subprocess.run(
        [promtool, "test", "rules", str(RULE_TESTS)], capture_output=True, text=True, timeout=60
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


@pytest.mark.parametrize(
    ("bound", "held_s"),
    [(Bound.EXACT, 7200.0), (Bound.AT_LEAST, 600.0), (Bound.AT_MOST, 30.0)],
)
def test_the_hold_start_carries_the_findings_bound(bound: Bound, held_s: float) -> None:
    """The start is the one the finding's judge put in its Held (a dated record, the sighting
    memory, a running time), with that duration's bound."""
    checked_at = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
    held = finding("one", State.HELD, Severity.OK, held=Held.of(held_s, bound, checked_at))
    parsed = samples(render_metrics((held,), RunFacts(checked_at, 0.1)))
    [(labels, value)] = parsed[HOLD_STARTED]
    assert value == checked_at.timestamp() - held_s
    assert "bound" not in labels  # a label that changes during one hold is a new series
    [known] = [lab["bound"] for lab, one in parsed["lockwarden_lock_held_bound"] if one == 1]
    assert known == bound.value


def test_flock_file_command_names_both_holders_and_an_action_that_stops_both(
    tmp_path: Path, children: Children
) -> None:
    """`flock FILE cmd`: flock(1) and its command both hold the lock; killing flock alone leaves
    the command holding it. The textfile carries both PIDs and the action, as the report does."""
    lock = tmp_path / "job.lock"
    flock = children.start([require_tool("flock"), str(lock), "sleep", "120"])
    assert wait_until(lambda: psutil.Process(flock.pid).children())
    [command] = [child.pid for child in psutil.Process(flock.pid).children()]
    children.track(command)
    textfile = tmp_path / "lockwarden.prom"
    config = write_config(
        tmp_path / "config.toml",
        f'[prometheus]\ntextfile = "{textfile}"\n'
        f'[state]\npath = "{tmp_path / "state.jsonl"}"\n'
        f'[[lock]]\nname = "job"\npath = "{lock}"\nformat = "kernel"\n'
        'warn_after = "1m"\ncritical_after = "2m"\n',
    )
    # Two runs a minute apart, two hours on: held at least a minute, past warn_after.
    first, second = (datetime.now(UTC) + timedelta(hours=2, minutes=m) for m in (0, 1))
    assert run_cli("--once", "--config", config, "--now", first.isoformat()).returncode == 0
    report = run_cli("--once", "--json", "--config", config, "--now", second.isoformat())
    [finding] = json.loads(report.stdout)["locks"]
    assert finding["state"] == "held_too_long", finding["reason"]
    assert {holder["pid"] for holder in finding["holders"]} == {flock.pid, command}
    [(labels, _)] = samples(textfile.read_text())["lockwarden_lock_holder_info"]
    assert sorted(map(int, labels["holder_pids"].split())) == sorted([flock.pid, command])
    assert labels["action"] == finding["action"]["line"]
    assert finding["action"]["argv"][0] == "kill"
    assert sorted(map(int, finding["action"]["argv"][1:])) == sorted([flock.pid, command])


def lock_series_shapes(text: str) -> set[tuple[str, frozenset[str]]]:
    """(metric, label names) of every per-lock sample a textfile has."""
    return {
        (name, frozenset(labels))
        for name, found in samples(text).items()
        for labels, _ in found
        if "lock" in labels
    }


def shipped_test_shapes() -> set[tuple[str, frozenset[str]]]:
    import yaml

    shapes = set()
    for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for entry in case["input_series"]:
            [(labels, _)] = [
                (dict(s.labels), s.value)
                for f in text_string_to_metric_families(f"{entry['series']} 1\n")
                for s in f.samples
            ]
            if "lock" in labels:
                name = entry["series"].split("{", 1)[0]
                shapes.add((name, frozenset(labels) - {"instance", "job", "host"}))
    return shapes


def real_run_textfile(tmp_path: Path, children: Children) -> tuple[str, dict[str, object]]:
    """One real run over four real locks, five minutes after they were taken: one held past
    its critical budget, one past its warning budget, one within it, and one whose holder was
    killed (stale); the textfile and the JSON report."""
    taken = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=2)
    budgets = {"critical": ("1m", "2m"), "warning": ("1m", "1h"), "within": ("1h", "2h")}
    holders = {
        name: children.python(MKDIR_HOLDER, str(tmp_path / name), f"job-{name}", taken.isoformat())
        for name in (*budgets, "stale")
    }
    holders["stale"].kill()
    holders["stale"].wait(timeout=10)
    textfile = tmp_path / "lockwarden.prom"
    locks = "".join(
        f'[[lock]]\nname = "{name}"\npath = "{tmp_path / name}"\nformat = "owner-record"\n'
        + (f'warn_after = "{budgets[name][0]}"\ncritical_after = "{budgets[name][1]}"\n'
           if name in budgets else "")
        for name in holders
    )  # fmt: skip
    config = write_config(
        tmp_path / "config.toml", f'[prometheus]\ntextfile = "{textfile}"\n{locks}'
    )
    later = (taken + timedelta(minutes=5)).isoformat()
    report = run_cli("--once", "--json", "--config", config, "--now", later)
    assert report.returncode == 2, report.stdout + report.stderr
    document = json.loads(report.stdout)
    document["pids"] = {name: process.pid for name, process in holders.items()}
    return textfile.read_text(), document


def test_the_shipped_rule_tests_feed_only_series_the_exporter_writes(
    tmp_path: Path, children: Children
) -> None:
    """Every per-lock series of packaging/prometheus/lockwarden.rules.test.yml has a name and
    label set a real run's textfile has (a stale lock's info series included)."""
    text, _ = real_run_textfile(tmp_path, children)
    written = lock_series_shapes(text)
    info = "lockwarden_lock_holder_info"
    shipped = shipped_test_shapes()
    assert {shape for shape in shipped if shape[0] != info} - written == set()
    # The info series has the labels that have a value: any of the exporter's, no other.
    allowed = {"lock", "path", *HOLDER_LABELS}
    assert [labels - allowed for name, labels in shipped if name == info if labels - allowed] == []
    assert [labels - allowed for name, labels in written if name == info if labels - allowed] == []
    names = {name for name, _ in written}
    assert names >= {"lockwarden_lock_state", "lockwarden_lock_severity", info}


def test_the_rules_fire_on_the_series_a_real_run_wrote(tmp_path: Path, children: Children) -> None:
    """The textfile of a real run, fed to promtool as it is (plus the labels a scrape adds):
    the alerts that fire, with their labels, are the ones the test's own holders call for
    (ALERTS, the series Prometheus keeps of its alerts)."""
    import yaml

    promtool = require_tool("promtool")
    text, report = real_run_textfile(tmp_path, children)
    pids = report["pids"]
    assert isinstance(pids, dict)
    scraped = {"instance": "host1:9100", "job": "node"}
    series = [
        {
            "series": "{}{{{}}}".format(
                name, ",".join(f'{k}="{escape(v)}"' for k, v in {**labels, **scraped}.items())
            ),
            "values": f"{value:g}x10",
        }
        for name, found in samples(text).items()
        for labels, value in found
    ]
    locks = {lock["name"]: lock for lock in report["locks"]}  # type: ignore[attr-defined]

    def expected(name: str, severity: str, alertname: str) -> str:
        lock = locks[name]
        labels = {
            "alertname": alertname,
            "alertstate": "firing",
            "severity": severity,
            **scraped,
            "lock": name,
            "path": str(tmp_path / name),
            "action": lock["action"]["line"],
        }
        if name == "stale":
            labels["gone_pids"] = str(pids["stale"])
            labels["proof"] = lock["proof"]
        else:
            [holder] = lock["holders"]
            assert holder["pid"] == pids[name]
            labels |= {
                "holder_pid": str(pids[name]),
                "holder_pids": str(pids[name]),
                "holder_role": f"job-{name}",
                **({"holder_user": holder["user"]} if holder.get("user") else {}),
                **({"holder_unit": holder["unit"]} if holder.get("unit") else {}),
            }
        body = ",".join(f'{k}="{escape(v)}"' for k, v in sorted(labels.items()))
        return f"ALERTS{{{body}}}"

    firing = [
        expected("critical", "warning", "LockwardenLockHeldTooLong"),
        expected("critical", "critical", "LockwardenLockHeldTooLong"),
        expected("warning", "warning", "LockwardenLockHeldTooLong"),
        expected("stale", "critical", "LockwardenLockStale"),
    ]
    tests = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "promql_expr_test": [
                    {
                        "expr": 'ALERTS{alertstate="firing"}',
                        "eval_time": "2m",
                        "exp_samples": [{"labels": labels, "value": 1} for labels in firing],
                    }
                ],
            }
        ],
    }
    path = tmp_path / "generated.test.yml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    tested = subprocess.run(
        [promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr


def escape(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def test_every_rule_links_a_section_of_the_runbook_the_package_installs() -> None:
    """runbook_url on every rule, each naming a heading of docs/runbook.md (installed under
    /usr/share/doc/lockwarden/docs/ by the .deb), and the direct path's the same."""
    import re

    import yaml

    from lockwarden.alerts.alertmanager import ALERT_NAMES, RUNBOOK

    headings = {
        line[3:].strip().lower()
        for line in (ROOT / "docs" / "runbook.md").read_text().splitlines()
        if line.startswith("## ")
    }
    rules = [
        rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]
    ]
    assert len(rules) >= 7
    for rule in rules:  # every rule, the two severities of one alert name each
        base, _, anchor = rule["annotations"]["runbook_url"].partition("#")
        assert base == RUNBOOK and anchor == rule["alert"].lower() and anchor in headings, rule
    assert {name.lower() for name in ALERT_NAMES.values()} <= headings
    assert re.fullmatch(r"file:///usr/share/doc/lockwarden/docs/runbook\.md", RUNBOOK)
