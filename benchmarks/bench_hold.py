"""What holding a lock costs, as ratios against floors measured in the same run.

    PYTHONPATH=src python benchmarks/bench_hold.py [ROUNDS]

* the command line: `lockwarden hold LOCK --role bench -- true` against a bare
  `python -c pass` (the interpreter's start-up, which any Python tool pays);
* the Python API: one `with lockwarden.hold(...)` (identity from /proc, record written and
  renamed, lock moved aside and deleted) against a bare `mkdir` + `rmdir` of the same lock.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src")
sys.path.insert(0, SRC)

import lockwarden  # noqa: E402


def median_seconds(action: Callable[[], None], rounds: int) -> float:
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        action()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def run(*argv: str) -> None:
    env = {**os.environ, "PYTHONPATH": SRC}
    subprocess.run(argv, check=True, env=env, stdout=subprocess.DEVNULL)


def main(rounds: int) -> None:
    with tempfile.TemporaryDirectory() as directory:
        lock = os.path.join(directory, "LOCK")

        floor_cli = median_seconds(lambda: run(sys.executable, "-c", "pass"), rounds)
        cli = median_seconds(
            lambda: run(
                sys.executable, "-m", "lockwarden", "hold", lock, "--role", "b", "--", "true"
            ),
            rounds,
        )

        def bare() -> None:
            os.mkdir(lock)
            os.rmdir(lock)

        def api() -> None:
            with lockwarden.hold(lock, role="bench"):
                pass

        floor_api = median_seconds(bare, rounds * 20)
        held = median_seconds(api, rounds * 20)

    print(
        f"cli   hold -- true      {cli * 1000:8.1f} ms  = {cli / floor_cli:5.1f} x python -c pass "
        f"({floor_cli * 1000:.1f} ms)"
    )
    print(
        f"api   with hold(): pass {held * 1000:8.3f} ms  = {held / floor_api:5.1f} x mkdir+rmdir "
        f"({floor_api * 1000:.3f} ms)"
    )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 15)
