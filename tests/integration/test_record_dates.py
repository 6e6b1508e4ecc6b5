"""A record's start time after the run's clock dates nothing: a clock stepped back since it was
written, or a local time written without its offset, east of UTC. What is left is the holder's
running time, an upper bound: a long-lived process that took the lock a moment ago must not be
paged with that as an exact age.

Seeded differential: real processes run past the budget, then each takes a flock on its own
`key=value` record file (or writes a JSON record file, an existence lock the file's mtime
dates) with a start time chosen before or after its take, in one of the shapes records use. One
`--once` run judges them all against what the test knows: every hold is seconds old.

And the other way: a holder that touches its lock while it works (a heartbeat on the file or
directory, a progress file written into its lock directory) moves the lock's mtime, not the
start its record gives; the hold must still escalate on the record's date."""

from __future__ import annotations

import json
import os
import random
import sys
import time
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from conftest import Children, run_json, write_config

WARN_AFTER = 3
LOCKS = 6
DELAY = WARN_AFTER + 2  # how long each holder runs before it takes its lock

# The end of a holder's script: takes its lock, a flock on a key=value record (`kv-flock`) or a
# JSON record file (an existence lock), dated `stamp`; prints "ready", then sleeps.
TAKE_AND_RECORD = """
if style == "kv-flock":
    handle = open(path, "w")
    fcntl.flock(handle, fcntl.LOCK_EX)
    handle.write(f"pid={os.getpid()}\\nacquired_at={stamp}\\n")
    handle.flush()
else:
    with open(path, "w") as handle:
        json.dump({"pid": os.getpid(), "startedAt": stamp}, handle)
print("ready", flush=True)
time.sleep(120)
"""

# Runs `delay` seconds (past the budget), then takes its lock and writes its record, dated
# `offset` seconds from the take in `shape`; prints "ready".
TAKE_LATE = (
    """
import fcntl, json, os, sys, time
from datetime import datetime, timedelta, timezone
path, style, shape, offset, delay = sys.argv[1:6]
time.sleep(float(delay))
moment = datetime.now(timezone.utc) + timedelta(seconds=float(offset))
if shape == "unix":
    stamp = str(int(moment.timestamp()))
elif shape == "unix-ms":
    stamp = str(int(moment.timestamp() * 1000))
elif shape == "naive":
    stamp = moment.replace(tzinfo=None).isoformat(timespec="seconds")
elif shape == "east":
    stamp = moment.astimezone(timezone(timedelta(hours=2))).isoformat(timespec="seconds")
else:
    stamp = moment.isoformat(timespec="seconds").replace("+00:00", "Z")
"""
    + TAKE_AND_RECORD
)

SHAPES = ("rfc3339", "naive", "east", "unix", "unix-ms")
STYLES = ("kv-flock", "json-file")


def arrange(seed: int) -> list[tuple[str, str, float]]:
    """(style, shape, offset) per lock; at least one flocked record dated ahead per seed."""
    chooser = random.Random(seed)
    plan = []
    for index in range(LOCKS):
        style = "kv-flock" if index == 0 else chooser.choice(STYLES)
        future = index == 0 or chooser.random() < 0.6
        # a past date stays within the holder's life: one before its start reads as a reused PID
        offset = chooser.uniform(60, 3 * 3600) if future else -chooser.uniform(0, DELAY - 2)
        plan.append((style, chooser.choice(SHAPES), offset))
    return plan


def config(tmp_path: Path, count: int) -> str:
    locks = "".join(
        f'[[lock]]\nname = "job{index}"\npath = "{tmp_path / f"job{index}.lock"}"\n'
        'format = "owner-record"\n\n'
        for index in range(count)
    )
    text = (
        f'[defaults]\nwarn_after = "{WARN_AFTER}s"\ncritical_after = "1h"\n\n{locks}'
        f'[state]\npath = "{tmp_path / "state" / "state.jsonl"}"\n'
    )
    return write_config(tmp_path / "config.toml", text)


