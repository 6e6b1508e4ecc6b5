"""config.example.toml documents every key the schema accepts; `lockwarden init` writes a
starter config that `lockwarden check-config` accepts and never silently replaces a file.

The key lists come from the schema (config.SECTIONS, config.LOCK_OPTIONS), so a key added
there without reaching the example fails here.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path

import pytest

from conftest import FLOCK_HOLDER, Children, run_cli
from lockwarden import config
from lockwarden.cli.sample_config import (
    Candidate,
    render_example,
    render_starter,
    well_known_candidates,
)

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "config.example.toml"
REGENERATE = "PYTHONPATH=src python -m lockwarden.cli.sample_config > config.example.toml"


def schema_keys() -> list[tuple[str, config.Option]]:
    """(table, option) for every key the config accepts, read from the schema itself."""
    keys = [(section, option) for section, options in config.SECTIONS.items() for option in options]
    keys.extend(("lock", option) for option in (*config.LOCK_OPTIONS, *config.LOCK_ALERT_OPTIONS))
    return keys


def test_the_example_config_loads() -> None:
    loaded = config.load(str(EXAMPLE))
    file_lock, database_lock = loaded.locks  # a store lock, and a lock inside a database
    assert file_lock.database is None
    assert database_lock.database is not None and database_lock.database.watch == "advisory_key"


def test_the_example_config_passes_check_config(tmp_path: Path) -> None:
    """check-config also loads the apprise config file the example names: given one that
    exists, the example passes; without it, that (and only that) is the error."""
    missing = run_cli("check-config", "--config", str(EXAMPLE))
    assert missing.returncode == 78
    assert "notify.config: /etc/lockwarden/apprise.yml: cannot be loaded" in missing.stderr
    assert missing.stderr.count("config error") == 1
    apprise_config = tmp_path / "apprise.yml"
    apprise_config.write_text("urls:\n  - json://127.0.0.1:9/hook\n")
    example = tmp_path / "config.toml"
    example.write_text(
        EXAMPLE.read_text().replace("/etc/lockwarden/apprise.yml", str(apprise_config))
    )
    example.chmod(0o600)
    completed = run_cli("check-config", "--config", str(example))
    assert completed.returncode == 0, completed.stderr
    assert len(tomllib.loads(completed.stdout)["lock"]) == 2  # the effective config is TOML


def test_every_key_the_schema_accepts_is_set_in_the_example() -> None:
    document = tomllib.loads(EXAMPLE.read_text())
    tables = {section: document.get(section, {}) for section in config.SECTIONS}
    tables["lock"] = document["lock"][0]
    missing = [
        f"{table}.{option.key}"
        for table, option in schema_keys()
        if option.key not in tables[table]
    ]
    assert missing == [], f"not in config.example.toml; regenerate it: {REGENERATE}"


def test_every_key_in_the_example_has_its_help_and_default_above_it() -> None:
    lines = EXAMPLE.read_text().splitlines()
    for table, option in schema_keys():
        header = f"[[{table}]]" if table == "lock" else f"[{table}]"
        start = lines.index(header)
        assignment = next(
            number
            for number in range(start, len(lines))
            if re.match(rf"{re.escape(option.key)} = ", lines[number])
        )
        comment = " ".join(
            line.lstrip("# ") for line in lines[start + 1 : assignment] if line.startswith("#")
        )
        assert option.help.split()[0] in comment, (table, option.key)
        assert re.search(r"\((default: .+|required)\)$", comment), (table, option.key, comment)


def test_the_example_is_what_the_schema_generates() -> None:
    assert EXAMPLE.read_text() == render_example(), f"config.example.toml drifted: {REGENERATE}"


def test_init_writes_a_config_that_check_config_accepts(tmp_path: Path, children: Children) -> None:
    held = tmp_path / "app" / "held.lock"
    held.parent.mkdir()
    held.touch()
    children.python(FLOCK_HOLDER, str(held))
    store = tmp_path / "srv" / "notes"
    store.mkdir(parents=True)
    os.symlink("wa@somehost.4242:1700000000", store / ".#todo.txt")  # an Emacs lock
    path = tmp_path / "etc" / "lockwarden" / "config.toml"
    written = run_cli("init", "--path", str(path), str(tmp_path / "srv"))
    assert written.returncode == 0, written.stderr
    assert str(path) in written.stdout
    assert (path.stat().st_mode & 0o777) == 0o600
    checked = run_cli("check-config", "--config", str(path))
    assert checked.returncode == 0, checked.stderr
    present = [candidate.name for candidate in well_known_candidates()]
    locks = tomllib.loads(path.read_text())["lock"]
    assert set(present) <= {lock["name"] for lock in locks}
    paths = {lock["path"] for lock in locks}
    assert str(held) in paths  # the kernel shows it locked now
    assert str(store / ".#todo.txt") in paths  # a layout under the directory
    assert path.read_text().startswith("# lockwarden configuration, written by `lockwarden init`")


def test_init_refuses_to_replace_a_file_without_force(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("# mine\n")
    refused = run_cli("init", "--path", str(path))
    assert refused.returncode == 64
    assert "already exists; pass --force" in refused.stderr
    assert path.read_text() == "# mine\n"
    forced = run_cli("init", "--path", str(path), "--force")
    assert forced.returncode == 0, forced.stderr
    assert path.read_text().startswith("# lockwarden configuration")
    assert [name for name in os.listdir(tmp_path)] == ["config.toml"]


@pytest.mark.parametrize(
    "candidates",
    [
        [],
        [Candidate("wa-store", "/srv/wa/store/LOCK", "owner-record", 'WhatsApp "main" store')],
        [Candidate("a", "/x/a", "kernel", "first"), Candidate("b", "/x/b", "auto", "second")],
    ],
    ids=["none-found", "one-with-quotes", "two"],
)
def test_starter_config_for_any_candidates_loads(candidates: list[Candidate]) -> None:
    text = render_starter(candidates)
    loaded = config.parse(tomllib.loads(text), "starter")
    assert [(lock.name, lock.path, lock.format, lock.role) for lock in loaded.locks] == [
        (c.name, c.path, c.format, c.role) for c in candidates
    ]


def test_the_optional_sections_of_the_starter_are_valid_once_uncommented() -> None:
    text = render_starter([Candidate("a", "/x/a", "kernel", "first")])
    uncommented = "\n".join(
        line[2:] if re.match(r"# (\[\w+\]|\w+ = |\s|\])", line) else line
        for line in text.splitlines()
    )
    document = tomllib.loads(uncommented)
    for section in config.SECTIONS:
        assert section in document, section
    config.parse(document, "uncommented starter")


def test_well_known_candidates_are_those_present_on_the_host() -> None:
    present = {"/var/lib/dpkg/lock"}
    found = well_known_candidates(exists=lambda path: path in present)
    assert [(c.name, c.path, c.format) for c in found] == [("dpkg", "/var/lib/dpkg/lock", "dpkg")]
    builtin = config.builtin(lambda path: path in present).locks  # what runs with no config
    assert [(c.name, c.format, c.role) for c in found] == [
        (lock.name, lock.format, lock.role) for lock in builtin
    ]


def test_a_lock_only_found_is_listed_with_how_and_no_role() -> None:
    """A role is what alerts call the store; "found by kernel lock" is how init found it."""
    found = Candidate("k", "/x/k", "kernel", None, why="found by kernel lock (FLOCK WRITE)")
    text = render_starter([found], "/etc/other/lockwarden.toml")
    assert "# found by kernel lock (FLOCK WRITE)\n[[lock]]" in text
    [lock] = config.parse(tomllib.loads(text), "starter").locks
    assert (lock.name, lock.format, lock.role) == ("k", "kernel", None)
    assert "Check it with: lockwarden check-config --config /etc/other/lockwarden.toml" in text
    assert "Check it with: lockwarden check-config\n" in render_starter([found])


PIDFILE_DAEMON = """
import fcntl, os, sys, time
handle = open(sys.argv[1], "w")
fcntl.flock(handle, fcntl.LOCK_EX)
handle.write(f"{os.getpid()}\\n")
handle.flush()
print("ready", flush=True)
time.sleep(120)
"""


def test_init_lists_a_daemons_own_pidfile_commented_out_with_why(
    tmp_path: Path, children: Children
) -> None:
    """A daemon that holds its pidfile locked for its whole life blocks no writer: listed with
    its budgets it would page an hour after `init` on a healthy host. It is there, commented
    out, saying why; a lock taken by an ordinary process is listed as usual."""
    pidfile = tmp_path / "run" / "daemon.pid"
    pidfile.parent.mkdir()
    daemon = children.python(PIDFILE_DAEMON, str(pidfile))
    held = tmp_path / "app" / "held.lock"
    held.parent.mkdir()
    children.python(FLOCK_HOLDER, str(held))
    path = tmp_path / "config.toml"
    written = run_cli("init", "--path", str(path))
    assert written.returncode == 0, written.stderr
    text = path.read_text()
    assert f"# Left out: the pidfile of PID {daemon.pid} (python" in text
    assert f'# path = "{pidfile}"' in text
    paths = {lock["path"] for lock in tomllib.loads(text)["lock"]}
    assert str(held) in paths and str(pidfile) not in paths
    assert run_cli("check-config", "--config", str(path)).returncode == 0
