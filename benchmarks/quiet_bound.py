"""How much of the quiet run's budget (2.0x its floor) the work no design can skip already takes.

    python benchmarks/quiet_bound.py [--runs 30]

`benchmarks/run.py` holds the quiet `--once` over 10 locks to 2.0x the floor `python -c
"import psutil, tomllib, json, logging, dataclasses"`. This study splits that budget. It
measures, on run.py's stage (10 locks, 3 held) and with run.py's launcher (fresh processes,
wall time from fork to reap, alternated so drift hits all alike), medians of --runs runs of:

* **floor**: the floor above;
* **bare work**: the floor's imports and what any quiet run of these 10 locks must do, with
  no model at all: parse its command line (argparse), parse the config (tomllib), read
  /proc/locks once (no other kernel interface lists flock(2) locks), read each lock's file in
  a forked child it could abandon (a hung mount must never block the run), take the answers
  back through a pipe (pickle), name each holder with psutil and print a line a lock;
* **+ records**: the bare work, then as many frozen dataclasses, with the same field counts
  and flags, as a quiet run of this checkout creates (counted in a child that runs one);
* **quiet --once**, alerting off and on: the real runs, as run.py measures them.

It prints each as milliseconds and as a ratio to the floor, and what the 2.0x budget leaves
for the run's own logic once the bare work and the records are paid. It asserts nothing and
exits 0 (2 when a run fails): it explains run.py's quiet rows, it does not replace them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import (
    PYTHON,
    QUIET_FLOOR,
    QUIET_WALL_LIMIT,
    Bench,
    Command,
    Launcher,
    Processes,
    build_stage,
    child_env,
    lockwarden,
)

# Runs one quiet --once in-process, then lists every dataclass lockwarden's modules defined:
# [fields, frozen, eq, slots] each.
COUNT_RECORDS = """
import contextlib, dataclasses, io, json, sys
from lockwarden.cli.commands import main
with contextlib.redirect_stdout(io.StringIO()):
    main(["--once", "--config", sys.argv[1]])
specs = []
for name, module in sorted(sys.modules.items()):
    if not name.startswith("lockwarden"):
        continue
    for value in vars(module).values():
        if isinstance(value, type) and value.__module__ == name and dataclasses.is_dataclass(value):
            params = value.__dataclass_params__
            slots = "__slots__" in value.__dict__
            specs.append([len(dataclasses.fields(value)), params.frozen, params.eq, slots])
print(json.dumps(specs))
"""

# What any quiet run of the configured locks must do, with no model; argv: config, records.
BARE_WORK = """
import psutil, tomllib, json, logging, dataclasses
import argparse, os, pickle, sys

parser = argparse.ArgumentParser(prog="bare-work")
parser.add_argument("--once", action="store_true")
parser.add_argument("--config", required=True)
parser.add_argument("records", nargs="?", default="[]")
arguments = parser.parse_args()
for number, (fields, frozen, eq, slots) in enumerate(json.loads(arguments.records)):
    annotations = {f"f{i}": "int" for i in range(fields)}
    namespace = {"__annotations__": annotations, "__module__": "__main__"}
    dataclasses.dataclass(frozen=frozen, eq=eq, slots=slots)(type(f"R{number}", (), namespace))
with open(arguments.config, "rb") as handle:
    locks = tomllib.load(handle)["lock"]
with open("/proc/locks") as handle:
    kernel = [line.split() for line in handle]
read_end, write_end = os.pipe()
child = os.fork()
if child == 0:
    facts = []
    for lock in locks:
        try:
            status = os.stat(lock["path"])
            facts.append((status.st_ino, status.st_mtime))
        except OSError:
            facts.append(None)
    os.write(write_end, pickle.dumps(facts))
    os._exit(0)
os.close(write_end)
facts = pickle.loads(os.read(read_end, 1 << 20))
os.waitpid(child, 0)
holders = {}
for fields in kernel:
    holders.setdefault(int(fields[5].rsplit(":", 1)[1]), int(fields[4]))
