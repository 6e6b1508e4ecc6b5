"""Observation + clients + policy + now -> Finding, for a database lock: judged here in check,
as a file lock is. Pure: no server, no /proc, no clock.

States as for every lock: `free`, `held` within budget, `held_too_long`, `stale` (only for
Liquibase's row, and only with proof), `unknown` with the reason. The action stops the client
first (its unit, else its PID), and only otherwise ends the session on the server with
`pg_terminate_backend` (never `pg_cancel_backend`, which cancels a query and keeps a session's
locks). A prepared transaction holds its locks with no session: its action is ROLLBACK (or
COMMIT) PREPARED.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime

from lockwarden.check.advice import SQL_ADVICE, advise_holder, needs_action
from lockwarden.check.classify import Policy, budget_words, grade, projected
from lockwarden.check.observation import (
    Backend,
    Client,
    Hold,
    LiquibaseRow,
    Observation,
    Prepared,
    Tree,
    sql_literal,
)
from lockwarden.model import (
    NOT_HELD,
    Bound,
    Finding,
    Held,
    Holder,
    Severity,
    State,
    UnknownCause,
    Waiter,
)
from lockwarden.support.durations import format_duration, format_time

LIQUIBASE_RELEASE = "liquibase release-locks"


Measured = tuple[Held, str | None]
"""How long a lock has been held, and what that figure counts from (`xact_start`, `first
sighting`, ...), which the report names."""


def hold_bound(hold: Hold, now: datetime, first_seen: datetime | None = None) -> Measured:
    """pg_locks records no grant time. A lock of the holder's transaction (every table lock)
    was taken at or after xact_start, and the transaction's age is how long it is held (what
    the budget is measured against). Any other lock was taken at or after backend_start: an
    upper bound only, so a session's lock is known to be held at least since a run first saw
    it (`first_seen`, the sighting memory), or, on MySQL, since an idle session's last command
    ended (a lock is taken by a command, so before that). A prepared transaction took its
    locks before it was prepared: held at least since then."""
    backend = hold.holder
    if backend.prepared is not None and backend.prepared.prepared_at is not None:
        return Held.began(backend.prepared.prepared_at, Bound.AT_LEAST, now), "PREPARE TRANSACTION"
    if hold.transaction_scoped and backend.xact_start is not None:
        # the server's clock may run ahead of ours: then it is just taken
        return Held.began(backend.xact_start, Bound.AT_MOST, now), "xact_start"
    known = first_seen is not None and first_seen <= now
    if backend.backend_start is not None and not hold.transaction_scoped and not known:
        return Held.began(backend.backend_start, Bound.AT_MOST, now), "backend_start"
    lower = [(backend.idle_for_s, "last command")] if backend.idle_for_s is not None else []
    if first_seen is not None and first_seen <= now:
        lower.append(((now - first_seen).total_seconds(), "first sighting"))
    if lower:
        seconds, since = max(lower)
        return Held.of(seconds, Bound.AT_LEAST, now), since
    return NOT_HELD, None


def judge_holds(
    name: str,
    path: str,
    format_name: str,
    observation: Observation,
    clients: Mapping[int, Client],
    policy: Policy,
    now: datetime,
    first_seen: Mapping[str, datetime] | None = None,
    seen_at: datetime | None = None,
    trees: Mapping[int, Tree] | None = None,
) -> Finding:
    """An advisory lock or a table's blocked writers. `first_seen`: the sighting memory of
    this lock (session identity -> the first run that saw it held). `seen_at`: when the server
    answered, which a `--now` what-if projects from (classify.projected). `trees`: by the
    holding backend's PID, what works under its hold (its client's children and their
    sessions), which the action must stop too."""
    base = _blank(name, path, format_name)
    if observation.problem:
        return _unchecked(base, observation)
    if not observation.holds:
        return replace(
            base,
            state=State.FREE,
            severity=Severity.OK,
            reason=f"free: {_free_words(format_name)}",
        )
    hold = max(observation.holds, key=lambda each: (len(each.waiters), _age(each, now)))
    identity = _session_identity(hold.holder)
    earlier = (first_seen or {}).get(identity)
    measured = hold_bound(
        hold, now, earlier if seen_at is None else projected(earlier, seen_at, now)
    )
    held = measured[0]
    state, severity = grade(State.HELD, held.seconds, policy, _graded(hold, measured))
    client = clients.get(hold.holder.pid, Client(None))
    holder = client.holder or _backend_holder(hold.holder)
    tree = (trees or {}).get(hold.holder.pid, Tree())
    return replace(
        base,
        state=state,
        severity=severity,
        reason=_reason(name, hold, client, measured, state, policy, now),
        held=held,
        holder=holder,
        waiters=tuple(_waiter(waiter, clients) for waiter in hold.waiters),
        sharers=(
            *tree.processes,
            *(_backend_holder(other.holder) for other in observation.holds if other is not hold),
        ),
        action=_stop_every_holder(hold, observation.holds, clients, trees)
        if needs_action(state)
        else None,
        identity=identity,
        note=_session_note(hold.holder, client, tree),
    )


def _graded(hold: Hold, measured: Measured) -> Bound:
    """What the budget is measured on: a transaction's age (its locks last as long as it
    does), else only a duration known exactly or as a lower bound (ARCHITECTURE "Never" 7)."""
    held, origin = measured
    if hold.transaction_scoped and origin == "xact_start":
        return Bound.EXACT
    return held.bound


def _unchecked(base: Finding, observation: Observation) -> Finding:
    """The server could not be asked, or did not answer: unknown, saying why."""
    return replace(
        base,
        state=State.UNKNOWN,
        severity=Severity.UNKNOWN,
        reason=f"cannot check {observation.target}: {observation.problem}",
        unknown_cause=UnknownCause.DATABASE,
    )


def _blank(name: str, path: str, format_name: str) -> Finding:
    return Finding(
        name=name, path=path, format=format_name, state=State.FREE, severity=Severity.OK, reason=""
    )


def _session_identity(backend: Backend) -> str:
    """A new session is a new incident. MySQL records no session start: the connection id,
    which the server never reuses while it runs, with the server's start (after a restart its
    ids count from 1 again, and a new session with an old one's id is not the same hold)."""
    if backend.server == "MySQL":
        return f"mysql-connection:{backend.pid}:{_stamp(backend.server_start)}"
    if backend.prepared is not None:
        return f"pg-prepared:{backend.prepared.gid}:{_stamp(backend.prepared.prepared_at)}"
    return f"pg-backend:{backend.pid}:{_stamp(backend.backend_start)}"


