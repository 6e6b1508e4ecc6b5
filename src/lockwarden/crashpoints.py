"""TEST-ONLY crash points: `LOCKWARDEN_CRASH_AT=STEP[:N]` kills this process with SIGKILL the
Nth time (default: the first) a run reaches STEP. Nothing else reads it, and when it is unset a
crash point costs one environment lookup.

It exists so tests/reliability/test_crash_points.py can prove "never lose an alert" with a
real `kill -9` at every step of a run. Never set it in production: the run dies on purpose.

Steps, in run order: after-snapshot, after-decide, mid-send (a service has answered, another
may still be in flight), after-send (delivered, not yet journaled), mid-append (half a record
written), mid-compaction (the new file half written, or complete but not yet renamed).
"""

from __future__ import annotations

import os
import signal

VARIABLE = "LOCKWARDEN_CRASH_AT"
STEPS = (
    "after-snapshot",
    "after-decide",
    "mid-send",
    "after-send",
    "mid-append",
    "mid-compaction",
)


def armed(step: str) -> bool:
    """True when this visit to STEP is the one to crash at. The countdown lives in the
    environment (this process's own copy), so the module keeps no state."""
    wanted = os.environ.get(VARIABLE)
    if not wanted:
        return False
    name, _, count = wanted.partition(":")
    if name != step:
        return False
    remaining = int(count) if count.isdigit() else 1
    if remaining > 1:
        os.environ[VARIABLE] = f"{name}:{remaining - 1}"
        return False
    return True


def crash_point(step: str) -> None:
    """Die here, as `kill -9` would, when the test asked for this step."""
    if armed(step):
        crash_point_now()


def crash_point_now() -> None:
    """Die now (the caller already checked `armed`)."""
    os.kill(os.getpid(), signal.SIGKILL)
