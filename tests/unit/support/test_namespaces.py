"""support/namespaces.py: which PID namespace this process runs in, and whose /proc it reads,
told from a /proc tree laid out in a temporary directory as the kernel lays out its own (the
namespace link is a symlink whose target is `pid:[INODE]`; `NSpid:` lists one PID per level
from the /proc's namespace down)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lockwarden.support.namespaces import (
    PROC_PID_INIT_INO,
    boottime_offset,
    namespace_id,
    numbered_namespace,
    proc_is_own_nested_namespace,
    proc_locks_may_omit,
)

NESTED = 4026532175


def fake_proc(root: Path, namespace: int | None, nspid: str | None) -> str:
    (root / "self" / "ns").mkdir(parents=True)
    if namespace is not None:
        os.symlink(f"pid:[{namespace}]", root / "self" / "ns" / "pid")
    status = "Name:\tpython3\n" + (f"NSpid:\t{nspid}\n" if nspid is not None else "")
    (root / "self" / "status").write_text(status)
    return str(root)


@pytest.mark.parametrize(
    ("namespace", "nspid", "may_omit", "own_nested", "numbered"),
    [
        (PROC_PID_INIT_INO, "4242", False, False, PROC_PID_INIT_INO),  # the host's namespace
        (NESTED, "7", True, True, NESTED),  # a container with a /proc of its own
        (NESTED, "4242\t7", True, False, None),  # entered a namespace, reads its parent's /proc
        (None, "7", True, True, None),  # the link unreadable: not proven the host's
        (NESTED, None, True, False, None),  # no NSpid line (a kernel before 4.1): not asked
    ],
)
def test_the_namespace_and_the_proc_it_reads(
    tmp_path: Path,
    namespace: int | None,
    nspid: str | None,
    may_omit: bool,
    own_nested: bool,
    numbered: int | None,
) -> None:
    proc = fake_proc(tmp_path, namespace, nspid)
    assert proc_locks_may_omit(proc) is may_omit
    assert proc_is_own_nested_namespace.__wrapped__(proc) is own_nested
    assert numbered_namespace(proc) == numbered


def test_the_hosts_proc_read_from_a_nested_namespace_numbers_the_hosts_pids(
    tmp_path: Path,
) -> None:
    """Entered without a /proc of its own, a namespace reads the host's (kthreadd, PID 2, is a
    kernel thread there): its PIDs are the host namespace's, not this process's own."""
    proc = fake_proc(tmp_path, NESTED, "4242\t7")
    (tmp_path / "2").mkdir()
    flags = 0x00200000  # PF_KTHREAD, the 9th field of stat
    (tmp_path / "2" / "stat").write_text(f"2 (kthreadd) S 0 0 0 0 -1 {flags} 0 0\n")
    assert numbered_namespace(proc) == PROC_PID_INIT_INO


def test_a_namespace_link_is_read_as_its_inode_number(tmp_path: Path) -> None:
    os.symlink("pid:[4026531836]", tmp_path / "pid")
    os.symlink("garbage", tmp_path / "odd")
    assert namespace_id(str(tmp_path / "pid")) == PROC_PID_INIT_INO
    assert namespace_id(str(tmp_path / "odd")) is None
    assert namespace_id(str(tmp_path / "absent")) is None


def test_this_process_is_read_from_the_real_proc() -> None:
    """The real /proc agrees with itself: a process whose /proc is its own namespace's is in a
    namespace /proc/locks may leave locks out of."""
    if proc_is_own_nested_namespace.__wrapped__("/proc"):
        assert proc_locks_may_omit("/proc")
    own = namespace_id("/proc/self/ns/pid")
    assert own is not None
    assert proc_locks_may_omit("/proc") is (own != PROC_PID_INIT_INO)


@pytest.mark.parametrize(
    ("offsets", "seconds"),
    [
        ("monotonic 0 0\nboottime 100000 0\n", 100000.0),
        ("monotonic 5 0\nboottime -3 500000000\n", -2.5),
        ("monotonic 0 0\nboottime 0 0\n", 0.0),
        (None, 0.0),  # a kernel without time namespaces
    ],
)
def test_the_boot_clock_offset_of_this_time_namespace(
    tmp_path: Path, offsets: str | None, seconds: float
) -> None:
    proc = fake_proc(tmp_path, NESTED, "7")
    if offsets is not None:
        (tmp_path / "self" / "timens_offsets").write_text(offsets)
    assert boottime_offset(proc) == seconds