@pytest.mark.parametrize("seed", range(4))
def test_a_record_dated_after_the_run_never_dates_the_hold(
    seed: int, tmp_path: Path, children: Children
) -> None:
    plan = arrange(seed)
    holders = [
        children.start(
            [
                sys.executable,
                "-c",
                TAKE_LATE,
                str(tmp_path / f"job{index}.lock"),
                style,
                shape,
                str(offset),
                str(DELAY),
            ]
        )
        for index, (style, shape, offset) in enumerate(plan)
    ]
    for holder in holders:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
    taken_by = datetime.now(UTC)
    _, document = run_json("--once", "--config", config(tmp_path, len(plan)))
    checked_at = datetime.fromisoformat(document["checked_at"].replace("Z", "+00:00"))
    for index, (style, shape, offset) in enumerate(plan):
        finding: dict[str, Any] = document["locks"][index]
        context = f"seed {seed}: job{index} {style} {shape} {offset:+.0f}s: {finding}"
        assert [h["pid"] for h in finding["holders"]] == [holders[index].pid], context
        dated_after_run = taken_by + timedelta(seconds=offset) > checked_at + timedelta(seconds=1)
        if dated_after_run:
            # the truth: held for seconds, well within the budget; no date of its own but the
            # file's (an existence lock's mtime) can say how long
            assert finding["state"] == "held", context
            assert finding["held"]["bound"] != "exact" or style == "json-file", context
        elif style == "kv-flock":
            assert finding["held"]["bound"] == "exact", context


# Takes its lock (a directory with owner.json, or a JSON file), records its start, prints
# "ready", then touches the lock every 0.2 s as `touch` says.
HEARTBEAT = """
import json, os, sys, time
from datetime import datetime, timezone
path, style, touch = sys.argv[1:4]
record = {"pid": os.getpid(), "startedAt": datetime.now(timezone.utc).isoformat()}
if style == "dir":
    os.mkdir(path)
with open(os.path.join(path, "owner.json") if style == "dir" else path, "w") as handle:
    json.dump(record, handle)
print("ready", flush=True)
for tick in range(600):
    time.sleep(0.2)
    if touch == "utime":
        os.utime(path)
    elif touch == "entry":
        with open(os.path.join(path, f"progress{tick % 2}"), "w") as handle:
            handle.write(str(tick))
"""

TOUCHES = {"dir": ("none", "utime", "entry"), "file": ("none", "utime")}


@pytest.mark.parametrize("seed", range(3))
def test_a_lock_its_holder_touches_is_dated_by_its_record(
    seed: int, tmp_path: Path, children: Children
) -> None:
    chooser = random.Random(seed)
    styles = ["dir", "file"] + [chooser.choice(("dir", "file")) for _ in range(LOCKS - 2)]
    plan = [
        (style, chooser.choice(TOUCHES[style][1:] if index < 2 else TOUCHES[style]))
        for index, style in enumerate(styles)
    ]
    holders = [
        children.start(
            [sys.executable, "-c", HEARTBEAT, str(tmp_path / f"job{index}.lock"), style, touch]
        )
        for index, (style, touch) in enumerate(plan)
    ]
    for holder in holders:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
    time.sleep(DELAY)  # the truth: every lock held DELAY seconds at least, past its budget
    _, document = run_json("--once", "--config", config(tmp_path, len(plan)))
    for index, (style, touch) in enumerate(plan):
        finding: dict[str, Any] = document["locks"][index]
        context = f"seed {seed}: job{index} {style} touched {touch}: {finding}"
        assert [h["pid"] for h in finding["holders"]] == [holders[index].pid], context
        assert finding["state"] == "held_too_long", context
        assert finding["held"]["bound"] == "exact", context
        assert finding["held"]["seconds"] >= DELAY, context


# A record's time written without an offset is a wall-clock time in a zone it does not name:
# `datetime.now()` writes the host's local time, `datetime.utcnow()` UTC. Starts, waits `delay`
# seconds, takes its lock (a flock on a key=value record, or a JSON record file, an existence
# lock) dated now in `shape`, and prints "ready". Run with the host's zone in TZ, as the holders
# of that host are.
TAKE_IN_ZONE = (
    """
import fcntl, json, os, sys, time
from datetime import datetime, timezone
path, style, shape, delay = sys.argv[1:5]
time.sleep(float(delay))
if shape == "naive-local":
    stamp = datetime.now().isoformat(timespec="seconds")
elif shape == "local-as-utc":  # an offset written wrong: the local time, marked UTC
    stamp = datetime.now().isoformat(timespec="seconds") + "Z"
elif shape == "naive-utc":
    stamp = datetime.now(timezone.utc).replace(tzinfo=None).isoformat(timespec="seconds")
else:
    stamp = datetime.now().astimezone().isoformat(timespec="seconds")
"""
    + TAKE_AND_RECORD
)