def _free_words(format_name: str) -> str:
    if format_name.endswith("table"):
        return "no writer is blocked behind another session's lock"
    return "no session holds it"


def _age(hold: Hold, now: datetime) -> float:
    return hold_bound(hold, now)[0].seconds or 0.0


def _reason(
    name: str,
    hold: Hold,
    client: Client,
    measured: Measured,
    state: State,
    policy: Policy,
    now: datetime,
) -> str:
    who = hold.holder.describe()
    if client.holder is not None:
        who += f" for {client.holder.describe()} on this host"
    held, origin = measured
    duration = (
        f" for {_kind(held.bound)} {format_duration(held.seconds)} (since its {origin})"
        if held.seconds is not None
        else ""
    )
    waiting = f"; {len(hold.waiters)} waiting" if hold.waiters else ""
    if state is State.HELD_TOO_LONG:
        return (
            f"writes to {name} blocked: {hold.what} is held by {who}{duration}{waiting} — stop it"
        )
    at_most = _longest(hold, held, now)
    return (
        f"held: {hold.what} by {who}{duration}{waiting}{budget_words(at_most, policy.warn_after)}"
    )


def _kind(bound: Bound) -> str:
    """`at most`, `at least`: how a database lock's reason words its figure."""
    return bound.value.replace("_", " ")


def _longest(hold: Hold, held: Held, now: datetime) -> float | None:
    """The longest the lock can have been held: an exact or at-most figure, else the session's
    age (a lock is taken after the session starts)."""
    if held.seconds is not None and held.bound in (Bound.EXACT, Bound.AT_MOST):
        return held.seconds
    started = hold.holder.backend_start
    return max((now - started).total_seconds(), 0.0) if started is not None else None


def _backend_holder(backend: Backend) -> Holder:
    """The session itself, when its client is not a process of this host."""
    role = f"{backend.server} {backend.kind} {backend.pid}"
    if backend.prepared is not None:
        role = f"{backend.server} {backend.prepared_text()}"
    return Holder(
        pid=None,
        alive=True,
        role=role,
        host=backend.client_addr,
        user=backend.user,
        cmdline=tuple(text for text in (backend.query_text(),) if text),
        started_at=backend.backend_start,
    )


def _waiter(backend: Backend, clients: Mapping[int, Client]) -> Waiter:
    """A waiting session: its local client's PID when there is one, else the backend's."""
    client = clients.get(backend.pid, Client(None))
    since = f" since {format_time(backend.waiting_since)}" if backend.waiting_since else ""
    text = f"{backend.kind} {backend.pid}{since}: {backend.query_text() or '?'}"
    if client.holder is not None and client.holder.pid is not None:
        return Waiter(pid=client.holder.pid, cmdline=(*client.holder.cmdline[:3], f"[{text}]"))
    return Waiter(pid=backend.pid, cmdline=(f"[{text}]",))


