"""Row 1: hostile lock records. Whatever sits where a record should be, lockwarden answers within
100 ms, never raises, and never says `stale` or `held` on the word of a record it cannot trust.

What "trustworthy" means (docs/design.md; src/lockwarden/formats/trust.py): the record was
read safely (a regular file within 64 KiB, not swapped while read), it parses without ambiguity
into a PID in 2..pid_max (and, when present, a real boot id, start ticks and a time between 1970
and 9000), nobody but its writer could have put it there (not world-writable, not in a
world-writable directory without the sticky bit, not reached through a symlink a user owns in a
world-writable directory), and a live PID it names runs as the record file's owner (or the file
is root's). Anything else is `unknown`, with the reason.

Every case drives the real pipeline: formats.read_claim -> capture -> identify.gather ->
classify.classify with a real capture of the host, on real files in a temporary directory; a
few go through the real CLI.
"""

from __future__ import annotations

import json
import os
import re
import socket
import stat
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import psutil
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import run_json
from lockwarden.check.classify import Policy, classify
from lockwarden.check.identify import gather, request_for
from lockwarden.formats import read_claim
from lockwarden.model import Finding, InodeKey, State
from lockwarden.procfs.reader import HostReader, wall_clock
from lockwarden.procfs.snapshot import DescriptorScan, Names
from reliability.support import Figures, paused_deadline, require_root, within_deadline

T = TypeVar("T")
POLICY = Policy(warn_after=900.0, critical_after=3600.0)
NOBODY = 65534
TRUSTED_VERDICTS = {State.STALE, State.HELD, State.HELD_TOO_LONG}
HYPOTHESIS_RECORDS = 10_000


@dataclass(frozen=True)
class Layout:
    """Where the hostile thing goes and how lockwarden is pointed at it."""

    name: str
    format: str
    lock_name: str
    in_directory: bool  # the record is LOCK/owner.json inside an mkdir lock

    def place(self, root: Path) -> tuple[Path, Path]:
        """(the path lockwarden inspects, the path where the record goes)."""
        lock = root / self.lock_name
        if self.in_directory:
            lock.mkdir()
            return lock, lock / "owner.json"
        return lock, lock


LAYOUTS = (
    Layout("owner-record file", "owner-record", "LOCK", False),
    Layout("owner-record mkdir", "owner-record", "LOCK", True),
    Layout("pidfile", "pidfile", "daemon.pid", False),
    Layout("auto file", "auto", "store.lock", False),
    Layout("auto mkdir", "auto", "LOCK", True),
)


@dataclass(frozen=True)
class Processes:
    live: int  # a real child (root, like the records' default owner)
    dead: int  # a child that exited and was reaped
    pid_max: int


@pytest.fixture(scope="module")
def processes() -> Iterator[Processes]:
    require_root("records owned by another user (uid 65534) are part of the cases")
    sleeper = subprocess.Popen(["sleep", "300"])
    finished = subprocess.Popen(["true"])
    finished.wait()
    try:
        yield Processes(sleeper.pid, finished.pid, HostReader(wall_clock).pid_max)
    finally:
        sleeper.kill()
        sleeper.wait()


class CaseHost(HostReader):
    """The real host reader, except that the case's alarm is paused while it reads what
    every run reads whatever its records say: /proc/locks and the boot, and the scan of
    descriptors.

    That scan walks every descriptor of every process on the host (a run does it once, for all
    its locks); its cost depends on the host, not on the record. Everything the record drives
    (read, parse, the processes it names, identify, classify) runs on the case's clock.
    """

    def __init__(self, scanned: tuple[frozenset[InodeKey], DescriptorScan] | None) -> None:
        super().__init__(wall_clock)
        self.scanned = scanned
        self.paused_s = 0.0

    def read_host(self, read_locks: bool) -> Any:
        return self._paused(lambda: super(CaseHost, self).read_host(read_locks))

    def scan_descriptors(
        self, keys: frozenset[InodeKey], names: Names | None = None
    ) -> DescriptorScan:
        if self.scanned is not None and keys <= self.scanned[0]:
            return self.scanned[1]  # a full walk: all a walk by names would find, and more
        return self._paused(lambda: super(CaseHost, self).scan_descriptors(keys, names))

    def _paused(self, read: Callable[[], T]) -> T:
        started = time.perf_counter()
        with paused_deadline():
            found = read()
        self.paused_s += time.perf_counter() - started
        return found


