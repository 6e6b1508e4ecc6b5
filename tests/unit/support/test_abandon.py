"""support/abandon.py with real threads: work past its deadline is given up on and left
running under the lockwarden- prefix (which left_running sees, so the command knows to leave
without finalisation); work within it returns its result; its exception reaches the caller."""

from __future__ import annotations

import threading

import pytest

from conftest import wait_until
from lockwarden.support.abandon import THREAD_PREFIX, left_running, within


def test_work_within_its_deadline_returns_its_result() -> None:
    assert within(lambda: 41 + 1, "sum", 5.0) == (True, 42)


def test_work_that_returns_none_is_still_done() -> None:
    assert within(lambda: None, "nothing", 5.0) == (True, None)


def test_an_exception_of_the_work_is_raised_in_the_waiting_thread() -> None:
    def fail() -> int:
        raise LookupError("no such service")

    with pytest.raises(LookupError, match="no such service"):
        within(fail, "fail", 5.0)


def test_work_past_its_deadline_is_left_running_and_seen_until_it_ends() -> None:
    release = threading.Event()
    assert not left_running()
    done, result = within(lambda: release.wait(30), "stuck-send", 0.05)
    try:
        assert (done, result) == (False, None)
        [thread] = [t for t in threading.enumerate() if t.name == f"{THREAD_PREFIX}stuck-send"]
        assert thread.daemon and thread.is_alive()
        assert left_running()
    finally:
        release.set()
    assert wait_until(lambda: not left_running())


def test_a_daemon_thread_of_someone_else_is_not_lockwardens() -> None:
    release = threading.Event()
    other = threading.Thread(target=release.wait, args=(30,), name="apprise-worker", daemon=True)
    other.start()
    try:
        assert not left_running()
    finally:
        release.set()
        other.join(5)
