"""Terraform's local state lock, made the way terraform makes it: an fcntl write lock on
terraform.tfstate taken by a child process, then `.terraform.tfstate.lock.info` written beside
it (terraform itself is not packaged in Debian, so a child plays its part)."""

from __future__ import annotations

import json
import socket
from datetime import UTC, datetime
from pathlib import Path

from conftest import run_json
from format_helpers import inspect
from lockwarden.formats.terraform import TerraformState
from lockwarden.model import State, UnknownCause

TERRAFORM_HOLDER = """
import fcntl, json, os, sys
state, info = sys.argv[1], sys.argv[2]
handle = open(state, "a+")
fcntl.lockf(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
with open(info, "w") as out:
    json.dump(json.loads(sys.argv[3]), out)
print("ready", flush=True)
import time; time.sleep(120)
"""


def lock_info(who: str, operation: str = "OperationTypeApply") -> str:
    return json.dumps(
        {
            "ID": "4b3f6c1e-0a47-2d3b-9d5e-6f1a2b3c4d5e",
            "Operation": operation,
            "Info": "",
            "Who": who,
            "Version": "1.6.6",
            "Created": "2026-12-02T09:15:04.123456789Z",
            "Path": "terraform.tfstate",
        }
    )


def hold_state(children, directory: Path, who: str):  # type: ignore[no-untyped-def]
    state = directory / "terraform.tfstate"
    info = directory / ".terraform.tfstate.lock.info"
    return children.python(TERRAFORM_HOLDER, str(state), str(info), lock_info(who)), state, info


def test_held_state_names_the_holder_with_who_and_operation(children, tmp_path):
    who = f"alice@{socket.gethostname()}"
    holder, state, info = hold_state(children, tmp_path, who)

    finding = inspect(str(tmp_path), "terraform")

    assert finding.state is State.HELD, finding.reason
    assert finding.holder is not None and finding.holder.pid == holder.pid
    assert finding.holder.role == f"terraform OperationTypeApply by {who}"
    assert finding.action is None  # held within its budget: nothing to do yet

    holder.kill()
    holder.wait(timeout=5)
    finding = inspect(str(tmp_path), "terraform")
    assert finding.state is State.STALE, finding.reason
    assert "no process holds a kernel lock" in (finding.proof or "")
    assert str(state) in finding.proof
    assert finding.action == f"rm -- {info}"


def test_auto_picks_terraform_from_the_directory_the_state_or_the_info(children, tmp_path):
    holder, state, info = hold_state(children, tmp_path, f"bob@{socket.gethostname()}")
    code, document = run_json("inspect", str(tmp_path))  # the real CLI, once
    finding = document["locks"][0]
    assert finding["format"] == "terraform", finding
    assert finding["holders"][0]["pid"] == holder.pid
    assert code == 0
    for given in (state, info):
        found = inspect(str(given))
        assert found.format == "terraform"
        assert found.holder is not None and found.holder.pid == holder.pid


def test_state_without_info_or_lock_is_free(tmp_path):
    (tmp_path / "terraform.tfstate").write_text("{}")
    finding = inspect(str(tmp_path))
    assert finding.format == "terraform"
    assert finding.state is State.FREE


def test_leftover_info_from_another_host_is_unknown_not_stale(tmp_path):
    (tmp_path / "terraform.tfstate").write_text("{}")
    (tmp_path / ".terraform.tfstate.lock.info").write_text(lock_info("carol@ci-runner-17"))
    finding = inspect(str(tmp_path), "terraform")
    assert finding.state is State.UNKNOWN
    assert finding.unknown_cause is UnknownCause.OTHER_HOST


def test_an_unrelated_process_locking_another_file_does_not_hold_the_state(children, tmp_path):
    """A leftover info next to a state file nobody locks is stale even while other
    processes (here a holder of a different file) run."""
    (tmp_path / "terraform.tfstate").write_text("{}")
    (tmp_path / ".terraform.tfstate.lock.info").write_text(lock_info(f"dan@{socket.gethostname()}"))
    other = tmp_path / "other"
    other.mkdir()
    hold_state(children, other, "eve@elsewhere")
    finding = inspect(str(tmp_path), "terraform")
    assert finding.state is State.STALE
    assert finding.holder is None


def test_created_is_read_to_the_microsecond_and_an_odd_one_is_ignored(children, tmp_path):
    (tmp_path / "terraform.tfstate").write_text("{}")
    info = tmp_path / ".terraform.tfstate.lock.info"
    info.write_text(lock_info(f"dan@{socket.gethostname()}"))
    claim = TerraformState().read(str(tmp_path / "terraform.tfstate"), 4194304)
    assert claim.started_at == datetime(2026, 12, 2, 9, 15, 4, 123456, tzinfo=UTC)

    odd = json.loads(lock_info("dan@here"))
    odd["Created"] = "2026-12-02 09:15:04.45158468 +0000 UTC"
    info.write_text(json.dumps(odd))
    claim = TerraformState().read(str(tmp_path), 4194304)
    assert claim.problem is None and claim.started_at is None
    assert claim.role == "terraform OperationTypeApply by dan@here"
