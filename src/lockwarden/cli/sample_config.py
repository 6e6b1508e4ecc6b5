"""Configs written from the schema in config.py, so their documentation cannot drift from it.

* `render_example()` is `config.example.toml`: every section and every key, each with its help,
  its default and an example value (set, so loading the file proves every example is valid).
* `render_starter(candidates)` is what `lockwarden init` writes: [defaults] at their defaults,
  one [[lock]] per lock found on this host, the optional sections as comments.

Values are written by tomli-w; the comments are added around them line by line.
Regenerate the example after changing the schema:
    PYTHONPATH=src python -m lockwarden.cli.sample_config > config.example.toml
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import tomli_w

from lockwarden import config
from lockwarden.support.escape import is_utf8, visible

EXAMPLE_HEADER = """\
# lockwarden configuration: every key, with its default and an example value.
# Copy what you need to /etc/lockwarden/config.toml (or pass --config PATH), then run
#     lockwarden check-config
# Durations are written "90s", "15m", "2h", "1h30m", "2d".
# Generated from the schema (python -m lockwarden.cli.sample_config); do not edit by hand.
"""

STARTER_HEADER = """\
# lockwarden configuration, written by `lockwarden init`.
# Every key is documented in config.example.toml (installed as
# /usr/share/doc/lockwarden/config.example.toml). Check it with: {check}
# Durations are written "90s", "15m", "2h", "1h30m", "2d".
"""


@dataclass(frozen=True)
class Candidate:
    """A lock worth watching on this host, as `init` will list it."""

    name: str
    path: str
    format: str
    role: str | None
    """What the store is, as alerts say it; None for a lock only found, not known."""
    why: str = ""
    """Why it is listed (the comment above its table): its role, or how it was found."""
    lifetime: str | None = None
    """Why it is listed commented out: held for a daemon's whole life, it would page an hour
    after `init` on a healthy host."""


def well_known_candidates(exists: Callable[[str], bool] = os.path.exists) -> list[Candidate]:
    """The well-known system locks (dpkg, apt, ...) present on this host."""
    return [
        Candidate(name=name, path=path, format=config.well_known_format(path), role=role, why=role)
        for name, path, role in config.WELL_KNOWN_LOCKS
        if exists(path)
    ]


def host_candidates(directories: Sequence[str] = ()) -> list[Candidate]:
    """What `init` lists: the well-known locks present, then what `discover` finds (every file
    the kernel shows locked now, and known layouts under `directories`)."""
    from lockwarden.cli.discover import (
        DEFAULT_MAX_DEPTH,
        DEFAULT_MAX_ENTRIES,
        kernel_lock_candidates,
        layout_candidates,
        lock_names,
    )
    from lockwarden.procfs.reader import HostReader, wall_clock

    known = well_known_candidates()
    taken_paths = {candidate.path for candidate in known}
    kernel, _notes = kernel_lock_candidates(HostReader(wall_clock))
    layouts, _notes = layout_candidates(directories, DEFAULT_MAX_DEPTH, DEFAULT_MAX_ENTRIES)
    found = []
    for candidate in (*kernel, *layouts):
        if candidate.path not in taken_paths:
            taken_paths.add(candidate.path)
            found.append(candidate)
    taken_names = {candidate.name for candidate in known}
    names = [
        name if name not in taken_names else f"{name}-found"
        for name in lock_names([candidate.path for candidate in found])
    ]
    return [
        *known,
        *(
            Candidate(
                name=name,
                path=c.path,
                format=c.format,
                role=None,
                why=f"found by {c.found_by}",
                lifetime=c.lifetime,
            )
            for name, c in zip(names, found, strict=True)
        ),
    ]


def toml_value(value: Any) -> str:
    """One value as TOML, written by tomli-w."""
    return tomli_w.dumps({"v": value}).split("=", 1)[1].strip()


def toml_assignment(key: str, value: Any) -> str:
    return f"{key} = {toml_value(value)}"


def default_text(option: config.Option) -> str:
    if option.default is config.REQUIRED:
        return "required"
    if option.default is None:
        return "default: unset"
    return f"default: {toml_value(option.default)}"


def documented(option: config.Option, value: Any, commented: bool = False) -> list[str]:
    """`# help (default: ...)` then `key = value` (itself commented out if asked)."""
    comment = textwrap.wrap(
        f"{option.help} ({default_text(option)})", width=96, break_on_hyphens=False
    )
    assignment = toml_assignment(option.key, value).splitlines()
    if commented:
        assignment = [f"# {line}" for line in assignment]
    return [*(f"# {line}" for line in comment), *assignment]


def table_lines(
    header: str, options: Iterable[config.Option], values: Callable[[config.Option], Any]
) -> list[str]:
    """`[section]` or `[[lock]]`, then every option documented and set to `values(option)`."""
    lines = [header]
    for option in options:
        lines.extend(documented(option, values(option)))
    return lines


def example_of(option: config.Option) -> Any:
    return option.example


def render_example() -> str:
    """config.example.toml: every key the schema accepts, set to its example."""
    blocks = [EXAMPLE_HEADER.rstrip("\n")]
    for name, options in config.SECTIONS.items():
        blocks.append("\n".join(table_lines(f"[{name}]", options, example_of)))
    blocks.append(
        "# One [[lock]] table per lock to watch.\n"
        + "\n".join(
            table_lines("[[lock]]", (*config.LOCK_OPTIONS, *config.LOCK_ALERT_OPTIONS), example_of)
        )
    )
    blocks.append(
        "# A lock inside a database server: no path, one thing to watch.\n"
        + "\n".join(table_lines("[[lock]]", _database_example_options(), example_of))
        + "\n# ... or, instead of advisory_key, one of these:\n"
        + "\n".join(
            line
            for option in config.DATABASE_OPTIONS
            if option.key in OTHER_WATCHES
            for line in documented(option, option.example, commented=True)
        )
    )
    return "\n\n".join(blocks) + "\n"


# What a database lock may watch instead of advisory_key (shown commented out in the example).
OTHER_WATCHES = ("table", "liquibase_table", "lock_name")


def _database_example_options() -> list[config.Option]:
    """A database lock's keys: its name, one watch (advisory_key), the connection settings."""
    name = replace(config.LOCK_OPTIONS[0], example="app-db-migrations")
    return [
        name,
        *(option for option in config.DATABASE_OPTIONS if option.key not in OTHER_WATCHES),
    ]


