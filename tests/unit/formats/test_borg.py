"""borg: a real `borg with-lock REPO sleep N` holding a borg 1.x repository's lock."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import Children, require_tool, wait_until
from lockcheck import backdate, inspect_lock, kill_group
from lockwarden.model import State, UnknownCause


def borg_env(base: Path) -> dict[str, str]:
    return {
        **os.environ,
        "BORG_BASE_DIR": str(base),
        "BORG_UNKNOWN_UNENCRYPTED_REPO_ACCESS_IS_OK": "yes",
        "BORG_RELOCATED_REPO_ACCESS_IS_OK": "yes",
    }


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    borg = require_tool("borg")
    base = tmp_path_factory.mktemp("borg")
    repo = base / "repo"
    subprocess.run(
        [borg, "init", "--encryption=none", str(repo)],
        check=True,
        env=borg_env(base),
        capture_output=True,
    )
    return repo


@pytest.fixture(scope="module")
def host_id(repository: Path) -> str:
    """This host's id exactly as the real borg writes it into lock.roster."""
    roster = subprocess.run(
        ["borg", "with-lock", str(repository), "cat", str(repository / "lock.roster")],
        check=True,
        env=borg_env(repository.parent),
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    return str(json.loads(roster)["exclusive"][0][0])


def dead_pid() -> int:
    """The PID of a process that has exited and been reaped."""
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def write_roster(repo: Path, roster: dict[str, list[list[object]]]) -> Path:
    repo.mkdir(exist_ok=True)
    path = repo / "lock.roster"
    path.write_text(json.dumps(roster))
    return path


def test_with_lock_is_held_by_borg_then_stale_when_borg_is_killed(repository: Path) -> None:
    holder = subprocess.Popen(
        ["borg", "with-lock", str(repository), "sleep", "60"],
        env=borg_env(repository.parent),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        assert wait_until(lambda: (repository / "lock.roster").exists(), timeout=30)
        held = inspect_lock(repository)
    finally:
        kill_group(holder)  # borg and its sleep
    stale = inspect_lock(repository)
    subprocess.run(["borg", "break-lock", str(repository)], env=borg_env(repository.parent))

    assert held.format == "borg"
    assert held.state is State.HELD
    assert held.holder is not None and held.holder.pid == holder.pid
    assert stale.state is State.STALE
    assert stale.proof is not None and str(holder.pid) in stale.proof
    assert stale.action == f"borg break-lock {repository}"


def test_exclusive_directory_alone_names_the_holder(
    children: Children, host_id: str, tmp_path: Path
) -> None:
    sleeper = children.start(["sleep", "60"])
    exclusive = tmp_path / "lock.exclusive"
    exclusive.mkdir()
    (exclusive / f"{host_id}.{sleeper.pid}-0").touch()

    finding = inspect_lock(tmp_path)

    assert finding.format == "borg"
    assert finding.state is State.HELD
    assert finding.holder is not None and finding.holder.pid == sleeper.pid


def test_pid_reused_by_an_unrelated_process_is_never_the_holder(
    children: Children, host_id: str, tmp_path: Path
) -> None:
    sleeper = children.start(["sleep", "60"])
    roster = write_roster(tmp_path, {"exclusive": [[host_id, sleeper.pid, 0]]})
    backdate(roster)

    finding = inspect_lock(tmp_path)

    assert finding.state is State.UNKNOWN  # wall-clock times only: no proof, never held
    assert finding.holder is None


def test_shared_lock_is_held_while_any_shared_holder_lives(
    children: Children, host_id: str, tmp_path: Path
) -> None:
    gone_pid = dead_pid()
    sleeper = children.start(["sleep", "60"])
    write_roster(tmp_path, {"shared": [[host_id, gone_pid, 0], [host_id, sleeper.pid, 0]]})
    one_alive = inspect_lock(tmp_path)
    write_roster(tmp_path, {"shared": [[host_id, gone_pid, 0]], "exclusive": []})
    none_alive = inspect_lock(tmp_path)

    assert one_alive.state is State.HELD
    assert one_alive.holder is not None and one_alive.holder.pid == sleeper.pid
    assert none_alive.state is State.STALE


def test_same_name_on_another_machine_is_unknown_unless_configured(
    children: Children, host_id: str, tmp_path: Path
) -> None:
    sleeper = children.start(["sleep", "60"])
    name, _, node = host_id.rpartition("@")
    other_machine = f"{name}@{int(node) ^ 1}"
    write_roster(tmp_path, {"exclusive": [[other_machine, sleeper.pid, 0]]})

    unconfigured = inspect_lock(tmp_path)
    configured = inspect_lock(tmp_path, host_aliases=(other_machine,))

    assert unconfigured.state is State.UNKNOWN
    assert unconfigured.unknown_cause is UnknownCause.OTHER_HOST  # same name, another machine id
    assert configured.state is State.HELD


def test_repository_without_a_lock_is_free(repository: Path) -> None:
    finding = inspect_lock(repository)

    assert finding.format == "borg"
    assert finding.state is State.FREE
