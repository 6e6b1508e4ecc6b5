"""A store directory given to `auto` whose `STORE/LOCK` is absent is `free` only when nothing
else in it looks like a lock: a program whose layout lockwarden does not know may hold its own
lock there, and reading that as free would tell a blocked writer to retry."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from conftest import Children, require_tool, run_json, wait_until


def flock_held(path: Path) -> bool:
    probe = subprocess.run(["flock", "-n", str(path), "true"], check=False)
    return probe.returncode != 0


@pytest.mark.parametrize("where", ["app.lock", "locks/app.lock", "run/db.lck"])
def test_a_live_lock_of_an_unknown_layout_in_a_store_is_unknown_not_free(
    tmp_path: Path, children: Children, where: str
) -> None:
    store = tmp_path / "store"
    (store / "data").mkdir(parents=True)
    (store / "data" / "journal.bin").write_bytes(b"\0" * 64)
    lock = store / where
    lock.parent.mkdir(parents=True, exist_ok=True)
    children.start([require_tool("flock"), str(lock), "sleep", "120"])
    assert wait_until(lambda: lock.exists() and flock_held(lock))

    code, document = run_json("inspect", str(store))

    [finding] = document["locks"]
    assert (code, finding["state"]) == (3, "unknown"), finding["reason"]
    assert where.split("/")[0] in finding["reason"]
    assert f"nothing is at {store / 'LOCK'}" in finding["reason"]


def test_a_store_with_nothing_that_looks_like_a_lock_is_free(tmp_path: Path) -> None:
    store = tmp_path / "store"
    (store / "data").mkdir(parents=True)
    (store / "data" / "journal.bin").write_bytes(b"\0" * 64)
    code, document = run_json("inspect", str(store))
    [finding] = document["locks"]
    assert (code, finding["state"]) == (0, "free"), finding["reason"]
