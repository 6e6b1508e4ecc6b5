#!/usr/bin/env bash
# Run the suite's dependency-facing part against the versions of lockwarden's dependencies that
# Debian packages (what the .deb gets from python3-psutil, python3-requests, python3-tomli-w and
# apprise), pinned in one virtualenv per release, on Debian's own /usr/bin/python3 when there
# is one. Usage: scripts/test-debian.sh [12|13|all] [pytest arguments]. Called by
# scripts/test.sh with `all`.
#
# The pins are Debian's versions, read from each release's Packages index (apt-cache policy
# with the suite in a private apt configuration), not guessed:
#   12 (bookworm): python3-psutil 5.9.4, python3-requests 2.28.1, python3-tomli-w 1.0.0,
#                  apprise 1.2.0, python3-prometheus-client 0.16.0, python3-jsonschema 4.10.3 (tests only)
#   13 (trixie):   python3-psutil 7.0.0, python3-requests 2.32.3, python3-tomli-w 1.0.0,
#                  apprise 1.9.3, python3-prometheus-client 0.21.1, python3-jsonschema 4.19.2 (tests only)
# Debian 13's own Python is 3.13; the pins run on this machine's Python (3.11 on Debian 12).
set -euo pipefail
cd "$(dirname "$0")/.."

release=${1:-all}
shift || true

# The suite's files that exercise the dependencies: psutil in the host snapshot, tomli-w in
# check-config, init and the example config, the CLI end to end, apprise in every test that
# sends (the alert suite, removal notices, outages, restarts, secrets). A listed file that does
# not exist fails the run: a renamed test must not drop out in silence.
candidates=(
    tests/unit/cli/test_cli.py tests/unit/config/test_config.py tests/integration/test_holders.py
    tests/integration/test_dead_taker.py
    tests/unit/support/test_logs.py tests/unit/output/test_prometheus.py tests/unit/cli/test_sample_config.py tests/integration/test_cron.py
    tests/unit/alerts/test_apprise_loader.py tests/unit/remove/test_removal.py
    tests/alerts
    tests/reliability/test_notifier_outage.py tests/reliability/test_restart_semantics.py
    tests/reliability/test_secrets.py tests/reliability/test_overlapping_runs.py
    tests/reliability/test_filesystem_faults.py tests/security/test_alert_injection.py
    tests/security/test_hostile_names.py
)
for file in "${candidates[@]}"; do
    [ -e "$file" ] || { echo "test-debian: listed test $file does not exist" >&2; exit 1; }
done

run_release() {
    local name=$1
    shift
    local -a pins test_pins
    case "$name" in
        12)
            pins=(psutil==5.9.4 requests==2.28.1 tomli-w==1.0.0 apprise==1.2.0)
            test_pins=(pytest prometheus-client==0.16.0 jsonschema==4.10.3 aiosmtpd)
            ;;
        13)
            pins=(psutil==7.0.0 requests==2.32.3 tomli-w==1.0.0 apprise==1.9.3)
            test_pins=(pytest prometheus-client==0.21.1 jsonschema==4.19.2 aiosmtpd)
            ;;
        *)
            echo "test-debian: unknown Debian release $name (12 or 13)" >&2
            return 64
            ;;
    esac
    local python=${DEBIAN_PYTHON:-/usr/bin/python3}
    [ -x "$python" ] || python=python3
    # Kept with the other test caches (the system tests' root file systems), outside the
    # checkout, so a clean clone reuses it; rebuilt whenever the pins or the Python change.
    local venv=${LOCKWARDEN_TEST_CACHE:-/var/cache/lockwarden-tests}/venv-debian$name
    local wanted
    wanted="$("$python" -VV | head -1) ${pins[*]} ${test_pins[*]}"
    # Built in a clean environment (tests/buildenv.py): none of the caller's variables reach it.
    if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/.pins" 2>/dev/null)" != "$wanted" ]; then
        rm -rf "$venv"
        mkdir -p "$(dirname "$venv")"
        "$python" tests/buildenv.py "$python" -m venv "$venv"
        if ! "$python" tests/buildenv.py "$venv/bin/python" -m pip install -q \
            --disable-pip-version-check "${pins[@]}" "${test_pins[@]}" >"$venv/pip.log" 2>&1; then
            cat "$venv/pip.log" >&2
            return 1
        fi
        echo "$wanted" > "$venv/.pins"
    fi
    DEBIAN_RELEASE=$name "$venv/bin/python" - <<'PY'
import os
import apprise, psutil, requests, tomli_w  # noqa: F401 - fail early on a broken pin
from importlib.metadata import version
names = ("psutil", "requests", "tomli-w", "apprise")
print(f"debian {os.environ['DEBIAN_RELEASE']} pins:", ", ".join(f"{n} {version(n)}" for n in names))
PY
    # In a PID namespace of its own (scripts/in-pid-namespace.sh): the two releases run side
    # by side, and without it a writer one release's test left waiting is a blocked writer in
    # the other's findings.
    PYTHONPATH=src scripts/in-pid-namespace.sh \
        "$venv/bin/python" -m pytest -q -p no:cacheprovider "${candidates[@]}" "$@"
}

case "$release" in
    all)
        # The two releases run side by side: each mostly waits on the processes its tests
        # start, so together they take little longer than one. Their outputs are printed one
        # after the other; either failing fails the run.
        logs=$(mktemp -d)
        run_release 12 "$@" >"$logs/12" 2>&1 &
        twelve=$!
        run_release 13 "$@" >"$logs/13" 2>&1 &
        thirteen=$!
        status=0
        wait "$twelve" || status=1
        wait "$thirteen" || status=1
        cat "$logs/12" "$logs/13"
        rm -rf "$logs"
        exit "$status"
        ;;
    *) run_release "$release" "$@" ;;
esac
