#!/usr/bin/env bash
# Run a representative part of the suite against Debian 12's versions of lockwarden's
# dependencies (what the .deb gets from python3-psutil, python3-requests, python3-tomli-w and
# apprise), pinned in .venv-debian12, on Debian's own /usr/bin/python3 when there is one.
# Called by scripts/test.sh; extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian 12 (bookworm): python3-psutil 5.9.4, python3-requests 2.28.1, python3-tomli-w 1.0.0,
# apprise 1.2.0, python3-prometheus-client 0.16.0 and python3-jsonschema 4.10.3 (test
# dependencies only).
pins=(psutil==5.9.4 requests==2.28.1 tomli-w==1.0.0 apprise==1.2.0)
test_pins=(pytest prometheus-client==0.16.0 jsonschema==4.10.3)

python=${DEBIAN12_PYTHON:-/usr/bin/python3}
[ -x "$python" ] || python=python3
venv=${DEBIAN12_VENV:-.venv-debian12}
stamp="$venv/.pins"
wanted="$("$python" -VV | head -1) ${pins[*]} ${test_pins[*]}"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]; then
    rm -rf "$venv"
    "$python" -m venv "$venv"
    if ! "$venv/bin/python" -m pip install -q --disable-pip-version-check \
        "${pins[@]}" "${test_pins[@]}" >"$venv/pip.log" 2>&1; then
        cat "$venv/pip.log" >&2
        exit 1
    fi
    echo "$wanted" > "$stamp"
fi

# The suite's files that exercise the dependencies (psutil in the host snapshot, tomli-w in
# check-config, init and the example config, the CLI end to end). Files from other branches
# are included when present.
candidates=(
    tests/test_cli.py tests/test_config.py tests/test_holders.py
    tests/test_logs.py tests/test_prometheus.py tests/test_sample_config.py tests/test_cron.py
    tests/test_notify.py tests/test_journal.py
)
selected=()
for file in "${candidates[@]}"; do
    [ -f "$file" ] && selected+=("$file")
done

"$venv/bin/python" - <<'PY'
import apprise, psutil, requests, tomli_w  # noqa: F401 - fail early on a broken pin
from importlib.metadata import version
print("debian12 pins:", ", ".join(f"{n} {version(n)}" for n in ("psutil", "requests", "tomli-w", "apprise")))
PY
PYTHONPATH=src exec "$venv/bin/python" -m pytest -q -p no:cacheprovider "${selected[@]}" "$@"
