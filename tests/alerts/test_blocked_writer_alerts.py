"""A writer blocked on a lock nobody configured alerts like any lock (a real JSON receiver on
127.0.0.1), is in the Prometheus textfile, and says "resolved" once it is no longer blocked:
real holder and waiter processes, the real `--once`, `--now` stepping the runs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from conftest import FLOCK_HOLDER, write_config
from integration.test_why import WAITER, blocked_in_lock_call

from .helpers import Children, Receiver, run_cli, title_kind, wait_until


def test_a_blocked_writer_pages_names_both_sides_and_resolves(
    tmp_path: Path, children: Children, receiver: Receiver
) -> None:
    lock = tmp_path / "ledger.lock"
    lock.touch()
    holder = children.python(FLOCK_HOLDER, str(lock))
    waiter = children.python(WAITER, str(lock), "flock")
    assert wait_until(lambda: blocked_in_lock_call(waiter.pid), timeout=10)
    textfile = tmp_path / "lockwarden.prom"
    config = write_config(
        tmp_path / "config.toml",
        f'[state]\npath = "{tmp_path / "state" / "state.jsonl"}"\n'
        f'[prometheus]\ntextfile = "{textfile}"\n'
        f'[notify]\nurls = ["{receiver.url()}"]\n'
        '[alerts]\nresolve_after = 1\nmin_severity = "warning"\n'
        '[host]\nblocked_after = "5m"\n',
    )
    start = datetime.now(UTC)
    for minute in (0, 3, 6):
        completed = run_cli(
            "--once",
            "--config",
            config,
            "--now",
            f"{start + timedelta(minutes=minute):%Y-%m-%dT%H:%M:%S+00:00}",
        )
    assert completed.returncode == 1, completed.stdout + completed.stderr
    assert receiver.payloads, completed.stdout + completed.stderr
    [alert] = receiver.payloads
    assert title_kind(alert["title"]) == "writes blocked", alert["title"]
    assert f"blocked:{lock}" in alert["title"] and f"PID {holder.pid}" in alert["title"]
    assert f"PID {waiter.pid}" in alert["message"] and f"kill {holder.pid}" in alert["message"]
    families = {f.name: f for f in text_string_to_metric_families(textfile.read_text())}
    states = {
        sample.labels["state"]
        for sample in families["lockwarden_lock_state"].samples
        if sample.labels["lock"] == f"blocked:{lock}" and sample.value == 1
    }
    assert states == {"held_too_long"}

    # A late run (a gap past the longest one a series survives) starts the count over: the
    # writer is still blocked, so the incident is not over, and no "resolved" is sent.
    late = run_cli("--once", "--config", config, "--now", stamp(start + timedelta(minutes=30)))
    assert late.returncode == 0, late.stdout + late.stderr  # within its budget again
    assert [title_kind(p["title"]) for p in receiver.payloads] == ["writes blocked"]

    holder.kill()
    holder.wait(timeout=10)
    assert wait_until(lambda: not blocked_in_lock_call(waiter.pid), timeout=10)
    completed = run_cli(
        "--once",
        "--config",
        config,
        "--now",
        stamp(start + timedelta(minutes=31)),
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert [title_kind(p["title"]) for p in receiver.payloads] == ["writes blocked", "resolved"]
    resolved = receiver.payloads[-1]
    assert f"blocked:{lock}" in resolved["title"]
    assert "no process waits on it past the budget any more" in resolved["message"]
    assert f"blocked:{lock}" not in textfile.read_text()


def stamp(moment: datetime) -> str:
    return f"{moment:%Y-%m-%dT%H:%M:%S+00:00}"