def timed_inspect(
    target: Path,
    format_name: str,
    scanned: tuple[frozenset[InodeKey], DescriptorScan] | None = None,
) -> tuple[Finding, float]:
    """The finding, and the time the case's own work took (the host-wide reads left out).

    `scanned` lends a descriptor scan of these inodes, as one run's scan serves all its locks:
    the generated cases rewrite the same files in place (same inodes) and nothing else opens
    them.
    """
    host = CaseHost(scanned)
    finding, seconds = within_deadline(lambda: inspect(target, format_name, host))
    return finding, seconds - host.paused_s


def inspect(path: Path, format_name: str, host: HostReader) -> Finding:
    claim = read_claim(str(path), format_name, host.pid_max)
    snapshot = host.capture(request_for([claim]))
    return classify("hostile", claim, gather(claim, snapshot), POLICY, datetime.now(UTC))


# ---- the fixed cases --------------------------------------------------------------------------

Make = Callable[[Path, Processes], None]


def write(content: bytes | str) -> Make:
    data = content.encode() if isinstance(content, str) else content
    return lambda record, _: record.write_bytes(data)


def record_of(build: Callable[[Processes], object]) -> Make:
    return lambda record, procs: record.write_text(json.dumps(build(procs)))


def symlink_to(target: str) -> Make:
    return lambda record, _: record.symlink_to(target)


def fifo(record: Path, _: Processes) -> None:
    os.mkfifo(record)


def unix_socket(record: Path, _: Processes) -> None:
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(record))


def sparse_gibibyte(record: Path, _: Processes) -> None:
    with open(record, "wb") as handle:
        handle.truncate(1 << 30)


def nobody_owns_in_sticky_dir(record: Path, procs: Processes) -> None:
    """A record in a /tmp-like directory, written by another user, naming root's live child."""
    shared = _in_directory_of_mode(record, 0o1777)
    shared.write_text(json.dumps({"pid": procs.live}))
    os.chown(shared, NOBODY, NOBODY)


def world_writable_record(record: Path, procs: Processes) -> None:
    record.write_text(json.dumps({"pid": procs.dead}))
    record.chmod(0o666)


def in_world_writable_directory(record: Path, procs: Processes) -> None:
    shared = _in_directory_of_mode(record, 0o777)
    shared.write_text(json.dumps({"pid": procs.dead}))


def through_users_symlink(record: Path, procs: Processes) -> None:
    """The record's directory is reached through a link a user owns in a world-writable dir."""
    parent, inside = _store_directory(record)
    real = parent.with_name(parent.name + ".real")
    parent.rename(real)
    shared = real.with_name(real.name + ".shared")
    shared.mkdir(mode=0o1777)
    shared.chmod(0o1777)
    link = shared / "link"
    link.symlink_to(real)
    os.lchown(link, NOBODY, NOBODY)
    parent.symlink_to(link)  # the configured path now goes ... -> shared/link -> real
    (real / inside).write_text(json.dumps({"pid": procs.dead}))


def through_roots_symlink(record: Path, procs: Processes) -> None:
    """Like /var/run -> /run: a root-owned link in a private directory is followed."""
    parent, inside = _store_directory(record)
    real = parent.with_name(parent.name + ".real")
    parent.rename(real)
    parent.symlink_to(real)
    (real / inside).write_text(json.dumps({"pid": procs.dead}))


def _store_directory(record: Path) -> tuple[Path, Path]:
    """The directory holding the lock (above an mkdir LOCK directory), and the record's path
    relative to it."""
    parent = record.parent.parent if record.parent.name == "LOCK" else record.parent
    return parent, record.relative_to(parent)


def _in_directory_of_mode(record: Path, mode: int) -> Path:
    """Give the record's directory `mode`; the record stays where it is."""
    record.parent.chmod(mode)
    return record


def mtime_far_future(record: Path, procs: Processes) -> None:
    record.write_text(json.dumps({"pid": procs.live}))
    os.utime(record, (2**40, 2**40))


def written_before_its_process(record: Path, procs: Processes) -> None:
    """A bare PID whose file is older than the live process it names: a reused PID."""
    record.write_text(f"{procs.live}\n")
    created = psutil.Process(procs.live).create_time()
    os.utime(record, (created - 60, created - 60))


def many_keys(record: Path, procs: Processes) -> None:
    """Just under 64 KiB of keys with one repeated at the very end (a quadratic check hangs)."""
    keys = [f'"k{index}": {index}' for index in range(5400)]
    record.write_text("{" + ", ".join([*keys, f'"pid": {procs.live}', '"k0": 1']) + "}")


