"""Work a run may stop waiting for: a thread that waits on a server (an apprise send, a
database check) past its deadline is given up on and left to end by itself.

Such a thread is a daemon named with THREAD_PREFIX. While one still runs when the command is
done, `lockwarden` leaves without its exit handlers either (cli/commands.py: leave): one could
wait on a lock that thread holds.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

THREAD_PREFIX = "lockwarden-"

Result = TypeVar("Result")


def within(work: Callable[[], Result], name: str, deadline_s: float) -> tuple[bool, Result | None]:
    """Run `work` in its own daemon thread and wait for it at most `deadline_s`: (True, its
    result), or (False, None) when the deadline passed first (the thread is left running). An
    exception it raises is raised here."""
    results: list[Result] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(work())
        except BaseException as error:  # raised again in the waiting thread
            errors.append(error)

    thread = threading.Thread(target=run, name=f"{THREAD_PREFIX}{name}", daemon=True)
    thread.start()
    thread.join(deadline_s)
    if errors:
        raise errors[0]
    if results:
        return True, results[0]
    return False, None


def left_running() -> bool:
    """True while a thread the run gave up waiting for is still running."""
    return any(
        thread.daemon and thread.is_alive() and thread.name.startswith(THREAD_PREFIX)
        for thread in threading.enumerate()
    )
