#!/usr/bin/env bash
# Run a command in a PID namespace of its own, with its own /proc: it sees only the processes
# it starts, and /proc/locks lists only their locks (and OFD locks, whose PID is -1 anywhere).
# Used by the test runs that go side by side (scripts/test-parts.sh, scripts/test-debian.sh): a
# lockwarden under test then never sees a writer another run left waiting as a blocked writer
# of its own host. bash is the namespace's PID 1, so every process orphaned inside it is reaped
# (a zombie would read as a live process); everything still running in it is killed when the
# command ends.
# The namespace has its own mounts too (unshare --mount-proc), and as root it gets an empty
# /var/lib/lockwarden of its own: a test whose config names no [state] writes the default
# journal there, never the host's nor the one a run beside it is writing.
# Every process the tests' locks are held by runs inside it, so it says so to the lockwarden
# runs under test (LOCKWARDEN_PID_NAMESPACE=complete: a PID's absence here is proof, as on the
# host). The tests of a container that does not hold every holder unset it.
# Usage: scripts/in-pid-namespace.sh COMMAND [ARGUMENT...]
set -euo pipefail
export LOCKWARDEN_PID_NAMESPACE=complete
exec unshare --fork --pid --mount-proc --kill-child \
    bash -c 'set -e
        if [ "$(id -u)" = 0 ]; then
            mkdir -p /var/lib/lockwarden
            mount -t tmpfs -o mode=0700,size=64m lockwarden-state /var/lib/lockwarden
        fi
        set +e
        "$@"; status=$?; exit "$status"' in-pid-namespace "$@"