NESTED_1000 = '{"pid": ' + "[" * 1000 + "]" * 1000 + "}"
FIVE_THOUSAND_DIGITS = "9" * 5000
ANOTHER_BOOT = "00000000-0000-4000-8000-000000000000"

# (name, what to put there, the verdicts allowed). Controls prove the pipeline can say held
# and stale at all, so the hostile cases' "never" means something.
FIXED: list[tuple[str, Make, set[State]]] = [
    ("FIFO", fifo, set()),
    ("symlink to /dev/zero", symlink_to("/dev/zero"), set()),
    ("symlink to /proc/kcore", symlink_to("/proc/kcore"), set()),
    ("symlink to /etc/shadow", symlink_to("/etc/shadow"), set()),
    ("dangling symlink", symlink_to("/nonexistent/record"), set()),
    ("directory", lambda record, _: record.mkdir(), set()),
    ("socket", unix_socket, set()),
    ("empty file", write(b""), set()),
    ("64 KiB + 1", write(b"1" * (64 * 1024 + 1)), set()),
    ("sparse 1 GiB", sparse_gibibyte, set()),
    ("JSON nested 1000 deep", write(NESTED_1000), set()),
    ("5000-digit PID in JSON", write('{"pid": ' + FIVE_THOUSAND_DIGITS + "}"), set()),
    ("5000-digit bare PID", write(FIVE_THOUSAND_DIGITS), set()),
    ("NaN", write('{"pid": NaN}'), set()),
    ("Infinity", write('{"pid": Infinity}'), set()),
    (
        "duplicate keys",
        lambda record, p: record.write_text(f'{{"pid": {p.live}, "pid": {p.dead}}}'),
        set(),
    ),
    ("pid true", write('{"pid": true}'), set()),
    ("pid 0", write("0\n"), set()),
    ("pid -1", write('{"pid": -1}'), set()),
    ("pid 1", write("1"), set()),
    ("pid as float", record_of(lambda p: {"pid": float(p.live)}), set()),
    ("pid in Arabic-Indic digits", write("\u0661\u0662\u0663"), set()),
    ("invalid UTF-8", write(b"\xff\xfe123"), set()),
    ("NUL inside the PID", write(b"12\x0034"), set()),
    ("PID then junk", write("123abc"), set()),
    ("JSON array", write("[1234]"), set()),
    ("boot id that is not one", record_of(lambda p: {"pid": p.dead, "boot_id": "x"}), set()),
    ("start ticks in superscript", record_of(lambda p: {"pid": p.live, "start_ticks": "²"}), set()),
    (
        "time past year 9999",
        record_of(lambda p: {"pid": p.live, "startedAt": "9999-12-31T23:59:59-01:00"}),
        set(),
    ),
    ("time as 400-digit number", write('{"pid": 1234, "startedAt": 1' + "0" * 400 + "}"), set()),
    ("64 KiB of keys", many_keys, set()),
    ("owned by nobody in a sticky world-writable dir", nobody_owns_in_sticky_dir, set()),
    ("world-writable record", world_writable_record, set()),
    ("record in a world-writable dir", in_world_writable_directory, set()),
    ("parent reached through a user's symlink", through_users_symlink, set()),
    ("file older than the process it names", written_before_its_process, set()),
    ("mtime in year 36812", mtime_far_future, {State.HELD}),
    ("control: live holder", record_of(lambda p: {"pid": p.live}), {State.HELD}),
    ("control: dead holder", record_of(lambda p: {"pid": p.dead}), {State.STALE}),
    (
        "control: another boot",
        record_of(lambda p: {"pid": p.live, "boot_id": ANOTHER_BOOT}),
        {State.STALE},
    ),
    ("control: parent through root's symlink", through_roots_symlink, {State.STALE}),
]
SAFE_ANSWERS = {State.FREE, State.UNKNOWN}


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda layout: layout.name)
@pytest.mark.parametrize(("name", "make", "allowed"), FIXED, ids=[case[0] for case in FIXED])
def test_fixed_hostile_record_is_never_believed(
    tmp_path: Path,
    processes: Processes,
    figures: Figures,
    layout: Layout,
    name: str,
    make: Make,
    allowed: set[State],
) -> None:
    target, record = layout.place(tmp_path)
    make(record, processes)
    figure = figures.row("1 hostile records (fixed)")
    try:
        finding, seconds = timed_inspect(target, layout.format)
    except BaseException:
        figure.count(0.1, failed=True)
        raise
    expected = allowed if name.startswith("control") else SAFE_ANSWERS | allowed
    ok = finding.state in expected and bool(finding.reason)
    figure.count(seconds, failed=not ok)
    assert ok, f"{name} as {layout.name}: {finding.state} ({finding.reason})"