def backend_action(backend: Backend, client: Client, tree: Tree | None = None) -> str:
    """Stop the client (its unit, else its PID and every process below it) first: a killed
    session's client may just reconnect and take the lock again. Otherwise end the session on
    the server. Sessions that work under the lock (a migration tool's child running the
    change) are ended on the server before anything else: a statement runs on after its
    client is gone, and once the holder's session ends the next migrator would start the same
    change beside it."""
    if backend.prepared is not None:
        return _resolve_prepared(backend.prepared)
    tree = tree or Tree()
    terminate = _terminate([backend])
    if client.holder is None or client.holder.pid is None:
        return f"{SQL_ADVICE}{_terminate([*tree.sessions, backend])}"
    client_with_work = replace(client.holder, below=tree.below)
    stop = f"{advise_holder(client_with_work, (), '')} (else, on the server: {terminate})"
    if not tree.sessions:
        return stop
    return f"{SQL_ADVICE}{_terminate(list(tree.sessions))}; then {stop}"


def _stop_every_holder(
    chosen: Hold,
    holds: tuple[Hold, ...],
    clients: Mapping[int, Client],
    trees: Mapping[int, Tree] | None,
) -> str:
    """Each hold's action, the chosen one's first: a writer waits until every holder is gone
    (sessions sharing a lock, several blockers of one table), so stopping one frees nothing."""
    ordered = [chosen, *(each for each in holds if each is not chosen)]
    actions = [
        backend_action(
            each.holder,
            clients.get(each.holder.pid, Client(None)),
            (trees or {}).get(each.holder.pid),
        )
        for each in ordered
    ]
    return "; and ".join(dict.fromkeys(actions))


def _resolve_prepared(prepared: Prepared) -> str:
    """A prepared transaction ends only by COMMIT or ROLLBACK PREPARED, run in its database:
    which of the two is its transaction manager's decision (rolled back, its work is lost)."""
    if prepared.gid is None:
        return (
            f"{SQL_ADVICE}SELECT gid, prepared, owner, database FROM pg_prepared_xacts; "
            "then ROLLBACK PREPARED (or COMMIT PREPARED) the one its transaction manager "
            "abandoned"
        )
    gid = sql_literal(prepared.gid)
    where = f", connected to database {prepared.database}" if prepared.database else ""
    return (
        f"{SQL_ADVICE}ROLLBACK PREPARED {gid}{where} (or COMMIT PREPARED {gid}, as its "
        "transaction manager decided)"
    )


def _terminate(backends: list[Backend]) -> str:
    """What ends these sessions on their server: MySQL's KILL ends the connection (KILL QUERY,
    like pg_cancel_backend, would not)."""
    if backends[0].server == "MySQL":
        return "; ".join(f"KILL {backend.pid}" for backend in backends)
    ends = ", ".join(f"pg_terminate_backend({backend.pid})" for backend in backends)
    return f"SELECT {ends}"


def _session_note(backend: Backend, client: Client, tree: Tree | None = None) -> str:
    if backend.prepared is not None:
        return _prepared_note(backend.prepared)
    facts = [f"backend_start {_stamp(backend.backend_start)}"] if backend.backend_start else []
    tree = tree or Tree()
    if tree.processes or tree.sessions:
        work = [process.describe() for process in tree.processes]
        work += [
            f"{other.kind} {other.pid} {other.query_text() or ''!r}" for other in tree.sessions
        ]
        facts.append(f"works under it: {', '.join(work)}")
    if backend.xact_start is not None:
        facts.append(f"xact_start {_stamp(backend.xact_start)}")
    if backend.query_text():
        facts.append(f"query {backend.query_text()!r}")
    if client.why_not:
        facts.append(f"client not named: {client.why_not}")
    return "; ".join(facts)


def _prepared_note(prepared: Prepared) -> str:
    facts = [f"prepared {_stamp(prepared.prepared_at)}"] if prepared.prepared_at else []
    facts.append(
        "a prepared transaction keeps its locks with no session, through every session's end "
        "and a server restart: ending a backend or a client does not free it"
    )
    return "; ".join(facts)


def _stamp(moment: datetime | None) -> str:
    return format_time(moment) if moment is not None else "unknown"


@dataclass(frozen=True)
class LiquibaseHost:
    """What this host says about a Liquibase row: its names, and Liquibase processes here
    (None when not every process could be read)."""

    names: tuple[str, ...]
    processes: tuple[Holder, ...] | None


