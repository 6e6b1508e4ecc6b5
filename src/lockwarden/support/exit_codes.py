"""Every exit code of the `lockwarden` command (and of `lockwarden.hold()`'s child), and the
help text that lists them: the one table (README's exit-code table is checked against it by
tests/integration/test_docs.py)."""

from __future__ import annotations

# `lockwarden hold`: a COMMAND that could not be started, as a shell says it.
EXIT_NOT_EXECUTABLE = 126
EXIT_NOT_FOUND = 127

EXIT_OK = 0
EXIT_WARNING = 1
EXIT_CRITICAL = 2
EXIT_UNKNOWN = 3
EXIT_USAGE = 64
EXIT_BUSY = 75
# sysexits EX_SOFTWARE: the run itself failed (a bug). Outside the units' SuccessExitStatus=
# (1 2 3 75 are alert states), so `systemctl --failed` shows it: an agent that crashes on
# every run (a file name it could not handle) must not look like a lock whose state is unknown.
EXIT_INTERNAL = 70
EXIT_CONFIG = 78
# `lockwarden hold` only; otherwise it exits with its COMMAND's code (128+N: killed by signal N).
EXIT_HOLD_OS_ERROR = 71  # sysexits EX_OSERR: the lock could not be created or removed
EXIT_HOLD_HELD = 73  # sysexits EX_CANTCREAT: another process holds the lock
EXIT_HOLD_STALE = 74  # the lock is stale (with proof) and --break-stale was not given

EXIT_NOTIFY_FAILED = 1  # notify-test: a service did not confirm the test message
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as a shell reports a pipeline whose reader went away


EXIT_CODES_HELP = """\
exit codes (the Nagios plugin convention, so --once also works as a Nagios/Icinga check):
  0   ok: every lock is free or held within its budget
  1   warning: a lock is held past warn_after
  2   critical: a lock is held past critical_after, or is stale
  3   unknown: lockwarden could not tell (the reason is printed), an internal error while
      judging one lock (the others are still reported), or an alert that could not be
      delivered (also on stderr, in the textfile and the heartbeat)
      (the worst lock decides; critical outranks unknown, so a blocked store is never hidden)
  64  usage error: bad command-line arguments
  70  internal error: the run itself failed (the error is printed; -v for the traceback);
      the shipped unit fails, so `systemctl --failed` shows it
  75  another lockwarden run holds the run lock (its holder is printed); nothing was done
  78  configuration error: every problem is printed, one per line, with file and key
      (check-config: also a notify URL apprise cannot parse, or an unusable state directory)
"""

INSPECT_EXIT_CODES_HELP = """\
exit codes (the Nagios plugin convention):
  0   ok: the lock is free or held within its budget
  1   warning: it is held past its warn budget
  2   critical: it is held past its critical budget, or is stale
  3   unknown: lockwarden could not tell (the reason is printed), or an internal error
  64  usage error: bad command-line arguments
  78  configuration error in --config: every problem is printed, one per line
"""

WHY_EXIT_CODES_HELP = """\
exit codes (the Nagios plugin convention):
  0   ok: nothing waits on a lock held past its warn budget (also when nothing waits)
  1   warning: a lock waited for is held past its warn budget
  2   critical: a lock waited for is held past its critical budget
  3   unknown: lockwarden could not tell (no such process, a lock it cannot judge, ...), or
      an internal error
  64  usage error: bad command-line arguments
  78  configuration error in --config: every problem is printed, one per line
"""

HOLD_EXIT_CODES_HELP = """\
exit codes:
  N    COMMAND's exit code; 128+N when signal N killed it (130 for Ctrl-C, 143 for SIGTERM)
  64   usage error
  71   the lock could not be created or removed (permission, missing directory, ...)
  73   the lock is held by another process (its PID, role and how to stop it are printed)
  74   the lock is stale (its holder is provably gone); rerun with --break-stale
  126  COMMAND is not executable; 127: COMMAND not found
"""

__all__ = [
    "EXIT_BROKEN_PIPE",
    "EXIT_BUSY",
    "EXIT_CODES_HELP",
    "EXIT_CONFIG",
    "EXIT_CRITICAL",
    "EXIT_HOLD_HELD",
    "EXIT_HOLD_OS_ERROR",
    "EXIT_HOLD_STALE",
    "EXIT_INTERNAL",
    "EXIT_NOTIFY_FAILED",
    "EXIT_NOT_EXECUTABLE",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_UNKNOWN",
    "EXIT_USAGE",
    "EXIT_WARNING",
    "HOLD_EXIT_CODES_HELP",
    "INSPECT_EXIT_CODES_HELP",
    "WHY_EXIT_CODES_HELP",
]