for lock, fact in zip(locks, facts):
    pid = holders.get(fact[0]) if fact else None
    if pid is None:
        print(f"OK {lock['name']} free")
        continue
    try:
        process = psutil.Process(pid)
        print(f"OK {lock['name']} held by PID {pid} ({process.name()}, {process.cmdline()})")
    except psutil.Error as error:
        print(f"UNKNOWN {lock['name']} {error}")
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30, help="runs per median (at least 10)")
    arguments = parser.parse_args()
    if arguments.runs < 10:
        parser.error("--runs must be at least 10")
    processes = Processes()
    with tempfile.TemporaryDirectory(prefix="lockwarden-bound-") as directory:
        workdir = Path(directory)
        try:
            return study(workdir, processes, arguments.runs)
        except RuntimeError as error:
            print(f"# a run failed: {error}")
            return 2
        finally:
            processes.stop_all()


def study(workdir: Path, processes: Processes, runs: int) -> int:
    bench = Bench(workdir, child_env(workdir), runs, Launcher.start(processes))
    stage = build_stage(workdir, processes)
    state = workdir / "alerting-state"
    state.mkdir(mode=0o700)
    alerting = workdir / "alerting.toml"
    alerting.write_text(
        f'[state]\npath = "{state / "state.jsonl"}"\n\n'
        '[notify]\nurls = ["json://127.0.0.1:9"]\n\n' + stage.tables
    )
    alerting.chmod(0o600)
    for config in (stage.ten, alerting):  # the first alerting run checks the notify URLs
        bench.once(lockwarden(config))
    quiet = records_of(bench, stage.ten)  # then count what a steady quiet run creates
    loud = records_of(bench, alerting)
    bare = textwrap.dedent(BARE_WORK)
    commands = {
        "floor": Command((PYTHON, "-c", QUIET_FLOOR)),
        "bare work": Command((PYTHON, "-c", bare, "--once", "--config", str(stage.ten))),
        f"+ {len(quiet)} records (alerting off)": Command(
            (PYTHON, "-c", bare, "--once", "--config", str(stage.ten), json.dumps(quiet))
        ),
        f"+ {len(loud)} records (alerting on)": Command(
            (PYTHON, "-c", bare, "--once", "--config", str(stage.ten), json.dumps(loud))
        ),
        "quiet --once (alerting off)": lockwarden(stage.ten),
        "quiet --once (alerting on)": lockwarden(alerting),
    }
    for command in commands.values():
        bench.once(command)  # warm-up: compiles bytecode, fills caches
    walls: dict[str, list[float]] = {name: [] for name in commands}
    for number in range(1, runs + 1):
        for name, command in commands.items():
            walls[name].append(bench.once(command, number).wall_ms)
    medians = {name: statistics.median(samples) for name, samples in walls.items()}
    floor = medians["floor"]
    budget = QUIET_WALL_LIMIT * floor
    print(f"# medians of {runs} runs; the budget, {QUIET_WALL_LIMIT}x the floor: {budget:.1f} ms")
    print(f"{'':34s} {'wall':>9s} {'ratio':>7s}")
    for name, median in medians.items():
        print(f"{name:34s} {median:7.1f} ms {median / floor:6.2f}x")
    for label, count in (("alerting off", len(quiet)), ("alerting on", len(loud))):
        paid = medians[f"+ {count} records ({label})"]
        left = QUIET_WALL_LIMIT * floor - paid
        spent = medians[f"quiet --once ({label})"] - paid
        print(
            f"# {label}: the bare work and {count} records leave {left:.1f} ms of the budget "
            f"for the run's own code, which takes {spent:.1f} ms"
        )
    return 0


def records_of(bench: Bench, config: Path) -> list[list[object]]:
    """The dataclasses (fields, frozen, eq, slots) a quiet run with `config` creates."""
    completed = subprocess.run(
        [PYTHON, "-c", COUNT_RECORDS, str(config)],
        capture_output=True,
        text=True,
        env=bench.env,
        timeout=60,
        check=False,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"counting the records failed: {completed.stderr.strip()[-500:]}")
    specs: list[list[object]] = json.loads(completed.stdout)
    return specs


if __name__ == "__main__":
    raise SystemExit(main())