# POSIX TZ strings (no zone database needed): UTC, and local time 5 h behind, 9 h and 5 h 30 m
# ahead of it; the hour is the local time's offset from UTC.
ZONES = {"UTC0": 0.0, "<-05>5": -5.0, "<+09>-9": 9.0, "<+0530>-5:30": 5.5}
NAIVE_SHAPES = ("naive-local", "naive-utc", "aware")


def _judged_in_zone(
    plan: list[tuple[str, str, str]], zone: str, label: str, tmp_path: Path, children: Children
) -> list[tuple[dict[str, Any], str]]:
    """Starts a TAKE_IN_ZONE holder per (style, shape, delay) of `plan` in `zone`, runs
    `--once` there, and checks each finding against the truth: its holder named, held (taken a
    moment ago) or held_too_long (DELAY seconds ago), never older than that. Each finding, with
    what it was."""
    holders = [
        children.start(
            [sys.executable, "-c", TAKE_IN_ZONE, str(tmp_path / f"job{index}.lock"), *spec],
            env={**os.environ, "TZ": zone},
        )
        for index, spec in enumerate(plan)
    ]
    for holder in holders:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
    _, document = run_json("--once", "--config", config(tmp_path, len(plan)), TZ=zone)
    judged = []
    for index, (style, shape, delay) in enumerate(plan):
        finding: dict[str, Any] = document["locks"][index]
        context = f"{label}: TZ={zone} job{index} {style} {shape} delay {delay}: {finding}"
        assert [h["pid"] for h in finding["holders"]] == [holders[index].pid], context
        young = delay == str(DELAY)  # the truth: taken a moment ago, else DELAY seconds ago
        assert finding["state"] == ("held" if young else "held_too_long"), context
        assert finding["held"]["seconds"] <= (2 if young else DELAY + 3), context
        judged.append((finding, context))
    return judged


@pytest.mark.parametrize("seed", range(4))
def test_a_time_without_an_offset_never_pages_a_young_hold_in_any_zone(
    seed: int, tmp_path: Path, children: Children
) -> None:
    """Seeded differential over the host's zone (one per seed: UTC, west, east, a half-hour
    zone) and, per lock, the record's style, its time's shape (naive local, naive UTC, with
    its offset) and its age: taken at once (held DELAY seconds, past the budget, when the run
    looks) or after DELAY seconds (held a moment). A naive local time west of UTC read as UTC
    made a moment's hold hours old, and paged it. A reading of such a time is possible only
    if it is not in the future, nor before its holder started (these holders started seconds
    before they wrote it, and the zones are hours apart): one reading is left, and the report
    dates the hold exactly by it, pages a hold past its budget, never one a moment old."""
    zone = list(ZONES)[seed]
    chooser = random.Random(seed)
    plan = [
        (
            "kv-flock" if index == 0 else chooser.choice(STYLES),
            NAIVE_SHAPES[index % 3] if index < 3 else chooser.choice(NAIVE_SHAPES),
            str(chooser.choice((0, DELAY))),
        )
        for index in range(LOCKS)
    ]
    for finding, context in _judged_in_zone(plan, zone, f"seed {seed}", tmp_path, children):
        assert finding["held"]["bound"] == "exact", context


# Keeps a pidfile with its PID (no date: its mtime is all that dates it) as `how` says, and
# prints "ready" once it first has it: "touch" writes it once and touches it every 0.2 s, a
# heartbeat (one file, held throughout); "retake" makes it anew for each 0.5 s job and
# removes it for 0.3 s between jobs (another take each time, by the same process).
KEEPS_PIDFILE = """
import os, sys, time
path, how = sys.argv[1:3]
with open(path, "w") as handle:
    handle.write(f"{os.getpid()}\\n")
print("ready", flush=True)
for tick in range(600):
    if how == "touch":
        time.sleep(0.2)
        os.utime(path)
        continue
    time.sleep(0.5)
    os.unlink(path)
    time.sleep(0.3)
    with open(path + ".new", "w") as handle:
        handle.write(f"{os.getpid()}\\n")
    os.replace(path + ".new", path)
"""


