"""Attack 9 of the security issue: a local user who can change a file root's lockwarden trusts
(its config, the textfile's directory, a urls_file) would decide what root writes and where
the alerts go. Each is refused, and root's files stay untouched; a holder's secrets on its
command line never reach the report."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from conftest import Children, run_cli, write_config
from security.conftest import User


def _attackers_directory(tmp_path: Path, attacker: User) -> Path:
    tmp_path.chmod(0o755)
    place = tmp_path / "mallory"
    place.mkdir()
    os.chown(place, attacker.uid, attacker.gid)
    return place


def test_a_config_another_user_owns_is_refused_and_roots_file_untouched(
    tmp_path: Path, attacker: User
) -> None:
    victim = tmp_path / "root-file"
    victim.write_text("root's own\n")
    place = _attackers_directory(tmp_path, attacker)
    config = write_config(place / "config.toml", f'[prometheus]\ntextfile = "{victim}"\n')
    os.chown(config, attacker.uid, attacker.gid)
    completed = run_cli("--once", "--config", config)
    assert completed.returncode == 78, completed.stdout + completed.stderr
    assert "refused" in completed.stderr and f"uid {attacker.uid}" in completed.stderr
    assert victim.read_text() == "root's own\n"


def test_a_world_writable_config_is_refused(tmp_path: Path) -> None:
    config = write_config(tmp_path / "config.toml", "")
    os.chmod(config, 0o666)
    completed = run_cli("--once", "--config", config)
    assert completed.returncode == 78 and "writable by everyone" in completed.stderr


def test_a_textfile_directory_another_user_can_change_is_never_written(
    tmp_path: Path, attacker: User
) -> None:
    place = _attackers_directory(tmp_path, attacker)
    textfile = place / "lockwarden.prom"
    config = write_config(tmp_path / "config.toml", f'[prometheus]\ntextfile = "{textfile}"\n')
    completed = run_cli("--once", "--config", config)
    assert not textfile.exists()
    assert "refused to write" in completed.stdout + completed.stderr
    checked = run_cli("check-config", "--config", config)
    assert "a run refuses to write there" in checked.stdout + checked.stderr


def test_a_urls_file_another_user_owns_never_decides_where_alerts_go(
    tmp_path: Path, attacker: User
) -> None:
    place = _attackers_directory(tmp_path, attacker)
    urls = place / "urls"
    urls.write_text("json://127.0.0.1:9/\n")
    os.chown(urls, attacker.uid, attacker.gid)
    config = write_config(tmp_path / "config.toml", f'[notify]\nurls_file = "{urls}"\n')
    checked = run_cli("check-config", "--config", config)
    assert checked.returncode != 0
    assert "another user could decide where alerts go" in checked.stdout + checked.stderr


def test_a_holders_password_on_its_command_line_never_reaches_the_report(
    tmp_path: Path, children: Children
) -> None:
    lock = tmp_path / "LOCK"
    code = (
        "import fcntl, sys, time\n"
        "handle = open(sys.argv[1], 'w'); fcntl.flock(handle, fcntl.LOCK_EX)\n"
        "print('ready', flush=True); time.sleep(60)\n"
    )
    children.start([sys.executable, "-c", code, str(lock), "--password=hunter2"], ready="ready")
    config = write_config(
        tmp_path / "config.toml", f'[[lock]]\nname = "store"\npath = "{lock}"\nformat = "kernel"\n'
    )
    for output in ("--json", "--verbose"):
        completed = run_cli("--once", "--config", config, output)
        assert "--password" in completed.stdout  # the holder is shown ...
        assert "hunter2" not in completed.stdout + completed.stderr  # ... its secret is not


def test_a_directory_above_that_a_system_account_owns_is_trusted_a_persons_is_not(
    tmp_path: Path, attacker: User
) -> None:
    """Debian gives /var/lib/prometheus to prometheus above node-exporter's root-owned
    textfile directory: a system account's directory above is the distribution's layout; the
    same layout under a person's directory is refused."""
    from lockwarden.support.trusted import write_problem

    for owner, trusted in ((998, True), (attacker.uid, False)):
        above = tmp_path / f"above-{owner}"
        textfiles = above / "node-exporter"
        textfiles.mkdir(parents=True)
        os.chown(above, owner, owner)
        assert (write_problem(str(textfiles)) is None) is trusted
