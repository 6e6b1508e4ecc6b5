"""The README and docs/ say what the code does: every format, exit code and metric the code has
is in its table, and every link between the documents leads somewhere."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from conftest import run_cli
from lockwarden.config import ENGINE_WATCHES, DatabaseWatch
from lockwarden.databases.check import format_name
from lockwarden.formats import FORMATS, layout_formats
from lockwarden.output import prometheus, report
from lockwarden.support import exit_codes as cli

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
LINK = re.compile(r"\]\(([^)\s]+)\)")


def table_keys(path: Path, header: str) -> list[str]:
    """The first column of the table whose header row starts with `header`, backticks removed."""
    lines = path.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    keys = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        keys.append(line.split("|")[1].strip().strip("`"))
    return keys


def anchors(path: Path) -> set[str]:
    """GitHub's anchors for a document's headings: lower case, punctuation dropped, '-' for ' '."""
    found = set()
    in_code = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return found


def database_formats() -> set[str]:
    return {
        format_name(DatabaseWatch(engine=engine, connection="x", watch=watch, target="x"))
        for engine, watches in ENGINE_WATCHES.items()
        for watch in watches
    }


def test_the_readme_formats_table_lists_every_format_once() -> None:
    listed = table_keys(README, "| format | what it is |")
    assert len(listed) == len(set(listed)), listed
    assert set(listed) == set(FORMATS) | database_formats()


def test_the_readme_exit_code_table_lists_every_exit_code_of_the_agent() -> None:
    codes = {
        value
        for name, value in vars(cli).items()
        if name.startswith("EXIT_")
        and not name.startswith(("EXIT_HOLD_", "EXIT_NOT_"))  # `lockwarden hold`'s own
        and isinstance(value, int)
    }
    assert {int(code) for code in table_keys(README, "| exit code | meaning |")} == codes
    help_codes = {int(m) for m in re.findall(r"^  (\d+) ", cli.EXIT_CODES_HELP, re.M)}
    assert help_codes <= codes


def test_the_hold_exit_code_table_lists_every_exit_code_of_hold() -> None:
    codes = {value for name, value in vars(cli).items() if name.startswith("EXIT_HOLD_")}
    listed = table_keys(ROOT / "docs" / "hold.md", "| exit code | `lockwarden hold` |")
    numbers = {int(n) for key in listed for n in re.findall(r"\d+", key)}
    assert codes | {cli.EXIT_USAGE, cli.EXIT_NOT_EXECUTABLE, cli.EXIT_NOT_FOUND} <= numbers


def test_the_fleet_metrics_table_lists_every_metric() -> None:
    listed = table_keys(ROOT / "docs" / "fleet.md", "| metric | labels | value |")
    assert listed == [metric.name for metric in prometheus.METRICS]


def test_every_link_between_the_documents_leads_to_a_file_and_heading() -> None:
    broken = []
    for document in [README, *DOCS]:
        for target in LINK.findall(document.read_text(encoding="utf-8")):
            if target.startswith(("http://", "https://")):
                continue
            file_part, _, anchor = target.partition("#")
            linked = (document.parent / file_part).resolve() if file_part else document
            if not linked.exists():
                broken.append(f"{document.name}: {target}")
            elif anchor and anchor not in anchors(linked):
                broken.append(f"{document.name}: {target} (no such heading)")
    assert broken == []


def test_every_document_under_docs_is_linked_from_the_readme() -> None:
    text = README.read_text(encoding="utf-8")
    assert DOCS
    for document in DOCS:
        assert f"(docs/{document.name}" in text, document.name


def test_the_architecture_module_map_lists_every_module_and_no_other() -> None:
    """docs/architecture.md names every module of the package in its map (as `pkg/module.py`,
    or `module.py` at the top), and names none that is not there; and its layer table names
    every package the layering test knows."""
    from integration.test_architecture import LAYERS

    source = ROOT / "src" / "lockwarden"
    modules = {
        str(path.relative_to(source)) for path in source.rglob("*.py") if path.name != "__init__.py"
    }
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    mapped = text[text.index("## The module map") :]
    named = set(re.findall(r"`((?:[a-z_]+/)?[a-z_]+\.py)`", mapped))
    assert modules - named == set(), "modules missing from the map"
    assert named - modules == set(), "the map names modules that do not exist"
    layers = text[text.index("## Layers") : text.index("## One `--once`")]
    listed = {
        name.rstrip("/").removesuffix(".py")
        for name in re.findall(r"`([a-z_]+(?:/|\.py))`", layers)
    }
    assert listed == {package for layer in LAYERS for package in layer}


def test_the_runbook_explains_every_line_of_a_report() -> None:
    """A report's detail lines (`also`, `below`, `reader`, `never`, ...) were explained
    nowhere: a new user reading `also     PID 28344 sleep 3600` under a flock could not tell
    whether that process held the lock too (it does). Every label the text report can print
    is now a row of the runbook's table."""
    source = inspect.getsource(report.detail_lines) + inspect.getsource(report._holder_rows)
    labels = set(re.findall(r'\(\s*"([a-z]+)",', source))
    labels |= set(re.findall(r'f" {12}([a-z]+:) ', inspect.getsource(report.report_blocks)))
    assert {"path", "holder", "also", "below", "removal:"} <= labels, labels
    assert set(table_keys(ROOT / "docs" / "runbook.md", "| line | what it says |")) == labels


LAYOUT_WORDS = {
    "owner-record": "owner record",
    "chromium-profile": "Chromium",
    "firefox-profile": "Firefox",
    "mercurial": "Mercurial",
    "emacs": "Emacs",
    "borg": "borg",
}


def test_discover_help_and_design_name_every_layout_the_walk_finds() -> None:
    """discover's --help and design.md listed Chromium, Mercurial, borg and Emacs locks as what
    the walk finds, but it also finds owner records (`STORE/LOCK`, the README's own layout)
    and Firefox profiles. Each layout it recognises by name is now named in both."""
    helped = run_cli("discover", "--help").stdout
    design = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    walks = design.split("## What `discover` walks")[1].split("\n## ")[0]
    for layout in ("owner-record", *layout_formats()):
        words = LAYOUT_WORDS[layout]
        assert words in " ".join(helped.split()), layout
        assert words in " ".join(walks.split()), layout