CLI_CASES = [
    ("FIFO", fifo),
    ("symlink to /dev/zero", symlink_to("/dev/zero")),
    ("JSON nested 1000 deep", write(NESTED_1000)),
    ("owned by nobody in a sticky world-writable dir", nobody_owns_in_sticky_dir),
]


@pytest.mark.parametrize(("name", "make"), CLI_CASES, ids=[case[0] for case in CLI_CASES])
def test_cli_answers_unknown_for_hostile_record(
    tmp_path: Path, processes: Processes, figures: Figures, name: str, make: Make
) -> None:
    target, record = LAYOUTS[0].place(tmp_path)
    make(record, processes)
    code, document = run_json("inspect", str(target), "--format", "owner-record")
    finding = document["locks"][0]
    figures.row("1 hostile records (CLI)").count(0.0, failed=finding["state"] != "unknown")
    assert (code, finding["state"]) == (3, "unknown"), document
    assert finding["reason"]


# ---- hypothesis: 10,000 generated records ------------------------------------------------------

DIRECTORY_MODES = (0o755, 0o1777, 0o777)
PID_SLOTS = ("live", "dead", "self", "one", "zero", "max", "over", "random")
TEXT_KEYS = (
    "pid",
    "PID",
    "owner_pid",
    "role",
    "host",
    "startedAt",
    "started_at",
    "boot_id",
    "start_ticks",
    "pid_namespace",
    "user",
    "acquired_at",
    "x",
)


def pid_value(procs: Processes, slot: str, random_int: int) -> int:
    return {
        "live": procs.live,
        "dead": procs.dead,
        "self": os.getpid(),
        "one": 1,
        "zero": 0,
        "max": procs.pid_max,
        "over": procs.pid_max + 1,
    }.get(slot, random_int)


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),
    st.text(max_size=12),
    st.sampled_from(
        [
            "2026-12-02T10:00:00Z",
            "0001-01-01T00:00:00+01:00",
            "9999-12-31T23:59:59",
            ANOTHER_BOOT,
            "²",
            "١٢",
            " 42 ",
            "1e3",
            "-0",
        ]
    ),
)
# Flat containers are enough to reach every type check; deep nesting has its fixed cases.
values = (
    scalars
    | st.lists(scalars, max_size=2)
    | st.dictionaries(st.text(max_size=3), scalars, max_size=2)
)


@st.composite
def hostile_records(draw: st.DrawFn) -> tuple[str, object]:
    """(style, description) - the bytes are built in the test with the live PIDs filled in."""
    # Weighted towards records that name a PID (where held and stale come from); a record that
    # names none makes the run scan every descriptor on the host, whose cost is the host's.
    style = draw(st.sampled_from(["json"] * 9 + ["key-value"] * 4 + ["bare"] * 4 + ["bytes"] * 3))
    if style == "bytes":
        return style, draw(st.binary(max_size=200))
    if style == "bare":
        return style, (
            draw(st.sampled_from(PID_SLOTS)),
            draw(st.integers(-5, 2**32)),
            draw(st.sampled_from(["", "\n", " \n", "\r\n", "\t"])),
        )
    fields: dict[str, object] = {}
    if draw(st.integers(0, 9)) < 8:
        fields["pid"] = ("slot", draw(st.sampled_from(PID_SLOTS)), draw(st.integers(-5, 2**32)))
    else:
        fields["pid"] = draw(values)
    for key in draw(st.lists(st.sampled_from(TEXT_KEYS), max_size=5)):
        if key in ("pid", "PID", "owner_pid") and draw(st.booleans()):
            fields[key] = ("slot", draw(st.sampled_from(PID_SLOTS)), draw(st.integers(-5, 2**32)))
        else:
            fields[key] = draw(values)
    return style, fields


def render(style: str, description: object, procs: Processes) -> bytes:
    if style == "bytes":
        assert isinstance(description, bytes)
        return description
    if style == "bare":
        slot, random_int, ending = description  # type: ignore[misc]
        return f"{pid_value(procs, slot, random_int)}{ending}".encode()
    assert isinstance(description, dict)
    fields = {
        key: pid_value(procs, value[1], value[2]) if isinstance(value, tuple) else value
        for key, value in description.items()
    }
    if style == "json":
        return json.dumps(fields).encode()
    return "\n".join(f"{key}={value}" for key, value in fields.items()).encode()


