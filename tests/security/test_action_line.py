"""Attack 1 of docs/security.md: the action line on-call pastes into a root shell.

A local user names a cgroup in the subtree systemd delegated to her (`user@UID.service`) and
holds a watched lock from it past its budget. The cgroup's name reaches the report; pasted into
bash, the action must run exactly the command `action.argv` says, and nothing the name says.
Everything is real: the user, the cgroup, the holder's flock, and bash parsing the line.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import Children, require_tool, run_json, write_config
from lockwarden.check.advice import advise_holder, shell_argv, valid_runtime_name
from lockwarden.model import Container, Holder
from lockwarden.procfs.snapshot import valid_unit_name
from security.conftest import Cgroups, User

# Takes an exclusive flock on argv[1] once told to (after the test moved it into its cgroup).
HOLDER = """
import fcntl, sys, time
sys.stdin.readline()
handle = open(sys.argv[1], "w")
fcntl.flock(handle, fcntl.LOCK_EX)
print("ready", flush=True)
time.sleep(600)
"""

# Unit names no systemd makes, each an attempt to end the command and start another.
HOSTILE_UNITS = (
    "x;touch${IFS}PWNED;.service",
    "$(touch${IFS}PWNED).service",
    "`touch PWNED`.service",
    "a|touch PWNED|.service",
    "a&&touch PWNED&&.service",
    "a'b\"c.service",
    "-x.service",
)


def _hold_in(
    unit: str, lock: Path, attacker: User, cgroups: Cgroups, children: Children
) -> subprocess.Popen[str]:
    """The attacker's process, in cgroup `unit` of her delegated user@UID.service, holding
    `lock`."""
    manager = f"user.slice/user-{attacker.uid}.slice/user@{attacker.uid}.service"
    cgroups.make(manager)
    leaf = cgroups.make(f"{manager}/app.slice/{unit}", owner=attacker)
    holder = children.start(
        attacker.command(sys.executable, "-c", HOLDER, str(lock)), stdin=subprocess.PIPE
    )
    cgroups.move(holder.pid, leaf)
    assert holder.stdin is not None and holder.stdout is not None
    holder.stdin.write("go\n")
    holder.stdin.flush()
    assert holder.stdout.readline().strip() == "ready"
    return holder


def _pasted(line: str, cwd: Path) -> list[str]:
    """What bash runs when on-call pastes `line`: each command it would run is a function
    here that prints its argv, so nothing is stopped for real, but the parse is bash's own."""
    bash = require_tool("bash")
    shadows = "".join(
        f'{name}() {{ printf "%s\\0" {name} "$@"; }}; '
        for name in ("systemctl", "kill", "docker", "podman", "machinectl", "lxc-stop", "touch")
    )
    done = subprocess.run(
        [bash, "--norc", "--noprofile", "-c", shadows + line],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split("\0")[:-1]


@pytest.mark.parametrize("unit", HOSTILE_UNITS)
def test_a_hostile_cgroup_name_never_becomes_shell_syntax(
    unit: str,
    attacker: User,
    cgroups: Cgroups,
    children: Children,
    attackers_dir: Path,
    tmp_path: Path,
) -> None:
    lock = attackers_dir / "job.lock"
    lock.touch()
    os.chown(lock, attacker.uid, attacker.gid)
    holder = _hold_in(unit, lock, attacker, cgroups, children)
    config = write_config(
        tmp_path / "config.toml",
        f'[[lock]]\nname = "job"\npath = "{lock}"\nformat = "kernel"\nwarn_after = "1s"\n'
        f'[state]\npath = "{tmp_path / "state.jsonl"}"\n',
    )
    run_json("--once", "--config", config)  # the first run starts the sighting series
    time.sleep(1.5)  # past the budget
    _code, document = run_json("--once", "--config", config)
    [finding] = [found for found in document["locks"] if found["name"] == "job"]
    assert finding["state"] == "held_too_long", finding
    [named] = finding["holders"]
    assert named["pid"] == holder.pid
    # No systemd made a unit of that name: it is no unit to stop, and no word of it is advised.
    assert named["unit"] is None
    action = finding["action"]
    assert action is not None and action["argv"] is not None, finding
    assert "PWNED" not in action["line"]
    ran = _pasted(action["line"], attackers_dir)
    assert ran == action["argv"], (action, ran)
    assert ran == ["kill", str(holder.pid)]
    assert not (attackers_dir / "PWNED").exists()


def test_a_unit_of_the_users_own_is_stopped_through_her_manager(
    attacker: User, cgroups: Cgroups, children: Children, attackers_dir: Path, tmp_path: Path
) -> None:
    """The true positive beside the attacks: a valid unit in her delegated subtree is hers,
    stopped through her own service manager, and the line bash runs is the argv."""
    lock = attackers_dir / "job.lock"
    lock.touch()
    os.chown(lock, attacker.uid, attacker.gid)
    holder = _hold_in("sync@nightly.service", lock, attacker, cgroups, children)
    config = write_config(
        tmp_path / "config.toml",
        f'[[lock]]\nname = "job"\npath = "{lock}"\nformat = "kernel"\nwarn_after = "1s"\n'
        f'[state]\npath = "{tmp_path / "state.jsonl"}"\n',
    )
    run_json("--once", "--config", config)
    time.sleep(1.5)
    _code, document = run_json("--once", "--config", config)
    [finding] = [found for found in document["locks"] if found["name"] == "job"]
    assert finding["state"] == "held_too_long", finding
    [named] = finding["holders"]
    assert (named["pid"], named["unit"]) == (holder.pid, "sync@nightly.service")
    argv = ["systemctl", "--user", "-M", f"{attacker.name}@", "stop", "sync@nightly.service"]
    assert finding["action"]["argv"] == argv
    assert _pasted(finding["action"]["line"], attackers_dir) == argv


# Characters a shell gives meaning to, and the ones names are made of.
_SHELL = ";|&$`'\"\\(){}<>*?[]~#!= \t\n-"
_NAME = "abcxyz019.-_@:"


def _random_name(rng: random.Random) -> str:
    return "".join(rng.choice(_SHELL + _NAME * 2) for _ in range(rng.randint(1, 12)))


def test_every_advised_line_is_its_argv_to_bash(attackers_dir: Path) -> None:
    """A randomized differential against bash: holders whose unit, user and container names
    are random strings of shell syntax; every action line bash parses back to exactly its argv,
    and no name that is no valid unit or container name is in a command at all."""
    rng = random.Random(42)
    checked = 0
    for _ in range(150):
        unit = _random_name(rng) + rng.choice((".service", ".scope", ""))
        container = Container(
            rng.choice(("docker", "podman", "systemd-nspawn", "lxc")),
            _random_name(rng),
            init=rng.random() < 0.5,
        )
        who = Holder(
            pid=rng.randint(2, 99999),
            alive=True,
            name="sleep",
            unit=unit,
            user=_random_name(rng),
            user_unit=rng.random() < 0.5,
            container=container if rng.random() < 0.5 else None,
        )
        line = advise_holder(who, (), "kernel")
        argv = shell_argv(line)
        if argv is None:
            continue
        assert _pasted(line, attackers_dir) == argv, (who, line)
        if not valid_unit_name(unit):
            assert unit not in argv
        if who.container is not None and not valid_runtime_name(container.name):
            assert container.name not in argv
        checked += 1
    assert checked > 100
