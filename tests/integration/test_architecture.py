"""The package shows its data flow: each stage is a package that imports only the stages below
it, and no module imports another that (directly or not) imports it back. Read from the source
with `ast` (every import counts, those inside functions and under TYPE_CHECKING too)."""

from __future__ import annotations

import ast
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[2] / "src" / "lockwarden"

# Bottom to top. A package may import its own modules and any package of a lower layer.
LAYERS: list[set[str]] = [
    {"support"},
    {"model"},
    {"formats", "procfs", "state"},
    {"config"},
    {"check"},
    {"databases"},
    {"pipeline"},
    {"output"},
    {"alerts"},
    {"remove", "holding"},
    {"run"},
    {"cli"},
    {"__main__"},
]
# `lockwarden/__init__.py` holds the version (imported by anyone) and loads the hold API on
# first use (`lockwarden.hold()`): the root package stands outside the layers.
ROOT = "lockwarden"


def module_name(path: Path) -> str:
    parts = path.relative_to(SOURCE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports() -> dict[str, set[str]]:
    modules = {module_name(path): path for path in SOURCE.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([node.module] if node.module else [])])
                targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            graph[name].update(t for t in targets if t in modules and t != name)
    return graph


def stage(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ROOT


def layer_of(package: str) -> int:
    [found] = [number for number, layer in enumerate(LAYERS) if package in layer]
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_the_graph_is_read_from_the_real_source() -> None:
    graph = imports()
    assert "lockwarden.cli.commands" in graph and "lockwarden.pipeline" in graph
    assert "lockwarden.pipeline" in graph["lockwarden.run"]  # an edge the code has


def test_no_module_imports_itself_back() -> None:
    assert cycles(imports()) == []


def test_every_package_is_in_a_layer() -> None:
    packages = {stage(module) for module in imports()} - {ROOT}
    assert packages == set().union(*LAYERS)


def test_each_stage_imports_only_the_stages_below_it() -> None:
    upward = sorted(
        f"{module} imports {target}"
        for module, targets in imports().items()
        for target in targets
        if ROOT not in (stage(module), stage(target))
        and stage(module) != stage(target)
        and layer_of(stage(target)) >= layer_of(stage(module))
    )
    assert upward == []


def test_a_cycle_is_found_when_there_is_one() -> None:
    """The checker itself can fail: a made-up graph with a loop through three modules."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
