"""cli/demo.py in-process: the store's writer takes the real mkdir lock, writes and lets go,
or gives up at its wait while a real child holds the lock; the whole demo names its holder by
PID and role, sees the write through once the holder is gone, and leaves nothing behind.
(The command's exit code and wording are test_cli.py's.)"""

from __future__ import annotations

import re
import time
from pathlib import Path

from conftest import MKDIR_HOLDER, Children
from lockwarden.cli.demo import HOLD_SECONDS, WRITE_WAIT_MS, run_demo, try_write


def test_a_write_to_a_free_store_takes_the_lock_writes_and_lets_go(tmp_path: Path) -> None:
    waited = try_write(str(tmp_path), WRITE_WAIT_MS)
    assert waited is not None and 0 <= waited < WRITE_WAIT_MS
    assert not (tmp_path / "LOCK").exists()
    [line] = (tmp_path / "data.log").read_text().splitlines()
    assert line.endswith(" write")


def test_a_write_to_a_held_store_gives_up_at_its_wait_and_writes_nothing(
    tmp_path: Path, children: Children
) -> None:
    children.python(MKDIR_HOLDER, str(tmp_path / "LOCK"), "maintenance-job", "2026-03-01T10:00:00Z")
    started = time.monotonic()
    assert try_write(str(tmp_path), 200) is None
    assert 0.2 <= time.monotonic() - started < 5
    assert not (tmp_path / "data.log").exists()
    assert (tmp_path / "LOCK" / "owner.json").exists()  # the holder's lock is untouched


def test_the_demo_names_its_holder_sees_the_write_through_and_cleans_up() -> None:
    said: list[str] = []
    assert run_demo(said.append) == 0
    holder = re.fullmatch(
        rf"2\. PID (\d+) \(maintenance-job\) took the store lock and holds it {HOLD_SECONDS:g} s",
        said[2],
    )
    assert holder is not None, said
    pid = holder.group(1)
    [blocked] = [line for line in said if "BLOCKED" in line]
    assert f"by PID {pid} (maintenance-job), running" in blocked
    assert said[-2].startswith("5. retried write: lock acquired after ")
    base = said[-1].removeprefix("cleaned up ")
    assert said[1] == f"1. store at {base}/store"
    assert not Path(base).exists()