@pytest.mark.parametrize("how", ["touch", "retake"])
def test_a_pidfile_dated_by_its_mtime_is_held_at_least_since_then_and_never_chained(
    how: str, tmp_path: Path, children: Children
) -> None:
    """Nothing but its mtime dates a pidfile: the file exists at least since its last write,
    which is what the report says (it said that age exactly). The runs' sightings name its
    holder's PID, not the take: a holder that takes it anew for every job, the same PID each
    time (and a new file, often with the same inode number), was chained into one long hold
    and paged at the second run. Neither that nor a touched one is paged on sightings."""
    lock = tmp_path / "job.pid"
    holder = children.start([sys.executable, "-c", KEEPS_PIDFILE, str(lock), how])
    assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
    (tmp_path / "state").mkdir(mode=0o700)
    text = (
        f'[defaults]\nwarn_after = "{WARN_AFTER}s"\ncritical_after = "1h"\n\n'
        f'[[lock]]\nname = "job"\npath = "{lock}"\nformat = "pidfile"\n\n'
        f'[state]\npath = "{tmp_path / "state" / "state.jsonl"}"\n'
    )
    configured = write_config(tmp_path / "config.toml", text)
    for run in range(4):
        if run:
            time.sleep(DELAY / 2)  # the runs span twice the budget
        _, document = run_json("--once", "--config", configured)
        [seen] = document["locks"]
        assert seen["state"] in ("held", "free"), seen  # each take, each touch a moment old
        if seen["state"] == "held":
            assert [h["pid"] for h in seen["holders"]] == [holder.pid], seen
            assert seen["held"]["bound"] == "at_least" and seen["held"]["seconds"] < 2, seen
        elif how == "touch":
            pytest.fail(f"a pidfile held throughout read free: {seen}")


@pytest.mark.parametrize("zone", list(ZONES))
def test_a_process_started_after_a_naive_record_is_never_named_its_holder(
    zone: str, tmp_path: Path, children: Children
) -> None:
    """A record written an hour ago, with no start ticks, names a PID a process took a moment
    ago: probably a reused PID, `unknown`, never that process as the holder. With the record's
    time written without an offset, in every shape and zone: a reading of it ahead of the clock
    (a naive UTC time read as local time, west of UTC) must not hide that the process started
    after every reading that can be true."""
    written_at = datetime.now(UTC) - timedelta(hours=1)
    local = written_at.astimezone(_zone(zone))
    stamps = {
        "naive-local": local.replace(tzinfo=None).isoformat(timespec="seconds"),
        "naive-utc": written_at.replace(tzinfo=None).isoformat(timespec="seconds"),
        "aware": local.isoformat(timespec="seconds"),
    }
    newcomer = children.start([sys.executable, "-c", "import time; time.sleep(120)"])
    for index, stamp in enumerate(stamps.values()):
        record = {"pid": newcomer.pid, "startedAt": stamp}
        (tmp_path / f"job{index}.lock").write_text(json.dumps(record))
    _, document = run_json("--once", "--config", config(tmp_path, len(stamps)), TZ=zone)
    for shape, finding in zip(stamps, document["locks"], strict=True):
        context = f"TZ={zone} {shape} {stamps[shape]}: {finding}"
        assert finding["state"] == "unknown", context
        assert finding["unknown_cause"] == "pid_reuse_suspected", context
        assert finding["holders"] == [], context


def _zone(posix: str) -> timezone:
    return timezone(timedelta(hours=ZONES[posix]))


def _fold_zone(std: int, since: timedelta) -> str:
    """A POSIX TZ whose daylight-saving time (one hour ahead of `std` hours from UTC) ended
    `since` ago: its wall clock is in the hour that repeats. The rule's day is Julian (Jn,
    February 29 never counted) and its time the daylight-saving wall clock's."""
    ended = datetime.now(UTC) - since + timedelta(hours=std + 1)
    day = ended.timetuple().tm_yday
    if ended.month > 2 and ended.year % 4 == 0 and (ended.year % 100 or ended.year % 400 == 0):
        day -= 1
    began = day - 100 if day > 100 else day + 100  # after the end: a southern summer, over new year
    names = f"<{std:+03d}>{-std}<{std + 1:+03d}>"
    return f"{names},J{began}/0,J{day}/{ended:%H:%M:%S}"


