#!/usr/bin/env bash
# Run a command in a PID namespace of its own, with its own /proc: it sees only the processes
# it starts, and /proc/locks lists only their locks (and OFD locks, whose PID is -1 anywhere). Used by the test runs that go side by
# side (scripts/test-parts.sh, scripts/test-debian.sh): a lockwarden under test then never
# sees a writer another run left waiting as a blocked writer of its own host. bash is the
# namespace's PID 1, so every process orphaned inside it is reaped (a zombie would read as a
# live process); everything still running in it is killed when the command ends.
# Usage: scripts/in-pid-namespace.sh COMMAND [ARGUMENT...]
set -euo pipefail
exec unshare --fork --pid --mount-proc --kill-child \
    bash -c '"$@"; status=$?; exit "$status"' in-pid-namespace "$@"
