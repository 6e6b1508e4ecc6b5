"""Claim + evidence + policy + now -> Finding. Pure: no /proc, no clock, no files.

`stale` is said only with proof (ARCHITECTURE.md, "Never" 2): another boot, a dead PID on this
host and PID namespace with no kernel lock left, or a PID whose start contradicts the record.
Anything less is `unknown`, with the reason.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from lockwarden.check.advice import advise_holder, call_to_act, may_be_flocked, needs_action
from lockwarden.check.identify import Evidence, holder_from_process, missing_right, processes
from lockwarden.model import (
    Bound,
    Claim,
    Finding,
    Held,
    Holder,
    Process,
    Severity,
    StaleProof,
    State,
    UnknownCause,
    Workers,
    command_text,
)
from lockwarden.support.durations import format_duration, format_limit, format_time

# Wall-clock times (a record's startedAt, a file's mtime, the boot time as "now - uptime") move
# when the clock is stepped, by any amount: a machine without an RTC boots in 1970 and writes its
# records then, before NTP steps it to today; a VM restored from a snapshot jumps forward. So a
# wall-clock comparison is never proof of staleness; a process younger than its record only makes
# the verdict `unknown` (never `held`). Start ticks (monotonic, counted from boot), boot ids and
# the program a PID runs are proof. The slack covers second-precision timestamps.
REUSE_SUSPICION_MARGIN = timedelta(seconds=5)
# A record of the holder's own start (postgres) that is far younger than the process at its PID.
PID_REUSE_MARGIN = timedelta(minutes=5)
# A record's time is taken before its file is written: a reading of it later than the file's
# mtime by more than coarse timestamps (and second-precision times) explain is not when it was.
RECORD_WRITE_MARGIN = timedelta(seconds=5)
# A recorded boot time is another boot only when it is off by more than a clock step could make
# it: both sides compute it as "now - uptime" from a wall clock that NTP may have moved.
# /proc/PID/stat truncates a process's name to 15 characters.
COMM_LENGTH = 15


@dataclass(frozen=True)
class Policy:
    """How long a lock may be held, and how bad a stale one is."""

    warn_after: float
    critical_after: float
    stale_severity: Severity = Severity.CRITICAL
    host_aliases: tuple[str, ...] = ()
    stale_after: float | None = None


@dataclass(frozen=True)
class Verdict:
    """What the evidence says about a claim, before it becomes a Finding."""

    state: State
    reason: str
    holder: Holder | None = None
    proof: str | None = None
    sharers: tuple[Holder, ...] = ()
    readers: tuple[Holder, ...] = ()
    cause: UnknownCause | None = None
    """Why, for an unknown one."""
    gone: tuple[int, ...] = ()
    """For a stale one: the recorded holder PIDs proven gone (dead, or now another process)."""


def classify(
    name: str,
    claim: Claim,
    evidence: Evidence,
    policy: Policy,
    now: datetime,
    seen_since: Mapping[str, datetime] | None = None,
    what_if: bool = False,
) -> Finding:
    """`seen_since`: for this lock, holder identity -> the first of an unbroken series of
    earlier runs that saw it held by that identity (the state journal's sighting memory).
    `what_if`: a run that journals nothing, whose `now` may ask about a later time."""
    verdict = judge(claim, evidence, policy, now)
    identity = identity_of(claim, verdict, evidence)
    first_seen = (seen_since or {}).get(identity or "")
    if what_if:
        first_seen = projected(first_seen, evidence.captured_at, now, verdict.holder)
    held_for, bound = held_duration(claim, verdict, evidence, now, first_seen)
    state, severity = grade(verdict.state, held_for, policy, bound)
    declared_limit = past_declared_limit(claim, state, held_for, bound)
    if declared_limit is not None and state is State.HELD:
        state, severity = State.HELD_TOO_LONG, Severity.WARNING
    blind = _blind_past_budget(verdict, evidence, state, held_for, bound, policy)
    if blind is not None:
        verdict, state, severity = blind, State.UNKNOWN, Severity.UNKNOWN
    return Finding(
        name=name,
        path=claim.path,
        format=claim.format,
        state=state,
        severity=severity,
        reason=explain(
            name,
            verdict,
            state,
            held_for,
            policy,
            declared_limit,
            bound,
            _upper_bound(held_for, bound, verdict, now),
            claim.format,
        ),
        held=Held.of(held_for, bound, now),
        proof=verdict.proof,
        holder=verdict.holder,
        waiters=evidence.waiters,
        sharers=verdict.sharers,
        action=action_for(state, verdict, claim),
        identity=identity,
        note=_note(claim, state),
        readers=verdict.readers,
        never_remove=claim.never_remove,
        key=claim.keys[0] if claim.keys else None,
        unattributed=evidence.unattributed,
        unknown_cause=verdict.cause if state is State.UNKNOWN else None,
        gone_pids=verdict.gone if state is State.STALE else (),
        work_seen=_work_seen(claim, verdict, evidence),
    )


def _work_seen(claim: Claim, verdict: Verdict, evidence: Evidence) -> tuple[Holder, ...]:
    """What ran below the record's holder when an earlier run saw it, still running, while
    that holder holds the lock (the capture read it only for the PID the memory names)."""
    holder = verdict.holder
    if verdict.state is not State.HELD or holder is None or holder.pid != claim.pid:
        return ()
    return evidence.work_left


DECLARE = (
    " (run it in the host's PID namespace; or, if every process that takes this lock runs in "
    "this one, say so with LOCKWARDEN_PID_NAMESPACE=complete)"
)


def _blind_past_budget(
    verdict: Verdict,
    evidence: Evidence,
    state: State,
    held_for: float | None,
    bound: Bound,
    policy: Policy,
) -> Verdict | None:
    """A kernel lock whose holder cannot be read for want of a right (or from inside a
    container) is never OK when it may be past its budget: `unknown`, naming the right. One
    held from outside lockwarden's PID namespace is `unknown` however young a holder here is:
    nothing here times the hold from outside, and stopping a holder here would not free it."""
    if state is not State.HELD or not evidence.kernel_locked:
        return None
    unnamed = evidence.unattributed
    outside = unnamed is not None and unnamed.outside and unnamed.holders > 0
    if not outside:
        if verdict.holder is not None:
            return None
        if not (evidence.unreadable_pids or evidence.nested_pid_namespace):
            return None
        if bound is Bound.AT_MOST and held_for is not None and held_for < policy.warn_after:
            return None
    how_long = (
        f"held for {bound.words}{format_duration(held_for)}"
        if held_for is not None and verdict.holder is None
        else "held for an unknown time"
    )
    why = unnamed.why if unnamed else verdict.reason
    here = [party.describe() for party in (verdict.holder, *verdict.sharers) if party is not None]
    also = f" (also held here by {', '.join(here)})" if here else ""
    return Verdict(
        State.UNKNOWN,
        f"{how_long}, maybe past its {format_duration(policy.warn_after)} budget, by a holder "
        f"lockwarden cannot name: {why}{also}",
        readers=verdict.readers,
        cause=UnknownCause.OTHER_PID_NAMESPACE
        if outside
        else _blind_cause(evidence.unreadable_pids),
    )


def judge(claim: Claim, evidence: Evidence, policy: Policy, now: datetime) -> Verdict:
    if not claim.present and claim.missing_directory:
        return Verdict(
            State.UNKNOWN,
            f"its directory {claim.missing_directory} does not exist, so the lock cannot be "
            "there: is the path right, and is its volume mounted?",
            cause=UnknownCause.MISSING_DIRECTORY,
        )
    if not claim.present:  # a format may say why that is odd (a database that is not there)
        odd = f" ({claim.note})" if claim.note else ""
        return Verdict(State.FREE, f"free: nothing is at {claim.path}{odd}")
    if evidence.kernel_locked:
        return _kernel_verdict(claim, evidence)
    if claim.problem:
        return Verdict(State.UNKNOWN, claim.problem, cause=UnknownCause.UNREADABLE_RECORD)
    if not claim.existence_is_lock:
        unseen = _flock_unseen(claim, evidence)
        if unseen is not None:
            return unseen
        return Verdict(State.FREE, _free_reason(claim, evidence), readers=evidence.readers)
    return _existence_verdict(claim, evidence, policy, now)


def _flock_unseen(claim: Claim, evidence: Evidence) -> Verdict | None:
    """Free is not proven in a container's PID namespace for a lock that may be a flock(2):
    one taken outside it shows in neither /proc/locks nor a descriptor here, and the kernel
    answers no question about it that takes no lock (a POSIX lock it does answer for,
    formats/hidden.py). What a process here holds (a reader) is seen as anywhere, and a /proc
    of the host's namespace read from a nested one lists every flock in its /proc/locks."""
    if not evidence.nested_pid_namespace or evidence.hosts_proc or evidence.readers:
        return None
    if not may_be_flocked(claim):
        return None
    return Verdict(
        State.UNKNOWN,
        "no kernel lock shows on it here, but lockwarden runs in a container's PID namespace, "
        f"where a flock(2) taken outside it shows nowhere{DECLARE}",
        cause=UnknownCause.OTHER_PID_NAMESPACE,
    )


def _kernel_verdict(claim: Claim, evidence: Evidence) -> Verdict:
    holders = evidence.kernel_holders
    if not holders:
        unattributed = evidence.unattributed
        why = unattributed.why if unattributed else "no process could be named for it"
        return Verdict(
            State.HELD,
            f"held by a kernel lock whose holder cannot be named: {why}",
            readers=evidence.readers,
        )
    primary = next((holder for holder in holders if holder.pid == claim.pid), holders[0])
    if claim.pid == primary.pid or (claim.pid is None and claim.role):
        primary = _with_record(primary, claim)
    others = tuple(holder for holder in holders if holder.pid != primary.pid)
    return Verdict(
        State.HELD,
        f"held ({_how_held(primary)})",
        primary,
        sharers=others,
        readers=evidence.readers,
    )


def _how_held(holder: Holder) -> str:
    """`POSIX WRITE`; with the name the lock's program gives it and its bytes, `SQLite
    SHARED: POSIX READ on bytes 1073741826-1073742335`."""
    if holder.lock_name is None:
        return f"{holder.lock_kind}"
    end = "the end" if holder.lock_end is None else holder.lock_end
    return f"{holder.lock_name}: {holder.lock_kind} on bytes {holder.lock_start}-{end}"


def _free_reason(claim: Claim, evidence: Evidence) -> str:
    if evidence.readers:
        readers = ", ".join(reader.describe() for reader in evidence.readers)
        return f"free for writes: only readers hold it ({readers})"
    if claim.pid is not None:
        return f"free: no kernel lock is held on it (its record still names PID {claim.pid})"
    return "free: no process holds a kernel lock on it"


def _existence_verdict(claim: Claim, evidence: Evidence, policy: Policy, now: datetime) -> Verdict:
    if claim.distrust:
        return Verdict(State.UNKNOWN, claim.distrust, cause=UnknownCause.UNTRUSTED_RECORD)
    # Another host's boot and PIDs prove nothing here, so the host is checked first.
    foreign_host = _foreign_host_reason(claim, evidence, policy.host_aliases)
    if foreign_host:
        return Verdict(State.UNKNOWN, foreign_host, cause=UnknownCause.OTHER_HOST)
    other_boot = _other_boot_proof(claim, evidence)
    if other_boot:
        gone = () if claim.pid is None else (claim.pid,)
        return Verdict(State.STALE, "stale: its holder is gone", proof=other_boot, gone=gone)
    if claim.stale.proof is StaleProof.NO_KERNEL_LOCK:
        return _leftover_record_verdict(claim, evidence, policy)
    if claim.stale.proof is StaleProof.NO_WORKER and claim.workers is not None:
        return _worker_verdict(claim, claim.workers, evidence, policy, now)
    if claim.pid is None and claim.pid_proof.candidates:
        return _candidates_verdict(claim, evidence, policy)
    if claim.pid is None:
        return _unnamed_verdict(claim, evidence)
    return _recorded_pid_verdict(claim, evidence, policy)


def _recorded_pid_verdict(claim: Claim, evidence: Evidence, policy: Policy) -> Verdict:
    if claim.pid is None:
        return _unnamed_verdict(claim, evidence)
    foreign = _foreign_namespace_reason(claim, evidence) or _namespace_twin_reason(claim, evidence)
    if foreign:
        return Verdict(State.UNKNOWN, foreign, cause=UnknownCause.OTHER_PID_NAMESPACE)
    if len(evidence.other_processes) != len(claim.pid_proof.others):
        return Verdict(
            State.UNKNOWN,
            "the other holders the record lists were not looked up",
            cause=UnknownCause.AMBIGUOUS,
        )
    recorded = zip(
        (claim.pid, *claim.pid_proof.others),
        (evidence.record_process, *evidence.other_processes),
        strict=True,
    )
    return _combine({pid: _pid_verdict(claim, evidence, pid, process) for pid, process in recorded})


def _pid_verdict(claim: Claim, evidence: Evidence, pid: int, process: Process | None) -> Verdict:
    """One recorded holder on this host and PID namespace: alive, gone, or another process."""
    if process is None or not process.alive:
        gone = "an exited zombie" if process is not None else "not running on this host"
        proof = f"PID {pid} is {gone} and no process holds a kernel lock on {claim.path}"
        reason = f"stale: its holder PID {pid} is gone"
        stale = Verdict(State.STALE, reason, proof=proof, gone=(pid,))
        if pid == claim.pid and (evidence.work_left or evidence.work_untold):
            return _work_left(pid, evidence.work_left, evidence.work_untold)
        if pid == claim.pid and evidence.survivors:
            return _left_running(pid, evidence.survivors)
        return _unless_workers_remain(claim, evidence, stale)
    not_a_taker = _not_a_taker_reason(pid, process)
    if not_a_taker:
        return Verdict(State.UNKNOWN, not_a_taker, cause=UnknownCause.OTHER_PID_NAMESPACE)
    shifted = _shifted_ticks_reason(claim, evidence, process)
    if shifted:
        return Verdict(State.UNKNOWN, shifted, cause=UnknownCause.PID_REUSE_SUSPECTED)
    reused = _reuse_proof(claim, process)
    if reused:
        reason = f"stale: PID {pid} now belongs to another process"
        stale = Verdict(State.STALE, reason, proof=reused, gone=(pid,))
        if pid == claim.pid and (evidence.work_left or evidence.work_untold):  # gone as above
            return _work_left(pid, evidence.work_left, evidence.work_untold)
        return _unless_workers_remain(claim, evidence, stale)
    suspect = _unknown_program(claim, process) or _reuse_suspicion(
        claim, process.started_at, evidence.captured_at
    )
    if suspect:
        return Verdict(State.UNKNOWN, suspect, cause=UnknownCause.PID_REUSE_SUSPECTED)
    if claim.owner_uid not in (None, 0, process.uid):
        return Verdict(
            State.UNKNOWN,
            f"the record is owned by uid {claim.owner_uid} but PID {pid} runs as "
            f"{process.user}; lockwarden does not trust it",
            cause=UnknownCause.UNTRUSTED_RECORD,
        )
    return Verdict(State.HELD, "held", _with_record(holder_from_process(process), claim))


def _left_running(pid: int, survivors: tuple[Holder, ...]) -> Verdict:
    """The recorded holder is gone, but processes of its process group or session run on.
    They may be what it started (a migration's worker: the work goes on, so the lock is not
    stale), or what a later process given the same PID left behind once the group was gone (a
    daemon's double fork): nothing tells the two apart, so neither is named nor killed."""
    return _gone_but(
        pid,
        f"processes of its process group or session still run: {_listed(survivors)}; they may "
        "be the work it started, still going on, or what a later process with its PID left; "
        "check them before removing the lock",
    )


def _work_left(pid: int, work: tuple[Holder, ...], untold: bool = False) -> Verdict:
    """The recorded holder is gone, but what ran below it when an earlier run saw it hold the
    lock still runs, the same processes (by PID and start ticks): a worker it started that
    left its group and session (`setsid`), its parent since killed. The work may go on, so
    the lock is not stale; it may also be a helper that outlives the job, so none of them is
    named the holder either. `untold`: more ran below it than was remembered, so even with
    none of those running, its work is not proven ended."""
    if not work:
        return _gone_but(
            pid,
            "more ran below it while it held the lock than lockwarden remembers, so its work "
            "may still run: make sure it has ended (no process still writes to the store), "
            "then remove the lock",
        )
    untold_text = " (and more not remembered)" if untold else ""
    return _gone_but(
        pid,
        f"what ran below it while it held the lock still runs: {_listed(work)}{untold_text}; "
        "that may be its work, still going on: stop it, or make sure it no longer writes, "
        "before removing the lock",
    )


def _gone_but(pid: int, what_runs: str) -> Verdict:
    reason = f"its recorded holder PID {pid} is gone, but {what_runs}"
    return Verdict(State.UNKNOWN, reason, cause=UnknownCause.AMBIGUOUS)


def _listed(parties: tuple[Holder, ...]) -> str:
    """The first five, described, and how many more."""
    listed = ", ".join(party.describe() for party in parties[:5])
    return listed + (f" and {len(parties) - 5} more" if len(parties) > 5 else "")


def _not_a_taker_reason(pid: int, process: Process) -> str | None:
    """A kernel thread never wrote a record: one naming a kernel thread's PID was written in
    another PID namespace (a container's, where the holder was PID 2, say), whose holder may or
    may not still run. Naming the thread would tell on-call to stop an innocent process; calling
    the lock stale would be a guess. (PID 1 never gets here: records and the capture take
    PIDs from 2.)"""
    if not process.kernel_thread:
        return None
    return (
        f"PID {pid} here is a kernel thread ({process.name}), which takes no lock records: the "
        "record was written in another PID namespace (a container's), whose holder lockwarden "
        "cannot see"
    )


def _shifted_ticks_reason(claim: Claim, evidence: Evidence, process: Process) -> str | None:
    """Start ticks that differ are no proof where lockwarden runs in a time namespace that
    shifts the boot clock: the kernel shows it every start shifted, and the record may have been
    written outside (py-filelock writes none from a shifted one; a host's writer is not)."""
    if not evidence.boottime_offset_s or claim.start_ticks in (None, process.start_ticks):
        return None
    return (
        f"PID {process.pid} started at tick {process.start_ticks} as read here, the record says "
        f"tick {claim.start_ticks}, but lockwarden runs in a time namespace that shifts the boot "
        f"clock by {evidence.boottime_offset_s:g}s, and the record may have been written outside "
        "it: no proof the process that took the lock is gone"
    )


def _combine(by_pid: dict[int, Verdict]) -> Verdict:
    """Several recorded holders (borg's shared roster): held while any one holds it, unknown if
    any cannot be told, stale only when every one is proven gone (all proofs kept)."""
    verdicts = list(by_pid.values())
    held = [verdict for verdict in verdicts if verdict.state is State.HELD]
    if held:
        others = tuple(verdict.holder for verdict in held[1:] if verdict.holder is not None)
        sharers = (*held[0].sharers, *others)
        return Verdict(State.HELD, held[0].reason, held[0].holder, sharers=sharers)
    unknown = next((verdict for verdict in verdicts if verdict.state is State.UNKNOWN), None)
    if unknown is not None or len(verdicts) == 1:
        return unknown or verdicts[0]
    proofs = "; ".join(verdict.proof for verdict in verdicts if verdict.proof)
    pids = ", ".join(str(pid) for pid in by_pid)
    reason = f"stale: all its holders (PIDs {pids}) are gone"
    return Verdict(State.STALE, reason, proof=proofs, gone=tuple(by_pid))


def _other_boot_proof(claim: Claim, evidence: Evidence) -> str | None:
    if claim.boot_id and claim.boot_id != evidence.boot_id:
        return f"it was taken in another boot (boot id {claim.boot_id}, now {evidence.boot_id})"
    return None


def _unless_workers_remain(claim: Claim, evidence: Evidence, stale: Verdict) -> Verdict:
    """The recorded holder is gone; for a lock whose holder's helpers work in its directory
    (a dead postmaster's backends), those helpers still hold it."""
    workers = claim.workers
    if workers is None:
        return stale
    where = ", ".join(workers.directories)
    if evidence.workers:
        first = evidence.workers[0]
        return Verdict(
            State.HELD,
            f"held: its recorded holder PID {claim.pid} is gone, but processes still work in "
            f"{where}",
            first,
            sharers=evidence.workers[1:],
        )
    blind = _blind_reason(evidence.unreadable_cwds, evidence, "working directories")
    if blind:
        cause = _blind_cause(evidence.unreadable_cwds)
        return Verdict(State.UNKNOWN, f"{stale.reason}, but {blind}", cause=cause)
    proof = f"{stale.proof}; no {_names(workers)} process works in {where}"
    return replace(stale, proof=proof)


def _candidates_verdict(claim: Claim, evidence: Evidence, policy: Policy) -> Verdict:
    """A name that reads as several PIDs: held only if exactly one reading is a live holder,
    stale only if every reading is provably not one."""
    readings = " or ".join(str(pid) for pid in claim.pid_proof.candidates)
    outcomes = [
        (
            pid,
            _recorded_pid_verdict(
                replace(claim, pid=pid, pid_proof=replace(claim.pid_proof, candidates=())),
                seen,
                policy,
            ),
        )
        for pid in claim.pid_proof.candidates
        for seen in [replace(evidence, record_process=evidence.candidate_processes.get(pid))]
    ]
    held = [(pid, verdict) for pid, verdict in outcomes if verdict.state is State.HELD]
    if len(held) == 1:
        _pid, verdict = held[0]
        return replace(verdict, reason=f"{verdict.reason} (its name reads as PID {readings})")
    if held:
        running = " and ".join(str(pid) for pid, _ in held)
        return Verdict(
            State.UNKNOWN,
            f"its name reads as PID {readings}, and {running} all run: cannot tell which holds it",
            cause=UnknownCause.AMBIGUOUS,
        )
    unknown = next((verdict for _, verdict in outcomes if verdict.state is State.UNKNOWN), None)
    if unknown is not None:
        return unknown
    proofs = "; ".join(verdict.proof or verdict.reason for _, verdict in outcomes)
    return Verdict(
        State.STALE,
        f"stale: no PID its name can be read as ({readings}) holds it",
        proof=f"its name reads as PID {readings}: {proofs}",
    )


def _leftover_record_verdict(claim: Claim, evidence: Evidence, policy: Policy) -> Verdict:
    """A record whose program holds a kernel lock while it holds the lock: no kernel lock on
    this host means the record was left behind (proof only if the kernel lock would show)."""
    if claim.host and not _same_host(claim.host, evidence.hostname, policy.host_aliases):
        return Verdict(
            State.UNKNOWN,
            f"the record was written on host {claim.host!r}, not on this host "
            f"({evidence.hostname}); its kernel lock would not show here",
            cause=UnknownCause.OTHER_HOST,
        )
    if evidence.nested_pid_namespace:
        return Verdict(
            State.UNKNOWN,
            "lockwarden runs in a container's PID namespace, where /proc/locks hides locks "
            f"held from outside it{DECLARE}",
            cause=UnknownCause.OTHER_PID_NAMESPACE,
        )
    proof = f"no process holds a kernel lock on it, and {claim.stale.fact}"
    return Verdict(
        State.STALE, "stale: its record was left behind and nothing holds the lock", proof=proof
    )


def _worker_verdict(
    claim: Claim, workers: Workers, evidence: Evidence, policy: Policy, now: datetime
) -> Verdict:
    """Held while a process that could have taken it works on the lock's directories, by a
    holder nobody can name (the file records none, and nothing but its name ties a worker to
    it: a reader works there too); stale when none does and the lock is older than
    `stale_after` (a younger one may belong to a process just starting or one this host
    cannot see)."""
    where = " or ".join(workers.directories)
    candidates = _could_have_taken_it(claim, evidence.workers)
    if candidates:
        listed = ", ".join(_candidate(worker) for worker in candidates[:5])
        more = f" and {len(candidates) - 5} more" if len(candidates) > 5 else ""
        return Verdict(
            State.HELD,
            f"held, by a process lockwarden cannot name: the lock records none; candidates "
            f"that work on {where}: {listed}{more}",
        )
    looked_at = (
        "working directories or environments" if workers.variables else "working directories"
    )
    blind = _blind_reason(evidence.unreadable_cwds, evidence, looked_at)
    if blind:
        return Verdict(
            State.UNKNOWN,
            f"no {_names(workers)} process seen in {where}, but {blind}",
            cause=_blind_cause(evidence.unreadable_cwds),
        )
    if evidence.unfollowed_workers:
        return Verdict(
            State.UNKNOWN,
            f"no {_names(workers)} process seen in {where}, but "
            f"{_unfollowed(evidence.unfollowed_workers)} (a file system there did not answer "
            "in time, or a file pointing on could not be read)",
            cause=UnknownCause.UNPROVEN,
        )
    age = None if claim.created_at is None else (now - claim.created_at).total_seconds()
    threshold = policy.stale_after
    if age is None or threshold is None or age < threshold:
        old = "of unknown age" if age is None else f"{format_duration(max(age, 0))} old"
        limit = "" if threshold is None else f" (stale after {format_duration(threshold)})"
        return Verdict(
            State.UNKNOWN,
            f"no {_names(workers)} process works in {where}, but the lock is only {old}{limit}: "
            "it may belong to a process just starting or one this host cannot see",
            cause=UnknownCause.UNPROVEN,
        )
    how = (
        "has its working directory in, or names on its command line or in its environment,"
        if workers.variables
        else "has its working directory in"
    )
    proof = (
        f"no {_names(workers)} process {how} {where}{_followed(workers)}, "
        f"{claim.stale.fact}, and the lock file is {format_duration(age)} old "
        f"(stale_after {format_duration(threshold)})"
    )
    return Verdict(State.STALE, "stale: no process that could hold it is running", proof=proof)


def _workers_running(claim: Claim, workers: Workers, evidence: Evidence) -> Verdict | None:
    """A lock that one program holds open and another (pacman-db-upgrade: `touch`, work, `rm`)
    holds without: while one of the second runs, it is held by a holder nobody can name; with
    processes that could not be looked at, nothing is proven."""
    candidates = _could_have_taken_it(claim, evidence.workers)
    if candidates:
        listed = ", ".join(_candidate(worker) for worker in candidates[:5])
        return Verdict(
            State.HELD,
            f"held, by a process lockwarden cannot name: none has it open, but {listed} runs, "
            "which holds it without keeping it open",
        )
    blind = _blind_reason(evidence.unreadable_cwds, evidence, "working directories")
    if blind:
        return Verdict(
            State.UNKNOWN,
            f"no process has it open and no {_names(workers)} process was seen, but {blind}",
            cause=_blind_cause(evidence.unreadable_cwds),
        )
    return None


def _candidate(worker: Holder) -> str:
    """`PID 4242 (git commit -a)`: a process that may hold a lock, never its named holder."""
    return f"PID {worker.pid} ({command_text(worker.cmdline, 60) or worker.name or '?'})"


def _could_have_taken_it(claim: Claim, workers: tuple[Holder, ...]) -> tuple[Holder, ...]:
    """A process that started clearly after the lock file was last written did not take it."""
    if claim.created_at is None:
        return workers
    latest = claim.created_at + PID_REUSE_MARGIN
    return tuple(w for w in workers if w.started_at is None or w.started_at <= latest)


def _unfollowed(count: int) -> str:
    if count == 1:
        return "1 such process could not be followed to where it works"
    return f"{count} such processes could not be followed to where they work"


def _followed(workers: Workers) -> str:
    """How else the workers were looked for: by the directories' identities (another path to
    them), and through the pointer files that name them."""
    if not workers.identities:
        return ""
    through = f" or through a `{workers.pointer[0]}` file" if workers.pointer else ""
    return f" (nor reaches one by another path{through})"


def _names(workers: Workers) -> str:
    return "/".join(workers.names) if workers.names else "such"


def _blind_reason(unreadable: int, evidence: Evidence, what: str) -> str | None:
    """Why the absence of a process proves nothing here, or None when it does."""
    if unreadable:
        return f"{processes(unreadable)} {what} could not be read: {missing_right(evidence)}"
    if evidence.nested_pid_namespace:
        return (
            "lockwarden runs in a container's PID namespace and cannot see the host's "
            f"processes{DECLARE}"
        )
    return None


def _blind_cause(unreadable: int) -> UnknownCause:
    """What `_blind_reason` names: a missing right, else a container's PID namespace."""
    return UnknownCause.MISSING_RIGHT if unreadable else UnknownCause.OTHER_PID_NAMESPACE


def _unnamed_verdict(claim: Claim, evidence: Evidence) -> Verdict:
    if evidence.openers:
        opener = evidence.openers[0]
        return Verdict(
            State.HELD,
            "held: the lock names no PID, but a process has it open",
            opener,
            sharers=evidence.openers[1:],
        )
    blind = _blind_reason(evidence.unreadable_pids, evidence, "open files")
    if claim.workers is not None:  # a program that holds it without keeping it open
        working = _workers_running(claim, claim.workers, evidence)
        if working is not None:
            return working
    if claim.stale.proof is StaleProof.NO_OPENER and blind is None:
        proof = f"no process has {claim.path} open, and {claim.stale.fact}"
        return Verdict(State.STALE, "stale: no process has the lock open", proof=proof)
    if claim.created_at is not None and claim.created_at < evidence.booted_at:
        return Verdict(
            State.UNKNOWN,
            f"probably left over from before the last boot: it was made at "
            f"{format_time(claim.created_at)}, before this boot "
            f"({format_time(evidence.booted_at)}), and no process has it open; but a "
            "stepped wall clock can make a lock look older than it is, so check it by hand",
            cause=UnknownCause.UNPROVEN,
        )
    hint = ""
    cause = UnknownCause.UNPROVEN
    if claim.stale.proof is StaleProof.NO_OPENER and blind:
        hint = f"; {blind}"
        cause = _blind_cause(evidence.unreadable_pids)
    return Verdict(
        State.UNKNOWN,
        f"the lock names no process and no process has it open; cannot tell who made it{hint}",
        cause=cause,
    )


def _foreign_namespace_reason(claim: Claim, evidence: Evidence) -> str | None:
    if claim.pid_namespace is not None and claim.pid_namespace != evidence.pid_namespace:
        # evidence.pid_namespace is the one whose PIDs the /proc read here shows: a namespace
        # entered without a /proc of its own reads its parent's, where its PIDs mean others.
        here = (
            "the one whose PIDs the /proc read here shows, which lockwarden cannot tell"
            if evidence.pid_namespace is None
            else f"the one whose PIDs the /proc read here shows ({evidence.pid_namespace})"
        )
        return f"PID {claim.pid} is in PID namespace {claim.pid_namespace}, not {here}"
    if claim.pid_namespace is None and evidence.nested_pid_namespace:
        return (
            "lockwarden runs in a container's PID namespace and the record does not say "
            f"which namespace PID {claim.pid} belongs to{DECLARE}"
        )
    return None


def _foreign_host_reason(claim: Claim, evidence: Evidence, aliases: tuple[str, ...]) -> str | None:
    """Another host's PIDs mean nothing here. A machine id recorded beside the name (borg's
    `NAME@NODE`) must match too, unless the configuration names the whole id as an alias."""
    if not claim.host:
        return None
    node = claim.pid_proof.machine_id
    if node is not None and f"{claim.host}@{node}" in aliases:
        return None
    same_machine = node is not None and node == evidence.host_node
    if not _same_host(claim.host, evidence.hostname, aliases, same_machine):
        return f"the lock was taken on host {claim.host!r}, not on this host ({evidence.hostname})"
    if node is not None and node != evidence.host_node:
        return (
            f"the lock was taken on a host named {claim.host!r} with machine id "
            f"{node}, but this host's id is {evidence.host_node}: another machine "
            f'(add "{claim.host}@{node}" to host_aliases if it is this one)'
        )
    return None


def _namespace_twin_reason(claim: Claim, evidence: Evidence) -> str | None:
    """A record written inside a container names a PID of the container's namespace; when a
    process in a nested namespace has that number there, the record may mean it, not ours."""
    if claim.pid_namespace is not None or not evidence.namespace_twins:
        return None
    twins = ", ".join(str(pid) for pid in evidence.namespace_twins[:3])
    return (
        f"PID {claim.pid} is ambiguous: a process in a nested PID namespace (a container) has "
        f"that number there (PID {twins} here), and the record does not say which it means"
    )


def _same_host(
    recorded: str, hostname: str, aliases: tuple[str, ...], same_machine: bool = False
) -> bool:
    """A short name and a qualified one are one host when their first labels agree (borg records
    the FQDN of a host whose nodename is short); two qualified names only when they are equal:
    `ws.dc1.example.org` and `ws.dc2.example.org` are two machines (a home shared between
    them), unless a machine id recorded beside the name is this host's (`same_machine`: borg's
    canonical name may qualify a nodename otherwise)."""
    short = hostname.split(".")[0]
    candidates = {hostname, short, "localhost", *aliases}
    if recorded in candidates:
        return True
    if "." in recorded and "." in hostname and not same_machine:
        return False
    return recorded.split(".")[0] == short


def _reuse_proof(claim: Claim, process: Process) -> str | None:
    """Proof that the PID now names another process: it runs another program than those that
    take this lock where no other can (PidProof.others_prove_reuse), or its start ticks
    (monotonic, counted from boot) differ from the record's."""
    proof = claim.pid_proof
    if proof.others_prove_reuse and not _runs_one_of(process, proof.executables):
        return (
            f"PID {process.pid} runs {_program_of(process)!r}, not {' or '.join(proof.executables)}"
            ", which is what takes this lock, and no process holds its kernel lock: the process "
            "that took it is gone"
        )
    if claim.start_ticks is not None and claim.start_ticks != process.start_ticks:
        return (
            f"PID {claim.pid} now started at tick {process.start_ticks} after boot, but the "
            f"record says tick {claim.start_ticks}: the process that took the lock is gone"
        )
    return None


def _unknown_program(claim: Claim, process: Process) -> str | None:
    """A live PID running none of the programs known to take this lock: probably a reused PID,
    but no proof. Programs built on one take its lock under names of their own (every Electron
    app makes a Chromium SingletonLock: VS Code runs as `code`), and no list names them all."""
    executables = claim.pid_proof.executables
    if not executables or _runs_one_of(process, executables):
        return None  # (others_prove_reuse: _reuse_proof has decided it already)
    known = ", ".join(executables)
    return (
        f"PID {process.pid} runs {_program_of(process)!r}, none of the programs known to take "
        f"this lock ({known}): probably another process that reused the PID, but a program "
        "built on one of them (an Electron app) takes it too; check it before removing the lock"
    )


def _reuse_suspicion(claim: Claim, started_at: datetime, now: datetime) -> str | None:
    """The named process started after its record was written (or, for a record of the
    holder's own start, long before it): probably a reused PID, but by wall-clock times only,
    which a clock step can fake. Matching start ticks settle it."""
    if claim.start_ticks is not None:
        return None
    readings = record_readings(claim) or ((claim.created_at,) if claim.created_at else ())
    if len(readings) > 1:  # a time that reads two ways: a reading ahead of the clock is none
        readings = tuple(moment for moment in readings if moment <= now) or readings
    if not readings:
        return None
    # Subtract rather than add: a record dated near year 9999 must not overflow. A time that
    # reads two ways is suspect only if it is so read both ways.
    written = max(readings)
    started_after = started_at - written
    if started_after > REUSE_SUSPICION_MARGIN:
        return (
            f"PID {claim.pid} started at {format_time(started_at)}, after its record was "
            f"written ({format_time(written)}): probably another process that reused the PID, "
            "but wall-clock times are no proof; check it before removing the lock"
        )
    if claim.pid_proof.started_at_is_start and min(readings) - started_at > PID_REUSE_MARGIN:
        written = min(readings)
        return (
            f"PID {claim.pid} started at {format_time(started_at)}, but the holder its record "
            f"names started at {format_time(written)}: probably another process that reused the "
            "PID, but wall-clock times are no proof; check it before removing the lock"
        )
    return None


def _program_of(process: Process) -> str:
    return process.cmdline[0].rsplit("/", 1)[-1] if process.cmdline else process.name


def _runs_one_of(process: Process, executables: tuple[str, ...]) -> bool:
    """By the executable's name in argv[0], or by the (possibly truncated) kernel name."""
    if _program_of(process) in executables:
        return True
    name = process.name
    return any(
        name == executable or (len(name) == COMM_LENGTH and executable.startswith(name))
        for executable in executables
    )


def _with_record(holder: Holder, claim: Claim) -> Holder:
    return replace(holder, role=claim.role, host=claim.host)


def held_duration(
    claim: Claim,
    verdict: Verdict,
    evidence: Evidence,
    now: datetime,
    first_seen: datetime | None = None,
) -> tuple[float | None, Bound]:
    """How long it has been held, and what that number is (see model.Bound).

    Exact from the record or the lock file's own dates. A kernel lock records no time: at
    least since the first of an unbroken series of runs that saw it held by this holder; else
    at most the running time of the process that took it (/proc/locks names it); else unknown.
    A holder that did not take it itself says nothing of its age: the taker may have taken it
    before forking the holder (`flock FILE cmd`) or long after, on a descriptor the holder
    already had (a shell's `exec 9>F; ...; flock 9`), or sent it over a socket."""
    if verdict.state not in (State.HELD, State.STALE):
        return None, Bound.UNKNOWN
    dating = _record_or_file_dates(claim, verdict, now)
    if dating is Bound.EXACT:
        return held_seconds(claim, verdict, evidence, now), Bound.EXACT
    if dating is Bound.AT_LEAST:
        # Held at least since then. The runs' sightings name the holder, not the take: a record
        # gives each take its own time, and a file made anew for each take (its inode number
        # free to be reused) looks like one kept, so they raise neither floor (a holder that
        # takes the lock again for every job is seen by run after run).
        age = held_seconds(claim, verdict, evidence, now)
        return (age, Bound.AT_LEAST) if age is not None else (None, Bound.UNKNOWN)
    if not evidence.kernel_locked:
        age = held_seconds(claim, verdict, evidence, now)
        return (age, Bound.AT_MOST) if age is not None else (None, Bound.UNKNOWN)
    floor = _sighting_age(first_seen, verdict, now)
    if floor is not None:
        return floor, Bound.AT_LEAST
    ceiling = _taker_age(evidence, now)
    if ceiling is not None:
        return ceiling, Bound.AT_MOST
    return None, Bound.UNKNOWN


WHAT_IF_AFTER = timedelta(seconds=1)
"""How far past the host's capture `now` must be for a run to be a `--now` what-if."""


def projected(
    first_seen: datetime | None, seen_at: datetime, now: datetime, holder: object = True
) -> datetime | None:
    """A `--now` what-if in the future asks what a later run would say if the lock stayed held
    as it is seen now: such a run, every minute meanwhile, would have seen it held since this
    sighting at the latest. A real run (`now` is the capture's time) projects nothing."""
    if holder is None or now - seen_at <= WHAT_IF_AFTER:
        return first_seen
    return seen_at if first_seen is None else min(first_seen, seen_at)


def _sighting_age(first_seen: datetime | None, verdict: Verdict, now: datetime) -> float | None:
    """Since the first run that saw this holder hold it, never longer than the holder has run:
    a series that seems older (the clock stepped back, or a `--now` run in the past wrote it)
    cannot be about this process, which started since."""
    seen = _age(first_seen, now)
    running = _age(verdict.holder.started_at, now) if verdict.holder is not None else None
    return min(seen, running) if seen is not None and running is not None else seen


def _age(moment: datetime | None, now: datetime) -> float | None:
    if moment is None:
        return None
    age = (now - moment).total_seconds()
    return age if age >= 0 else None  # a clock stepped back past it proves nothing


def _taker_age(evidence: Evidence, now: datetime) -> float | None:
    """The running time of the process that took the lock (it took it since it started)."""
    ages = [
        _age(process.started_at, now)
        for process in evidence.takers.values()
        if process is not None and process.alive
    ]
    known = [age for age in ages if age is not None]
    if not known or len(known) < len(evidence.takers) or not evidence.takers:
        return None
    since_boot = _age(evidence.booted_at, now)
    oldest = max(known)
    return min(oldest, since_boot) if since_boot is not None else oldest


def held_seconds(claim: Claim, verdict: Verdict, evidence: Evidence, now: datetime) -> float | None:
    """How long it has been held: the smallest of the record's age, the lock file's age and the
    holder's running time, so a clock step or a long-lived holder never inflates it. The file's
    age is its last write's: a holder that touches its lock while it works (a heartbeat, or a
    lock directory it writes into) moves it, so it counts only when the record does not date
    this holder's hold.

    The holder's start is boot time + its start ticks, both taken from the same snapshot, so
    its running time is monotonic: a wall-clock step moves the boot time and `now` together.
    A live holder started in this boot, so a held lock is never older than the boot. The
    record counts only when it describes this holder (or the stale lock itself)."""
    if verdict.state not in (State.HELD, State.STALE):
        return None
    holder = verdict.holder
    trusted = claim.problem is None
    record_describes_holder = holder is not None and holder.pid == claim.pid
    written, _exact = _record_start_for(claim, verdict, now)
    candidates = []
    if trusted and (record_describes_holder or verdict.state is State.STALE):
        candidates.append(written)
    dated_by_record = record_describes_holder and written is not None
    if trusted and claim.existence_is_lock and not dated_by_record:
        candidates.append(_file_written(claim, now))
    if holder is not None:
        candidates.append(holder.started_at)
    ages = [(now - moment).total_seconds() for moment in candidates if moment is not None]
    usable = [age for age in ages if age >= 0]  # a negative age is a clock stepped back past it
    if not usable:
        return None
    held = min(usable)
    since_boot = (now - evidence.booted_at).total_seconds()
    # Only ever a cap: were it a candidate, it would stand in for an age the clock threw out.
    return min(held, since_boot) if verdict.state is State.HELD and since_boot >= 0 else held


def _record_or_file_dates(claim: Claim, verdict: Verdict, now: datetime) -> Bound | None:
    """What dates the lock besides its holder's start, and how well. A kernel lock records no
    time: then the holder's running time is all there is, an upper bound the report says is one
    (None here). A record of this holder's hold (or of a stale lock) dates it exactly, unless
    its time reads two ways (record_start): then it was taken at the later reading at the
    latest. The lock file's own time is its last write's: an existence lock exists at least
    since then. A date after `now` dates nothing (a clock stepped back since, a local time read
    as UTC): held_seconds leaves it out, and what is left is no date of the lock's own."""
    if claim.problem is not None:
        return None
    if _record_dates(claim, verdict, now):
        return Bound.EXACT if _record_start_for(claim, verdict, now)[1] else Bound.AT_LEAST
    if claim.existence_is_lock and _age(_file_written(claim, now), now) is not None:
        return Bound.AT_LEAST
    return None


WRITTEN_DURING_RUN = timedelta(seconds=5)
"""How far after the run's clock a lock file's mtime may be and still be a write during the
run: the clock is read before the claims, and a holder that makes its file anew for every job
can write it in between."""


def _file_written(claim: Claim, now: datetime) -> datetime | None:
    """The lock file's last write (its mtime) as a date of the hold: one a moment after the
    run's clock is a write during this run, so at `now` (held at least 0 s); one further
    ahead is a clock stepped back since, and dates nothing (_age drops it)."""
    written = claim.created_at
    if written is not None and now < written <= now + WRITTEN_DURING_RUN:
        return now
    return written


def _record_dates(claim: Claim, verdict: Verdict, now: datetime) -> bool:
    """Whether the record's time dates this hold: a trusted record of this holder's hold (or
    of a stale lock) with a reading up to `now`."""
    if claim.problem is not None or _record_start_for(claim, verdict, now)[0] is None:
        return False
    describes_holder = verdict.holder is not None and verdict.holder.pid == claim.pid
    return describes_holder or verdict.state is State.STALE


def _record_start_for(
    claim: Claim, verdict: Verdict, now: datetime
) -> tuple[datetime | None, bool]:
    """record_start for this verdict: a record of its holder's hold was written after that
    holder started, so a reading well before its start is none (the writer's zone was not
    this host's, or an offset was written wrong: `datetime.now()` with a `Z`). Left in, the
    holder's running time stood in for it as an exact age, and paged a hold of a moment."""
    holder = verdict.holder
    started = holder.started_at if holder is not None and holder.pid == claim.pid else None
    return record_start(claim, now, started)


def record_readings(claim: Claim) -> tuple[datetime, ...]:
    """The moments the record's time can mean: itself; for a time written without an offset,
    also that wall-clock time in this host's zone, when it differs (a writer's `datetime.now()`
    on this host: the record names a process here). A wall-clock time the zone shows twice
    (the hour a daylight-saving time ends repeats) means either moment, an hour apart. A
    reading after the record file's last write (its mtime, `created_at`) is none: the time was
    written then at the latest. Left out, east of UTC a naive local time stays exact once its
    UTC reading, hours ahead when written, has passed, rather than turning into a far younger
    `at least` (and a held_too_long into a held) hours into the hold."""
    if claim.started_at is None:
        return ()
    if not claim.started_at_naive:
        return (claim.started_at,)
    wall = claim.started_at.replace(tzinfo=None)
    readings = [claim.started_at]
    for fold in (0, 1):
        try:
            local = wall.replace(fold=fold).astimezone(UTC)
        except (OverflowError, ValueError, OSError):
            continue
        if local not in readings:
            readings.append(local)
    if claim.created_at is not None and len(readings) > 1:
        written_by = claim.created_at + RECORD_WRITE_MARGIN
        readings = [moment for moment in readings if moment <= written_by] or readings
    return tuple(readings)


def record_start(
    claim: Claim, now: datetime, holder_started: datetime | None = None
) -> tuple[datetime | None, bool]:
    """When the record says the lock was taken, and whether that is exact. A time that reads
    two ways (record_readings) is exact when only one of its readings is not after `now`;
    when both are past, the lock was taken at the later one at the latest, never earlier than
    it can be known: `held at least`, never a page on the earlier reading. No reading up to
    `now` (nor, for a record of a holder that started at `holder_started`, from shortly before
    then on): no date."""
    earliest = None if holder_started is None else holder_started - REUSE_SUSPICION_MARGIN
    past = [
        moment
        for moment in record_readings(claim)
        if moment <= now and (earliest is None or moment >= earliest)
    ]
    if not past:
        return None, True
    return max(past), len(past) == 1


def grade(
    state: State, held_for: float | None, policy: Policy, bound: Bound = Bound.EXACT
) -> tuple[State, Severity]:
    """Only an exact or an at-least duration can put a lock past its budget: a holder's
    running time (at most) or nothing known never pages (ARCHITECTURE.md, "Never" 7). What is
    graded is the duration's lower bound, which for those is 0: a budget of 0 ("any hold is too
    long") is past for every held lock, whatever is known of how long."""
    if state is State.FREE:
        return state, Severity.OK
    if state is State.UNKNOWN:
        return state, Severity.UNKNOWN
    if state is State.STALE:
        return state, policy.stale_severity
    known = held_for is not None and bound in (Bound.EXACT, Bound.AT_LEAST)
    at_least = held_for if known and held_for is not None else 0.0
    if at_least >= policy.critical_after:
        return State.HELD_TOO_LONG, Severity.CRITICAL
    if at_least >= policy.warn_after:
        return State.HELD_TOO_LONG, Severity.WARNING
    return State.HELD, Severity.OK


def past_declared_limit(
    claim: Claim, state: State, held_for: float | None, bound: Bound = Bound.EXACT
) -> float | None:
    """The holder's own declared limit (`max_hold` in its record) when a live holder is past
    it: such a holder is at least a warning, whatever the configured budget."""
    limit = claim.max_hold_s
    live = state in (State.HELD, State.HELD_TOO_LONG)
    known = bound in (Bound.EXACT, Bound.AT_LEAST)
    if limit is None or held_for is None or not live or not known or held_for < limit:
        return None
    return limit


def explain(
    name: str,
    verdict: Verdict,
    state: State,
    held_for: float | None,
    policy: Policy,
    declared_limit: float | None = None,
    bound: Bound = Bound.EXACT,
    at_most: float | None = None,
    lock_format: str = "",
) -> str:
    """The finding's reason. `at_most`: the longest it can have been held (None: no limit is
    known); only that within the budget reads "within its budget"."""
    holder = verdict.holder.describe() if verdict.holder else None
    how_long = _how_long(held_for, bound)
    if state is State.HELD_TOO_LONG and held_for is not None:
        past = (
            f", past its own declared limit of {format_limit(declared_limit)}"
            if declared_limit is not None
            else ""
        )
        if verdict.holder is None:  # past its budget, known from below: say why none is named
            if verdict.reason.startswith("held"):  # `held, by a process ... cannot name: ...`
                return f"writes to {name} blocked: held {how_long}{past}{verdict.reason[4:]}"
            return (
                f"writes to {name} blocked: a holder lockwarden cannot name has held the lock "
                f"{how_long}{past} ({verdict.reason})"
            )
        ending = call_to_act(verdict.holder, lock_format)
        return f"writes to {name} blocked: {holder} has held the lock {how_long}{past}{ending}"
    if state is State.HELD and holder:
        return f"{verdict.reason} by {holder} {how_long}{budget_words(at_most, policy.warn_after)}"
    return verdict.reason


def budget_words(at_most: float | None, budget: float) -> str:
    """`, within its 15m00s budget` only when the longest the lock can have been held is within
    it; else neither a page nor a reassurance."""
    words = format_duration(budget)
    if at_most is not None and at_most < budget:
        return f", within its {words} budget"
    return (
        f": not yet known to be past its {words} budget (the next run that still sees this "
        "holder knows more)"
    )


def _upper_bound(
    held_for: float | None, bound: Bound, verdict: Verdict, now: datetime
) -> float | None:
    """The longest the lock can have been held: an exact or at-most figure is one; past an
    at-least figure (or none) only the holder's own running time limits it."""
    if held_for is not None and bound in (Bound.EXACT, Bound.AT_MOST):
        return held_for
    started = verdict.holder.started_at if verdict.holder is not None else None
    return max((now - started).total_seconds(), 0.0) if started is not None else None


def _how_long(held_for: float | None, bound: Bound) -> str:
    """`for at least 5m (seen held since an earlier run)`, `for up to 9s (...)`, `for 2h01m`."""
    if held_for is None:
        return "for an unknown time"
    text = f"for {bound.words}{format_duration(held_for)}"
    if bound is Bound.AT_MOST:
        return f"{text} (its running time: the kernel does not record when a lock was taken)"
    return text


def action_for(state: State, verdict: Verdict, claim: Claim) -> str | None:
    if state is State.STALE and claim.break_command:
        return claim.break_command
    if state is State.STALE and claim.remove_path and not claim.never_remove:
        return removal_by_hand(claim, claim.remove_path)
    if verdict.holder is None or verdict.holder.pid is None or not needs_action(state):
        return None  # advice.py: no action for what needs none
    if state is State.STALE:
        return None
    return advise_holder(verdict.holder, verdict.sharers, claim.format)


def _note(claim: Claim, state: State) -> str | None:
    """The claim's note, and for a stale lock no command removes, why none does."""
    refused = claim.path_control.refused
    if state is not State.STALE or refused is None or claim.break_command:
        return claim.note
    why = f"no command to remove it is offered: {refused}"
    return f"{claim.note}; {why}" if claim.note else why


def removal_by_hand(claim: Claim, remove_path: str) -> str | None:
    """`rm -- PATH` (`rm -r` for a directory), pasted into a root shell later: as root only
    when nobody else can change where the path leads; as the lock's owner when they can (a
    directory on the way swapped for a symlink then leads `rm` nowhere they could not go
    themselves); none when someone else can (formats/trust.py, Claim.path_control)."""
    control = claim.path_control
    if control.refused is not None:
        return None
    flag = "-r " if remove_path == claim.path and claim.record_path != claim.path else ""
    command = f"rm {flag}-- {shlex.quote(remove_path)}"
    if control.owner is None:
        return command
    uid, gid = control.owner
    return f"setpriv --reuid={uid} --regid={gid} --clear-groups -- {command}"


def identity_of(claim: Claim, verdict: Verdict, evidence: Evidence) -> str | None:
    """The incident key's holder part: pid + start ticks + boot id (and the takers of a lock it
    did not take itself), or the lock's inode and record for a holderless lock."""
    holder = verdict.holder
    if holder is not None and holder.pid is not None:
        held = f"pid:{holder.pid}:{holder.start_ticks}:{evidence.boot_id}"
        return held + _taken_by(verdict, evidence)
    if claim.keys:
        device, inode = claim.keys[0]
        record = claim.pid if claim.pid is not None else "-"
        return f"inode:{device}:{inode}:{record}"
    return None


def _taken_by(verdict: Verdict, evidence: Evidence) -> str:
    """Who took a kernel lock its holders did not take themselves (/proc/locks names the
    taker). A shell holding `exec 9>F` re-takes it with a new `flock 9` child each time; with
    the holder alone as the identity, runs that never happen to see the gaps would chain into
    one series and page a false held-too-long. Empty for a lock its holder took, as before."""
    holders = {party.pid for party in (verdict.holder, *verdict.sharers) if party is not None}
    takers = sorted({lock.pid for lock in evidence.granted if lock.pid > 0} - holders)
    return f":taken-by:{','.join(map(str, takers))}" if takers else ""
