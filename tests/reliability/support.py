"""Helpers of the reliability suite: per-case deadlines and the figures it prints."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

import pytest

T = TypeVar("T")

CASE_DEADLINE_S = 0.1


def require_root(why: str) -> None:
    """Some cases need root (a file owned by another user); say so, never pass in silence."""
    if os.geteuid() == 0:
        return
    message = f"needs root: {why}"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


class CaseHung(Exception):
    """A case ran past its deadline: the alarm interrupted it (a blocking read, a loop)."""


@dataclass
class Figure:
    cases: int = 0
    failures: int = 0
    worst_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    def count(self, seconds: float, failed: bool = False) -> None:
        self.cases += 1
        self.failures += int(failed)
        self.worst_s = max(self.worst_s, seconds)


@dataclass
class Figures:
    by_row: dict[str, Figure] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)

    def row(self, name: str) -> Figure:
        return self.by_row.setdefault(name, Figure())

    def append(self, line: str) -> None:
        """A whole figure line, as the fault rows (figures_faults.py) write them."""
        self.lines.append(line)


FIGURES = pytest.StashKey[Figures]()


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Interrupt the block with CaseHung after `seconds` of wall time.

    SIGALRM interrupts a blocking system call (an open of a FIFO, a read of /dev/zero); Python
    then runs the handler, which raises. The timer is always cleared on the way out.
    """

    def expire(signum: int, frame: object) -> None:
        raise CaseHung(f"still running after {seconds * 1000:.0f} ms")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextmanager
def paused_deadline() -> Iterator[None]:
    """Stop the case's clock for a block whose cost is the host's, not the case's."""
    remaining, _interval = signal.setitimer(signal.ITIMER_REAL, 0)
    try:
        yield
    finally:
        if remaining > 0:
            signal.setitimer(signal.ITIMER_REAL, remaining)


def within_deadline(action: Callable[[], T], seconds: float = CASE_DEADLINE_S) -> tuple[T, float]:
    """Run `action` under the deadline and return its result and its time.

    A case that overruns once is run again: a hang hangs again, while a scheduler hiccup on a
    loaded 2-core machine does not. The second overrun raises CaseHung and fails the case.
    """
    for attempt in (1, 2):
        started = time.perf_counter()
        try:
            with deadline(seconds):
                result = action()
        except CaseHung:
            if attempt == 2:
                raise
            continue
        return result, time.perf_counter() - started
    raise AssertionError("unreachable")
