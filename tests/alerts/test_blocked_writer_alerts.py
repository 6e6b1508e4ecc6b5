"""A writer blocked on a lock nobody configured alerts like any lock (a real JSON receiver on
127.0.0.1), is in the Prometheus textfile, and says "resolved" once it is no longer blocked:
real holder and waiter processes, the real `--once`, `--now` stepping the runs."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from conftest import FLOCK_HOLDER, expected_code, write_config
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

    def own() -> list[dict[str, Any]]:
        """What the receiver got about this test's lock (a writer blocked elsewhere on the
        host is alerted too, and is not this test's to judge)."""
        return [p for p in receiver.payloads if f"blocked:{lock}" in p["title"]]

    for minute in (0, 3, 6):
        code, document = once(config, start + timedelta(minutes=minute))
    assert code == expected_code(1, document, tmp_path), document
    assert own(), document
    [alert] = own()
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
    code, late = once(config, start + timedelta(minutes=30))
    assert code == expected_code(0, late, tmp_path), late  # within its budget again
    assert [title_kind(p["title"]) for p in own()] == ["writes blocked"]

    holder.kill()
    holder.wait(timeout=10)
    assert wait_until(lambda: not blocked_in_lock_call(waiter.pid), timeout=10)
    code, after = once(config, start + timedelta(minutes=31))
    assert code == expected_code(0, after, tmp_path), after
    assert [title_kind(p["title"]) for p in own()] == ["writes blocked", "resolved"]
    resolved = own()[-1]
    assert f"blocked:{lock}" in resolved["title"]
    assert "no process waits on it past the budget any more" in resolved["message"]
    assert f"blocked:{lock}" not in textfile.read_text()


def once(config: str, at: datetime) -> tuple[int, dict[str, Any]]:
    completed = run_cli("--once", "--json", "--config", config, "--now", at.isoformat())
    assert completed.stdout, completed.stderr
    return completed.returncode, json.loads(completed.stdout)
