"""What the quiet run's peak RSS is made of, module by module.

    python benchmarks/import_memory.py [--src TREE/src ...] [--top 25]

`benchmarks/run.py` holds the quiet `--once` (alerting on) to 1.3x the peak RSS of its floor
`python -c "import psutil, tomllib, json, logging, dataclasses"`. This study runs that same
`--once` on run.py's stage (10 locks, 3 held, a [notify] service and a state journal) under
tracemalloc, with an import hook that charges each module what executing its own body
allocated (its code objects, classes and functions; what the modules it imports allocate is
charged to them). The floor's modules are imported before the hook, so they are not counted.
For each `--src` (default: this checkout's), it prints:

* every module's own allocation (KB), the largest first, and the sum for lockwarden's;
* lockwarden's frozen dataclasses on that path, and what one class of each kind costs here
  (a frozen dataclass of six fields against a plain class with the same fields).

Given two trees it prints the modules whose cost changed most between them. Allocations are
Python's own (tracemalloc): shared libraries an import maps (the bz2 and lzma modules that
`shutil` loads) add RSS this does not see, so their RSS is measured on its own. It asserts
nothing and exits 0: it explains run.py's RSS rows, it does not replace them.
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import run as bench  # run.py's stage, holders and interpreter

HOOK = """
import atexit, importlib.abc, json, os, runpy, sys, tracemalloc
import psutil, tomllib, json, logging, dataclasses  # the floor: not counted
tracemalloc.start()
stack, cost = [], {}

class Charged(importlib.abc.Loader):
    def __init__(self, inner):
        self.inner = inner
    def create_module(self, spec):
        return self.inner.create_module(spec)
    def exec_module(self, module):
        stack.append(0)
        before = tracemalloc.get_traced_memory()[0]
        try:
            self.inner.exec_module(module)
        finally:
            total = tracemalloc.get_traced_memory()[0] - before
            inner = stack.pop()
            cost[module.__name__] = cost.get(module.__name__, 0) + total - inner
            if stack:
                stack[-1] += total
    def __getattr__(self, name):
        return getattr(self.inner, name)

class Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = Charged(spec.loader)
                return spec
        return None

def report():
    with open(os.environ["IMPORT_MEMORY_OUT"], "w") as out:
        json.dump({"cost": cost, "modules": sorted(sys.modules)}, out)

sys.meta_path.insert(0, Finder())
atexit.register(report)
sys.argv = ["lockwarden", *sys.argv[1:]]
runpy.run_module("lockwarden", run_name="__main__", alter_sys=True)
"""

DATACLASS_COST = """
import gc, sys, tracemalloc
from dataclasses import dataclass
def per_class(decorate):
    keep = []
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for number in range(50):
        fields = {f"field{index}": "str | None" for index in range(6)}
        namespace = {"__annotations__": fields, "__module__": __name__, "__doc__": "A record."}
        keep.append(decorate(type(f"Record{number}", (), namespace)))
    gc.collect()
    return (tracemalloc.get_traced_memory()[0] - before) / 50 / 1024
print(per_class(lambda cls: cls), per_class(dataclass(frozen=True)))
"""

RSS_OF = "import {modules}; print(open('/proc/self/status').read())"


def measure(stage: bench.Stage, workdir: Path, src: str) -> dict[str, object]:
    """The per-module costs of the second of two quiet --once runs with alerting on (the
    first fills caches: bytecode, the notify check)."""
    config = workdir / "alerting.toml"
    if not config.exists():
        state = workdir / "alerting-state"
        state.mkdir(mode=0o700)
        config.write_text(
            f'[state]\npath = "{state / "state.jsonl"}"\n\n'
            '[notify]\nurls = ["json://127.0.0.1:9"]\n\n' + stage.tables
        )
        config.chmod(0o600)
    env = bench.child_env(workdir)
    env["PYTHONPATH"] = src
    env["IMPORT_MEMORY_OUT"] = str(workdir / "costs.json")
    argv = [bench.PYTHON, "-c", textwrap.dedent(HOOK), "--once", "--config", str(config)]
    for _ in range(2):
        subprocess.run(argv, env=env, capture_output=True, check=False, timeout=120)
    result: dict[str, object] = json.loads((workdir / "costs.json").read_text())
    return result


def frozen_dataclasses(src: str, modules: list[str]) -> int:
    """How many classes decorated @dataclass(frozen=True...) the lockwarden modules hold."""
    count = 0
    for name in modules:
        if not name.startswith("lockwarden"):
            continue
        parts = name.split(".")
        base = Path(src, *parts)
        path = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
        if not path.exists():
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                decorators = [ast.unparse(each) for each in node.decorator_list]
                count += any(d.startswith("dataclass") and "frozen=True" in d for d in decorators)
    return count


def rss_kb(modules: str) -> int:
    status = subprocess.run(
        [bench.PYTHON, "-c", RSS_OF.format(modules=modules)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return int(next(line for line in status.splitlines() if line.startswith("VmRSS")).split()[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", action="append", help="a tree's src directory (repeatable)")
    parser.add_argument("--top", type=int, default=25, help="modules to list per tree")
    arguments = parser.parse_args()
    sources = arguments.src or [str(bench.SRC)]
    processes = bench.Processes()
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="lockwarden-memory-") as temporary:
        try:
            stage = bench.build_stage(Path(temporary), processes)
            for number, src in enumerate(sources):
                workdir = Path(temporary, f"tree-{number}")
                workdir.mkdir()
                measured = measure(stage, workdir, src)
                costs = {name: kb / 1024 for name, kb in dict(measured["cost"]).items()}
                results[src] = costs
                own = sum(kb for name, kb in costs.items() if name.startswith("lockwarden"))
                modules = list(measured["modules"])  # type: ignore[call-overload]
                print(f"# {src}: {len(modules)} modules, lockwarden's own {own:.0f} KB")
                for name, kb in sorted(costs.items(), key=lambda item: -item[1])[: arguments.top]:
                    print(f"{kb:8.1f} KB  {name}")
                print(f"frozen dataclasses on the path: {frozen_dataclasses(src, modules)}")
        finally:
            processes.stop_all()
    plain, frozen = subprocess.run(
        [bench.PYTHON, "-c", DATACLASS_COST], capture_output=True, text=True, check=True
    ).stdout.split()
    print(
        f"one class of six fields: plain {float(plain):.1f} KB, "
        f"frozen dataclass {float(frozen):.1f} KB"
    )
    floor = rss_kb("psutil, tomllib, json, logging, dataclasses, argparse")
    with_shutil = rss_kb("psutil, tomllib, json, logging, dataclasses, argparse, shutil")
    print(
        "RSS that importing shutil adds (argparse's help formatter imports it): "
        f"{with_shutil - floor} KB"
    )
    if len(sources) == 2:
        first, second = (results[src] for src in sources)
        names = set(first) | set(second)
        changed = sorted(names, key=lambda name: -abs(second.get(name, 0) - first.get(name, 0)))
        print(f"# changed most, {sources[0]} -> {sources[1]}")
        for name in changed[: arguments.top]:
            before, after = first.get(name, 0.0), second.get(name, 0.0)
            print(f"{after - before:+8.1f} KB  {name} ({before:.1f} -> {after:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