@pytest.mark.parametrize("seed", range(4))
def test_a_naive_local_time_in_the_hour_that_repeats_never_pages_a_young_hold(
    seed: int, tmp_path: Path, children: Children
) -> None:
    """The hour a daylight-saving time ends shows every wall-clock time twice: a holder's
    `datetime.now()` written then names either moment, an hour apart. Read only as the first,
    a hold of a moment was held an hour at least, and its holder's running time (past the
    budget) became that `at least`: a page. Seeded differential as above, over a zone west and
    one east of UTC whose daylight-saving time ended 20 minutes ago."""
    zone = _fold_zone(-5 if seed % 2 else 1, timedelta(minutes=20))
    chooser = random.Random(seed)
    plan = [
        (
            "kv-flock" if index == 0 else chooser.choice(STYLES),
            "naive-local" if index < 2 else chooser.choice(NAIVE_SHAPES),
            str(DELAY) if index == 0 else str(chooser.choice((0, DELAY))),
        )
        for index in range(LOCKS)
    ]
    _judged_in_zone(plan, zone, f"seed {seed}", tmp_path, children)


# A zone 30 s east of UTC: the UTC reading of a naive local time written there is ahead of the
# clock for 30 s, as one written in a zone hours east is for hours.
EAST_30S = "<+000030>-0:00:30"
LATER_BUDGET = 10  # seconds: past it at the first run, and far past the UTC reading at the second


def test_a_naive_local_time_east_of_utc_stays_exact_once_its_utc_reading_is_past(
    tmp_path: Path, children: Children
) -> None:
    """East of UTC, a naive local time read as UTC is ahead of the clock when written: the
    first run dates the hold exactly by the local reading and pages it. Once the UTC reading
    has passed too (hours later, in a real zone), both were possible: the hold read `at least`
    since the UTC one, a moment, and the held_too_long lock read held, its incident resolved,
    while the same holder held it all along. The UTC reading is after the record file was
    written, so it was never the time; the hold stays exact and past its budget."""
    styles = STYLES
    holders = [
        children.start(
            [
                sys.executable,
                "-c",
                TAKE_IN_ZONE,
                str(tmp_path / f"job{i}.lock"),
                style,
                "naive-local",
                "0",
            ],
            env={**os.environ, "TZ": EAST_30S},
        )
        for i, style in enumerate(styles)
    ]
    for holder in holders:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
    taken_by = time.monotonic()
    text = (
        f'[defaults]\nwarn_after = "{LATER_BUDGET}s"\ncritical_after = "1h"\n\n'
        + "".join(
            f'[[lock]]\nname = "job{i}"\npath = "{tmp_path / f"job{i}.lock"}"\n'
            'format = "owner-record"\n\n'
            for i in range(len(styles))
        )
        + f'[state]\npath = "{tmp_path / "state" / "state.jsonl"}"\n'
    )
    (tmp_path / "state").mkdir(mode=0o700)
    configured = write_config(tmp_path / "config.toml", text)
    for wait_until in (LATER_BUDGET + 2, 30 + 4):  # before, then after the UTC reading
        time.sleep(max(0.0, taken_by + wait_until - time.monotonic()))
        _, document = run_json("--once", "--config", configured, TZ=EAST_30S)
        for style, holder, finding in zip(styles, holders, document["locks"], strict=True):
            context = f"{style} {wait_until}s after the take: {finding}"
            assert [h["pid"] for h in finding["holders"]] == [holder.pid], context
            assert finding["state"] == "held_too_long", context
            assert finding["held"]["bound"] == "exact", context
            assert finding["held"]["seconds"] >= wait_until - 1, context