def why_unjustified(
    finding: Finding,
    data: bytes,
    mode: int,
    owner: int,
    directory_mode: int,
    procs: Processes,
    boot_id: str,
) -> str | None:
    """An oracle independent of lockwarden's parser: why this held/stale is wrong, or None."""
    if finding.state not in TRUSTED_VERDICTS:
        return None
    if mode & stat.S_IWOTH or (directory_mode & stat.S_IWOTH and not directory_mode & stat.S_ISVTX):
        return "believed a record that anyone could have written"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "believed a record that is not UTF-8"
    if "NaN" in text or "Infinity" in text:
        return "believed a record with NaN"
    if finding.state is State.STALE and ANOTHER_BOOT in text and boot_id != ANOTHER_BOOT:
        return None  # a well-formed boot id of another boot, in a trusted file: proof
    numbers = {int(found) for found in re.findall(r"(?<![\d.\-+eE])\d{1,10}(?![\d.eE])", text)}
    pid = finding.holder.pid if finding.holder else _pid_in_reason(finding)
    if pid is None or pid not in numbers or not 2 <= pid <= procs.pid_max:
        return f"named PID {pid}, which the record does not say"
    alive = psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    if finding.state is State.STALE:
        if not alive:
            return None
        if "tick" in (finding.proof or "") and "start_ticks" in text:
            return None
        return f"called live PID {pid} stale: {finding.proof}"
    if not alive:
        if finding.holder is not None and finding.holder.start_ticks is not None:
            return None  # it ran when judged (its start ticks were read) and exited since
        return f"called dead PID {pid} held"
    process_uid = psutil.Process(pid).uids().real
    if owner not in (0, process_uid):
        return f"believed uid {owner}'s record about uid {process_uid}'s PID {pid}"
    if "start_ticks" in text or "boot_id" in text:
        return None if finding.holder is not None else "held without a holder"
    return None


def _pid_in_reason(finding: Finding) -> int | None:
    found = re.search(r"PID (\d+)", finding.proof or finding.reason)
    return int(found.group(1)) if found else None


def test_generated_records_are_never_wrongly_believed(
    arenas: dict[tuple[str, int], tuple[Path, Path]], processes: Processes, figures: Figures
) -> None:
    figure = figures.row("1 hostile records (hypothesis)")
    host = HostReader(wall_clock)
    boot_id = host.read_host(read_locks=False)[0].boot_id
    keys = frozenset(
        (status.st_dev, status.st_ino)
        for paths in arenas.values()
        for status in map(os.lstat, paths)
    )
    scanned = (keys, host.scan_descriptors(keys))

    @settings(
        max_examples=HYPOTHESIS_RECORDS,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(
        record=hostile_records(),
        layout=st.sampled_from(LAYOUTS),
        mode=st.sampled_from([0o644, 0o600, 0o664, 0o666]),
        owner=st.sampled_from([0, NOBODY]),
        directory_mode=st.sampled_from(DIRECTORY_MODES),
    )
    def check(
        record: tuple[str, object], layout: Layout, mode: int, owner: int, directory_mode: int
    ) -> None:
        target, path = arenas[(layout.name, directory_mode)]
        data = render(*record, processes)
        path.write_bytes(data)
        path.chmod(mode)
        os.chown(path, owner, owner)
        try:
            finding, seconds = timed_inspect(target, layout.format, scanned)
        except BaseException:
            figure.count(0.1, failed=True)
            raise
        wrong = why_unjustified(finding, data, mode, owner, directory_mode, processes, boot_id)
        figure.count(seconds, failed=wrong is not None)
        assert wrong is None, f"{wrong}: {finding.state} {finding.reason} {data[:200]!r}"

    check()
    # the promise is a count: hold hypothesis to it
    assert figure.cases >= HYPOTHESIS_RECORDS, f"hypothesis ran only {figure.cases} records"


@pytest.fixture(scope="module")
def arenas(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, int], tuple[Path, Path]]:
    """One directory per layout and directory mode, made once: each case rewrites the record
    (making and removing 10,000 directories would cost more than inspecting them)."""
    made: dict[tuple[str, int], tuple[Path, Path]] = {}
    for layout in LAYOUTS:
        for directory_mode in DIRECTORY_MODES:
            root = tmp_path_factory.mktemp("arena")
            target, record = layout.place(root)
            record.write_bytes(b"")
            record.parent.chmod(directory_mode)
            made[(layout.name, directory_mode)] = (target, record)
    return made
