#!/usr/bin/env bash
# Install everything the tests need on a fresh Debian machine, then run every check:
# ruff, mypy (strict on src/), and the whole pytest suite. Run as root (it uses apt-get).
# Debian packages of the real programs the tests drive are listed in tests/debian-packages.txt.
set -euo pipefail
cd "$(dirname "$0")/.."

export DEBIAN_FRONTEND=noninteractive
packages=$(grep -v '^\s*#' tests/debian-packages.txt | xargs)
missing=$(for p in $packages; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || echo "$p"; done)
if [ -n "$missing" ]; then
    apt-get update -qq
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

python=${PYTHON:-python3}
venv=${VENV:-.venv}
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --upgrade pip >/dev/null
"$venv/bin/python" -m pip install -q -e '.[test]'

export PATH="$PWD/$venv/bin:$PATH"
ruff check .
ruff format --check .
mypy
if [ $# -gt 0 ]; then
    pytest -q "$@"  # what the caller asked for, in one run
else
    bash scripts/test-parts.sh  # the whole suite, in parts side by side
fi
# The same code on Debian 12's and 13's versions of its dependencies (what the .deb runs with).
bash scripts/test-debian.sh all