def judge_liquibase(
    name: str,
    path: str,
    observation: Observation,
    host: LiquibaseHost,
    policy: Policy,
    now: datetime,
) -> Finding:
    base = _blank(name, path, "liquibase")
    row = observation.liquibase
    if observation.problem:
        return _unchecked(base, observation)
    if row is None or not row.locked:
        return replace(
            base,
            state=State.FREE,
            severity=Severity.OK,
            reason="free: Liquibase's lock row is not locked",
        )
    identity = f"liquibase:{row.locked_by}:{_stamp(row.granted_server_zone)}"
    locked_by = row.locked_by or "nobody named"
    if not names_this_host(row.locked_by, host.names):
        return _liquibase_held(
            base,
            row,
            None,
            policy,
            now,
            identity,
            row.granted_server_zone,
            f"locked by {locked_by}, another host: is its migration running?",
        )
    if host.processes:
        return _liquibase_held(
            base,
            row,
            host.processes[0],
            policy,
            now,
            identity,
            row.granted,
            f"locked by {locked_by} (this host)",
        )
    return _liquibase_left_over(base, row, host, policy, now, identity)


def names_this_host(locked_by: str | None, names: tuple[str, ...]) -> bool:
    """LOCKEDBY is `hostname (ip)` (sometimes with more after it)."""
    if not locked_by:
        return False
    recorded = locked_by.split(" (", 1)[0].strip()
    shorts = {each.split(".")[0] for each in names}
    return recorded in names or recorded.split(".")[0] in shorts


def _liquibase_held(
    base: Finding,
    row: LiquibaseRow,
    process: Holder | None,
    policy: Policy,
    now: datetime,
    identity: str,
    granted: datetime | None,
    who: str,
) -> Finding:
    held = _granted(row, now)
    state, severity = grade(State.HELD, held.seconds, policy, held.bound)
    since = f" for {format_duration(held.seconds)}" if held.seconds is not None else ""
    running = f", {process.describe()} runs Liquibase here" if process else ""
    lead = f"writes to {base.name} blocked: " if state is State.HELD_TOO_LONG else "held: "
    return replace(
        base,
        state=state,
        severity=severity,
        reason=f"{lead}Liquibase's lock row is {who}{running}{since}",
        held=held,
        holder=process,
        action=(
            advise_holder(process, (), "") if process is not None and needs_action(state) else None
        ),
        identity=identity,
        note=f"LOCKGRANTED {_stamp(granted)}",
    )


def _granted(row: LiquibaseRow, now: datetime) -> Held:
    """The row records when its lock was granted (LOCKGRANTED), as a lock whose own record
    dates it, but in a zone it does not name (LiquibaseRow.readings): held exactly since then
    when its readings agree, or only one is not ahead of our clock; else at least since the
    latest that is not, never paged on a reading that may be hours early. A row granted
    ahead of our clock in every reading is just taken."""
    readings = row.readings or ((row.granted,) if row.granted is not None else ())
    past = [moment for moment in readings if moment <= now]
    if not readings:
        return NOT_HELD
    if not past:
        return Held.began(min(readings), Bound.EXACT, now)
    return Held.began(max(past), Bound.EXACT if len(past) == 1 else Bound.AT_LEAST, now)


def _liquibase_left_over(
    base: Finding,
    row: LiquibaseRow,
    host: LiquibaseHost,
    policy: Policy,
    now: datetime,
    identity: str,
) -> Finding:
    """The row names this host and no Liquibase runs here: stale once older than stale_after."""
    age = _granted(row, now).seconds  # since its latest reading: it may be no older
    threshold = policy.stale_after
    cause = UnknownCause.UNPROVEN
    if host.processes is None:
        why = "not every process of this host could be read, so a Liquibase run may be hidden"
        cause = UnknownCause.MISSING_RIGHT
    elif age is None or threshold is None or age < threshold:
        old = "of unknown age" if age is None else f"only {format_duration(max(age, 0.0))} old"
        why = f"no Liquibase process runs here, but the lock is {old}: it may be just starting"
    else:
        proof = (
            f"the row names this host ({row.locked_by}), no Liquibase process runs here, and it "
            f"was locked {format_duration(age)} ago (stale_after {format_duration(threshold)}); "
            "the row is tied to no session, so a crashed run leaves it locked"
        )
        return replace(
            base,
            state=State.STALE,
            severity=policy.stale_severity,
            reason="stale: Liquibase's lock row is left over from a run that is gone",
            held=_granted(row, now),
            proof=proof,
            action=f"{LIQUIBASE_RELEASE} (with this database's connection settings)",
            identity=identity,
            note=f"LOCKGRANTED {_stamp(row.granted)}",
        )
    return replace(
        base,
        state=State.UNKNOWN,
        severity=Severity.UNKNOWN,
        reason=f"Liquibase's lock row is locked by {row.locked_by} (this host): {why}",
        unknown_cause=cause,
        identity=identity,
        note=f"LOCKGRANTED {_stamp(row.granted)}",
    )
