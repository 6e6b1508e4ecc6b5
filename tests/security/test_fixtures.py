"""The attacker and the cgroups the security tests use are what they say they are."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from security.conftest import Cgroups, User


def test_the_attacker_is_an_unprivileged_user_with_no_capability(attacker: User) -> None:
    shown = subprocess.run(
        attacker.command("sh", "-c", "id -u; grep CapEff /proc/self/status"),
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout.split()
    assert shown[0] == str(attacker.uid) and attacker.uid != 0
    assert shown[-1] == "0000000000000000"


def test_a_delegated_cgroup_belongs_to_its_user_and_holds_the_process_put_in_it(
    attacker: User, cgroups: Cgroups
) -> None:
    made = cgroups.make(f"lw-test-{os.getpid()}.slice/delegated.service", owner=attacker)
    assert made.stat().st_uid == attacker.uid
    sleeper = subprocess.Popen(attacker.command("sleep", "30"))
    try:
        cgroups.move(sleeper.pid, made)
        cgroup = Path(f"/proc/{sleeper.pid}/cgroup").read_text()
        assert f"/lw-test-{os.getpid()}.slice/delegated.service" in cgroup
    finally:
        sleeper.kill()
        sleeper.wait()
