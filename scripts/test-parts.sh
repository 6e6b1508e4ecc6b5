#!/usr/bin/env bash
# The whole pytest suite in three parts side by side; each part mostly waits on the programs,
# servers and containers its tests start, so together they take about as long as the slowest.
# Usage: scripts/test-parts.sh [pytest arguments for every part]. Called by scripts/test.sh.
#
# * host: the tests that start containers or share the suite's caches (systemd-nspawn
#   machines, podman, the .deb, the shipped units), and the ground-truth differential and the
#   dead taker's flock, whose truth includes what /proc/locks shows only in the host's PID
#   namespace (a dead taker's line; docs/design.md, "Where /proc/locks leaves locks out"),
#   as the shipped units see it, and the records naming kernel threads and the retaken locks,
#   which only the host's namespace shows. They need the host's view. (The Debian pin runs take
#   the dead taker's test again, in a namespace.) A test of a record naming a live or dead PID
#   does not belong here: the other parts' nested namespaces may have a process of that number,
#   which makes the record ambiguous (unknown) on purpose.
# * fleet: tests/alerts and tests/integration, in a PID namespace of their own.
# * rest: every other test file under tests/, in a PID namespace of its own; a new test file
#   lands here unless it is listed, so none is ever left out.
#
# The parts that run in a namespace see only their own processes and kernel locks (see
# scripts/in-pid-namespace.sh); the host part's tests judge only what they made. Their outputs
# are printed one after the other; any part failing fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."

host=(
    tests/system
    tests/integration/test_podman_containers.py
    tests/integration/test_debian_package.py
    tests/integration/test_systemd_units.py
    tests/hung/test_service_unit.py
    tests/integration/test_ground_truth.py
    tests/integration/test_dead_taker.py
    tests/integration/test_descriptor_names.py
    tests/integration/test_kernel_thread_records.py
    tests/integration/test_retaken_locks.py
    tests/integration/test_host_proc_in_namespace.py
)
fleet=(tests/alerts tests/integration)
for path in "${host[@]}" "${fleet[@]}"; do
    [ -e "$path" ] || { echo "test-parts: listed test $path does not exist" >&2; exit 1; }
done
not_host=()
for path in "${host[@]}"; do not_host+=("--ignore=$path"); done
not_fleet=()
for path in "${fleet[@]}"; do not_fleet+=("--ignore=$path"); done

python=python  # the virtualenv's, first on PATH in scripts/test.sh
pytest=("$python" -m pytest -q -p no:cacheprovider)
logs=$(mktemp -d)
host_pid='' fleet_pid='' rest_pid=''
# Interrupted (Ctrl-C, a CI timeout): end the parts too (killing unshare ends its namespace).
trap 'kill $host_pid $fleet_pid $rest_pid 2>/dev/null; rm -rf "$logs"; exit 130' INT TERM
"${pytest[@]}" "${host[@]}" "$@" >"$logs/host" 2>&1 &
host_pid=$!
scripts/in-pid-namespace.sh "${pytest[@]}" "${fleet[@]}" "${not_host[@]}" "$@" \
    >"$logs/fleet" 2>&1 &
fleet_pid=$!
scripts/in-pid-namespace.sh "${pytest[@]}" tests "${not_host[@]}" "${not_fleet[@]}" "$@" \
    >"$logs/rest" 2>&1 &
rest_pid=$!
status=0
wait "$host_pid" || status=1
wait "$fleet_pid" || status=1
wait "$rest_pid" || status=1
for part in host fleet rest; do
    echo "== pytest, part $part"
    cat "$logs/$part"
done
rm -rf "$logs"
exit "$status"
