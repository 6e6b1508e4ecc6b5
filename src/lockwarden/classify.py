"""Claim + evidence + policy + now -> Finding. Pure: no /proc, no clock, no files.

`stale` is said only with proof (ARCHITECTURE.md, "Never" 2): another boot, a dead PID on this
host and PID namespace with no kernel lock left, or a PID whose start contradicts the record.
Anything less is `unknown`, with the reason.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from datetime import datetime, timedelta

from lockwarden.durations import format_duration
from lockwarden.identify import Evidence, holder_from_process
from lockwarden.model import Claim, Finding, Holder, Severity, State

# A reused PID is only proven when its process started clearly after the lock was taken: the
# record's wall-clock time and the process start (boot time + ticks) can disagree by an NTP step.
PID_REUSE_MARGIN = timedelta(minutes=5)


@dataclass(frozen=True)
class Policy:
    """How long a lock may be held, and how bad a stale one is."""

    warn_after: float
    critical_after: float
    stale_severity: Severity = Severity.CRITICAL
    host_aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class Verdict:
    """What the evidence says about a claim, before it becomes a Finding."""

    state: State
    reason: str
    holder: Holder | None = None
    proof: str | None = None
    sharers: tuple[Holder, ...] = ()


def classify(name: str, claim: Claim, evidence: Evidence, policy: Policy, now: datetime) -> Finding:
    verdict = judge(claim, evidence, policy)
    held_for = held_seconds(claim, verdict, evidence, now)
    state, severity = grade(verdict.state, held_for, policy)
    return Finding(
        name=name,
        path=claim.path,
        format=claim.format,
        state=state,
        severity=severity,
        reason=explain(name, verdict, state, held_for, policy),
        held_for_s=held_for,
        proof=verdict.proof,
        holder=verdict.holder,
        waiters=evidence.waiters,
        sharers=verdict.sharers,
        action=action_for(state, verdict, claim),
        identity=identity_of(claim, verdict, evidence),
        note=claim.note,
    )


def judge(claim: Claim, evidence: Evidence, policy: Policy) -> Verdict:
    if not claim.present:
        return Verdict(State.FREE, "nothing holds it: the lock is not there")
    if evidence.kernel_locked:
        return _kernel_verdict(claim, evidence)
    if claim.problem:
        return Verdict(State.UNKNOWN, claim.problem)
    if not claim.existence_is_lock:
        return Verdict(State.FREE, _free_reason(claim, evidence))
    return _existence_verdict(claim, evidence, policy)


def _kernel_verdict(claim: Claim, evidence: Evidence) -> Verdict:
    holders = evidence.kernel_holders
    if not holders:
        hidden = evidence.unreadable_pids
        why = (
            f"{hidden} processes' descriptors could not be read; run as root to name the holder"
            if hidden
            else "the holder is not visible in this PID namespace"
        )
        return Verdict(State.HELD, f"held by a kernel lock whose holder cannot be named: {why}")
    primary = next((holder for holder in holders if holder.pid == claim.pid), holders[0])
    if claim.pid == primary.pid:
        primary = _with_record(primary, claim)
    others = tuple(holder for holder in holders if holder.pid != primary.pid)
    return Verdict(State.HELD, f"held ({primary.lock_kind})", primary, sharers=others)


def _free_reason(claim: Claim, evidence: Evidence) -> str:
    if claim.pid is not None:
        return f"free: no kernel lock is held on it (its record still names PID {claim.pid})"
    return "free: no process holds a kernel lock on it"


def _existence_verdict(claim: Claim, evidence: Evidence, policy: Policy) -> Verdict:
    if claim.boot_id and claim.boot_id != evidence.boot_id:
        proof = f"it was taken in another boot (boot id {claim.boot_id}, now {evidence.boot_id})"
        return Verdict(State.STALE, "stale: its holder is gone", proof=proof)
    if claim.pid is None:
        return _unnamed_verdict(claim, evidence)
    foreign = _foreign_reason(claim, evidence, policy)
    if foreign:
        return Verdict(State.UNKNOWN, foreign)
    process = evidence.record_process
    if process is None or not process.alive:
        gone = "a reaped zombie" if process is not None else "not running on this host"
        proof = f"PID {claim.pid} is {gone} and no process holds a kernel lock on {claim.path}"
        return Verdict(State.STALE, f"stale: its holder PID {claim.pid} is gone", proof=proof)
    reused = _reuse_proof(claim, process.start_ticks, process.started_at)
    if reused:
        return Verdict(
            State.STALE, f"stale: PID {claim.pid} now belongs to another process", proof=reused
        )
    if claim.owner_uid not in (None, 0, process.uid):
        return Verdict(
            State.UNKNOWN,
            f"the record is owned by uid {claim.owner_uid} but PID {claim.pid} runs as "
            f"{process.user}; lockwarden does not trust it",
        )
    return Verdict(State.HELD, "held", _with_record(holder_from_process(process), claim))


def _unnamed_verdict(claim: Claim, evidence: Evidence) -> Verdict:
    if evidence.openers:
        opener = evidence.openers[0]
        return Verdict(
            State.HELD,
            "held: the lock names no PID, but a process has it open",
            opener,
            sharers=evidence.openers[1:],
        )
    if claim.created_at is not None and claim.created_at < evidence.booted_at:
        proof = (
            f"it was made at {claim.created_at:%Y-%m-%dT%H:%M:%SZ}, before this boot "
            f"({evidence.booted_at:%Y-%m-%dT%H:%M:%SZ}), and no process has it open"
        )
        return Verdict(State.STALE, "stale: left over from before the last boot", proof=proof)
    hint = f"; {claim.stale_hint}" if claim.stale_hint else ""
    return Verdict(
        State.UNKNOWN,
        f"the lock names no process and no process has it open; cannot tell who made it{hint}",
    )


def _foreign_reason(claim: Claim, evidence: Evidence, policy: Policy) -> str | None:
    if claim.host and not _same_host(claim.host, evidence.hostname, policy.host_aliases):
        return f"the lock was taken on host {claim.host!r}, not on this host ({evidence.hostname})"
    if claim.pid_namespace is not None and claim.pid_namespace != evidence.pid_namespace:
        return (
            f"PID {claim.pid} is in PID namespace {claim.pid_namespace}, "
            f"not this one ({evidence.pid_namespace})"
        )
    if claim.pid_namespace is None and evidence.nested_pid_namespace:
        return (
            "lockwarden runs in a container's PID namespace and the record does not say "
            f"which namespace PID {claim.pid} belongs to"
        )
    return None


def _same_host(recorded: str, hostname: str, aliases: tuple[str, ...]) -> bool:
    short = hostname.split(".")[0]
    candidates = {hostname, short, "localhost", *aliases}
    return recorded in candidates or recorded.split(".")[0] == short


def _reuse_proof(claim: Claim, start_ticks: int, started_at: datetime) -> str | None:
    if claim.start_ticks is not None and claim.start_ticks != start_ticks:
        return (
            f"PID {claim.pid} now started at tick {start_ticks} after boot, but the record says "
            f"tick {claim.start_ticks}: the process that took the lock is gone"
        )
    if claim.started_at is not None and started_at > claim.started_at + PID_REUSE_MARGIN:
        return (
            f"PID {claim.pid} started at {started_at:%Y-%m-%dT%H:%M:%SZ}, after the lock was "
            f"taken at {claim.started_at:%Y-%m-%dT%H:%M:%SZ}: it is another process"
        )
    return None


def _with_record(holder: Holder, claim: Claim) -> Holder:
    from dataclasses import replace

    return replace(holder, role=claim.role, host=claim.host)


def held_seconds(claim: Claim, verdict: Verdict, evidence: Evidence, now: datetime) -> float | None:
    """How long it has been held: the smallest of the record's age, the lock file's age and the
    holder's running time, so a clock step or a long-lived holder never inflates it. The record
    counts only when it describes this holder (or the stale lock itself)."""
    if verdict.state not in (State.HELD, State.STALE):
        return None
    holder = verdict.holder
    trusted = claim.problem is None
    record_describes_holder = holder is not None and holder.pid == claim.pid
    candidates = []
    if trusted and (record_describes_holder or verdict.state is State.STALE):
        candidates.append(claim.started_at)
    if trusted and claim.existence_is_lock:
        candidates.append(claim.created_at)
    if holder is not None:
        candidates.append(holder.started_at)
    ages = [(now - moment).total_seconds() for moment in candidates if moment is not None]
    usable = [age for age in ages if age >= 0]
    return min(usable) if usable else None


def grade(state: State, held_for: float | None, policy: Policy) -> tuple[State, Severity]:
    if state is State.FREE:
        return state, Severity.OK
    if state is State.UNKNOWN:
        return state, Severity.UNKNOWN
    if state is State.STALE:
        return state, policy.stale_severity
    if held_for is not None and held_for >= policy.critical_after:
        return State.HELD_TOO_LONG, Severity.CRITICAL
    if held_for is not None and held_for >= policy.warn_after:
        return State.HELD_TOO_LONG, Severity.WARNING
    return State.HELD, Severity.OK


def explain(
    name: str, verdict: Verdict, state: State, held_for: float | None, policy: Policy
) -> str:
    holder = verdict.holder.describe() if verdict.holder else None
    if state is State.HELD_TOO_LONG and holder and held_for is not None:
        return (
            f"writes to {name} blocked: {holder} has held the lock for "
            f"{format_duration(held_for)} — stop it"
        )
    if state is State.HELD and holder:
        since = f" for {format_duration(held_for)}" if held_for is not None else ""
        budget = format_duration(policy.warn_after)
        return f"{verdict.reason} by {holder}{since}, within its {budget} budget"
    return verdict.reason


def action_for(state: State, verdict: Verdict, claim: Claim) -> str | None:
    if state is State.STALE and claim.remove_path:
        flag = "-r " if claim.remove_path == claim.path and claim.record_path != claim.path else ""
        return f"rm {flag}-- {shlex.quote(claim.remove_path)}"
    if verdict.holder is None or verdict.holder.pid is None or state is State.STALE:
        return None
    return stop_command(verdict.holder, verdict.sharers)


def stop_command(holder: Holder, sharers: tuple[Holder, ...] = ()) -> str:
    """`systemctl stop UNIT` for a service, else `kill PID` (and every process sharing it)."""
    if holder.unit:
        if holder.user_unit:
            return f"systemctl --user -M {holder.user}@ stop {holder.unit}"
        return f"systemctl stop {holder.unit}"
    pids = [holder.pid, *(sharer.pid for sharer in sharers if sharer.pid is not None)]
    return "kill " + " ".join(str(pid) for pid in pids)


def identity_of(claim: Claim, verdict: Verdict, evidence: Evidence) -> str | None:
    """The incident key's holder part: pid + start ticks + boot id, or the lock's inode and
    record for a holderless lock."""
    holder = verdict.holder
    if holder is not None and holder.pid is not None:
        return f"pid:{holder.pid}:{holder.start_ticks}:{evidence.boot_id}"
    if claim.keys:
        device, inode = claim.keys[0]
        record = claim.pid if claim.pid is not None else "-"
        return f"inode:{device}:{inode}:{record}"
    return None
