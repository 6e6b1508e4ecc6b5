"""Named steps of a `--once` run at which its caller may look in: a checkpoint is a callable
passed down the run, called with the step's name as the run reaches it.

Production runs pass `skip`, which does nothing. The reliability tests pass one that kills the
process with SIGKILL at a chosen step (tests/reliability/forkrun.py), to prove "never lose an
alert" with a real `kill -9` at every step (tests/reliability/test_crash_points.py).

Steps, in run order: after-snapshot, after-decide, mid-send (a service has answered, another
may still be in flight), after-send (delivered, not yet journaled), mid-append (half a record
written), mid-compaction (reached twice: the new file half written, then complete but not yet
renamed). A journal given a checkpoint writes a record, or a compacted file, in two halves with
the step between them, so that stopping there leaves what a crash mid-write leaves.
"""

from __future__ import annotations

from collections.abc import Callable

Checkpoint = Callable[[str], None]

STEPS = (
    "after-snapshot",
    "after-decide",
    "mid-send",
    "after-send",
    "mid-append",
    "mid-compaction",
)


def skip(step: str) -> None:
    """The checkpoint of an ordinary run: nothing happens at any step."""
