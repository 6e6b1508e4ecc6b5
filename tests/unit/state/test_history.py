"""The fold of the state journal's records: a record it cannot read is named, never skipped in
silence, and the rest still counts; and a run says so, at warning priority, with the real
`--once` reading a journal that holds one (its `open` lost means a duplicate alert)."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import FLOCK_HOLDER, Children, run_cli, write_config
from lockwarden.state.history import fold
from lockwarden.state.records import from_json

AT = "2026-12-04T10:00:00Z"


def test_a_record_the_fold_cannot_read_is_named_and_the_rest_still_counts() -> None:
    stored = [
        {"type": "open", "at": AT, "incident": "a1", "lock": "wa-store", "key": "k",
         "class": "held_too_long"},
        {"type": "open", "at": AT, "incident": "b2", "class": "stale"},  # no lock, no key
        {"type": "run", "at": AT, "locks": ["not", "a", "table"]},
        {"type": "close", "at": AT, "incident": "a1", "why": "resolved"},
    ]  # fmt: skip
    records = [from_json(record) for record in stored]
    history = fold(records)
    assert list(history.incidents) == ["a1"] and not history.incidents["a1"].open
    assert history.malformed == [
        "record 2 ('open' at '2026-12-04T10:00:00Z') cannot be read: lock is missing",
        "record 3 ('run' at '2026-12-04T10:00:00Z') cannot be read: locks is not a table",
    ]
    assert fold(records[:1]).malformed == []


def test_a_run_says_which_record_it_could_not_read(tmp_path: Path, children: Children) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    journal = state / "state.jsonl"
    journal.write_text(json.dumps({"type": "open", "at": AT, "incident": "x9"}) + "\n")
    journal.chmod(0o600)
    lock = tmp_path / "store.lock"
    children.python(FLOCK_HOLDER, str(lock))
    config = write_config(
        tmp_path / "config.toml",
        f'[state]\npath = "{journal}"\n[notify]\nurls = ["json://127.0.0.1:9/hook"]\n'
        f'[[lock]]\nname = "store"\npath = "{lock}"\nformat = "kernel"\n',
    )
    completed = run_cli("--once", "--config", config)
    assert completed.returncode == 0, completed.stderr
    assert (
        f"warning: {journal}: record 1 ('open' at '{AT}') cannot be read: lock is missing; "
        "what it said was left out"
    ) in completed.stderr