# Takes its lock (as TAKE_AND_RECORD does) dated now as `shape` says, prints "ready" once, holds
# it 0.5 s, lets go (unlocks, or removes the record file) and takes it again at once, over and
# over: a daemon that takes the lock for each short job.
RETAKES = """
import fcntl, json, os, sys, time
from datetime import datetime, timezone
path, style, shape = sys.argv[1:4]
for turn in range(400):
    if shape == "naive-local":
        stamp = datetime.now().isoformat(timespec="seconds")
    else:
        stamp = datetime.now(timezone.utc).replace(tzinfo=None).isoformat(timespec="seconds")
    if style == "kv-flock":
        handle = open(path, "w")
        fcntl.flock(handle, fcntl.LOCK_EX)
        handle.write(f"pid={os.getpid()}\\nacquired_at={stamp}\\n")
        handle.flush()
    else:
        with open(path + ".new", "w") as record:
            json.dump({"pid": os.getpid(), "startedAt": stamp}, record)
        os.rename(path + ".new", path)
    if turn == 0:
        print("ready", flush=True)
    time.sleep(0.5)
    if style == "kv-flock":
        handle.close()
    else:
        os.unlink(path)
"""

# Zones and shapes whose two readings are both past: the later one is when it was written.
BOTH_PAST = (("<+01>-1", "naive-utc"), ("<-05>5", "naive-local"), ("<+0530>-5:30", "naive-utc"))


@pytest.mark.parametrize(("zone", "shape"), BOTH_PAST)
def test_a_naive_time_of_a_lock_its_holder_takes_again_and_again_dates_each_take(
    zone: str, shape: str, tmp_path: Path, children: Children
) -> None:
    """A naive time both of whose readings are past dates the hold at least since the later
    one, which the record gives anew with each take. The runs' sightings name the holder, not
    the take: a daemon that takes the lock for each short job is seen holding it by run after
    run, and the series raised the floor of a take of a moment past the budget, a page. The
    record bounds each take; sightings raise only a floor no record gives (a file's mtime)."""
    holders = [
        children.start(
            [sys.executable, "-c", RETAKES, str(tmp_path / f"job{index}.lock"), style, shape],
            env={**os.environ, "TZ": zone},
        )
        for index, style in enumerate(STYLES)
    ]
    for holder in holders:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
    configured = config(tmp_path, len(STYLES))
    run_json("--once", "--config", configured, TZ=zone)
    time.sleep(DELAY)  # the holders held the lock all along, each take for 0.5 s
    _, document = run_json("--once", "--config", configured, TZ=zone)
    for style, holder, finding in zip(STYLES, holders, document["locks"], strict=True):
        context = f"TZ={zone} {style} {shape}: {finding}"
        if finding["state"] == "free":
            continue  # seen between two takes: nothing to say of a take
        assert [h["pid"] for h in finding["holders"]] == [holder.pid], context
        assert finding["state"] == "held", context
        assert finding["held"]["seconds"] <= 2, context


@pytest.mark.parametrize(
    ("shape", "holder_zone"),
    [("naive-local", "<-05>5"), ("local-as-utc", "<-05>5"), ("naive-local", "<+09>-9")],
)
def test_a_record_dated_before_its_holder_started_never_dates_its_hold(
    shape: str, holder_zone: str, tmp_path: Path, children: Children
) -> None:
    """A holder whose zone is not lockwarden's (a user's shell with its own TZ, a container's
    zone; lockwarden under systemd reads /etc/localtime), or that writes its local time marked
    UTC, dates its take hours off. Hours before the holder started, that time cannot be when
    it took the lock; the holder's running time stood in for it as an exact age, and a take of
    a moment by a holder that ran DELAY seconds first was paged. Earlier than the holder's
    start, a record's time dates nothing."""
    holders = [
        children.start(
            [sys.executable, "-c", TAKE_IN_ZONE, str(tmp_path / f"job{index}.lock"), *take],
            env={**os.environ, "TZ": holder_zone},
        )
        for index, take in enumerate((style, shape, str(DELAY)) for style in STYLES)
    ]
    for holder in holders:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
    _, document = run_json("--once", "--config", config(tmp_path, len(STYLES)), TZ="UTC0")
    for index, style in enumerate(STYLES):
        finding: dict[str, Any] = document["locks"][index]
        context = f"{shape} in {holder_zone}, {style}: {finding}"
        if style == "json-file":  # no kernel lock: a PID that started after its record may
            assert finding["state"] in ("held", "unknown"), context  # be another's (unknown)
            continue
        assert [h["pid"] for h in finding["holders"]] == [holders[index].pid], context
        assert finding["state"] == "held", context  # the truth: taken a moment ago
        assert finding["held"]["bound"] != "exact" or finding["held"]["seconds"] < 2, context