def starter_defaults() -> list[str]:
    """[defaults] set to the defaults (so they are visible and easy to change)."""
    lines = ["[defaults]"]
    for option in config.DEFAULTS_OPTIONS:
        value = option.example if option.default in (None, config.REQUIRED) else option.default
        lines.extend(documented(option, value))
    return lines


def optional_section(name: str, options: Sequence[config.Option]) -> list[str]:
    """A section other than [defaults], commented out: nothing optional is switched on."""
    lines = [f"# [{name}]"]
    for option in options:
        lines.extend(documented(option, option.example, commented=True))
    return lines


def starter_lock(candidate: Candidate) -> list[str]:
    # A found file's name is anyone's data: in a comment it is made visible (a newline in it
    # would start a line of root's config), and one that is not UTF-8 is left out whole.
    if not is_utf8(candidate.path):
        return [
            f"# Left out: {visible(candidate.path)}: its name is not UTF-8, which a config "
            "cannot hold."
        ]
    table = [
        "[[lock]]",
        toml_assignment("name", candidate.name),
        toml_assignment("path", candidate.path),
        toml_assignment("format", candidate.format),
    ]
    if candidate.role:
        table.append(toml_assignment("role", candidate.role))
    why = f"# {visible(candidate.why or candidate.role or candidate.name)}"
    if candidate.lifetime is None:
        return [why, *table]
    reason = (
        f"# Left out: {visible(candidate.lifetime)}. No writer waits on such a lock, and its "
        "budgets would page on a healthy host; uncomment to watch it anyway."
    )
    return [why, reason, *(f"# {line}" for line in table)]


def example_lock_commented() -> list[str]:
    """Shown when no lock was found: an example to copy, commented out."""
    lines = ["# No known lock was found on this host; list yours like this:", "# [[lock]]"]
    for option in config.LOCK_OPTIONS:
        if option.default is config.REQUIRED:
            lines.append(f"# {toml_assignment(option.key, option.example)}")
    return lines


def render_starter(candidates: Sequence[Candidate], path: str = config.DEFAULT_PATH) -> str:
    """What `lockwarden init` writes at `path` for these candidate locks."""
    check = "lockwarden check-config" + ("" if path == config.DEFAULT_PATH else f" --config {path}")
    blocks = [STARTER_HEADER.format(check=check).rstrip("\n"), "\n".join(starter_defaults())]
    for name, options in config.SECTIONS.items():
        if name != "defaults":
            blocks.append("\n".join(optional_section(name, options)))
    if candidates:
        blocks.extend("\n".join(starter_lock(candidate)) for candidate in candidates)
    else:
        blocks.append("\n".join(example_lock_commented()))
    return "\n\n".join(blocks) + "\n"


def write_new_config(path: str, text: str, force: bool) -> None:
    """Create `path` (mode 0600: a config may come to hold notifier secrets); refuse to replace
    an existing file unless `force`. Raises FileExistsError."""
    from lockwarden.support.atomic import write_new

    directory = os.path.dirname(path) or "."
    os.makedirs(directory, mode=0o755, exist_ok=True)
    write_new(path, text, mode=0o600, replace=force)


if __name__ == "__main__":  # pragma: no cover
    print(render_example(), end="")
