"""One run's state, opened once: the run lock, the journal loaded once, the sighting memory's
file, the fallback journal, and the one list of state problems.

Every stage of a run reads the journal's records from here and appends through here; none
opens or loads the journal itself. A problem (an unreadable journal, a refused write) is
added to `problems`, the one channel the run reports from: stages only read it.

The fallback journal lives in the runtime directory (state/runtime.py). A record the state
journal cannot take goes there instead, and so does every later one: a journal that loads but
cannot be written (read-only, full) then still remembers what this run sent, and the next run
does not send it again. While the state journal cannot be read, the run decides on the
fallback's records; once it can, they are appended to it and the fallback is removed.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from lockwarden.state.journal import Journal, RunBusy, RunLock, SeenFile, StateError
from lockwarden.state.records import JournalRecord, SeenRecord
from lockwarden.state.runtime import private_directory, runtime_directory
from lockwarden.support.checkpoints import Checkpoint, skip

if TYPE_CHECKING:
    from lockwarden.state.history import History

log = logging.getLogger(__name__)

Keep = Callable[[list[JournalRecord]], list[JournalRecord]]


class RunState:
    """The state of one run. `open` takes the run lock (a run that writes), checks the state
    directory and loads the journal; `close` releases both."""

    def __init__(
        self,
        journal: Journal,
        records: list[JournalRecord],
        problems: list[str],
        run_lock: RunLock | None = None,
        writes: bool = False,
    ) -> None:
        self.state_journal = journal
        self.journal = journal  # where appends go: the state journal, or the fallback
        self.records = records  # what the journal held at the start, and what this run added
        self.problems = problems
        self.run_lock = run_lock
        self.writes = writes
        self.broken = False  # an append failed and no fallback took it: nothing more is tried
        self.fallback: Journal | None = None
        self._said_malformed = False
        self.seen_file = SeenFile(journal.directory, journal.unusable)
        self.seen: SeenRecord | None = None  # the sighting memory, as the last run left it

    @classmethod
    def open(
        cls,
        path: str,
        max_bytes: int = 262144,
        unusable: str | None = None,
        writes: bool = False,
        checkpoint: Checkpoint = skip,
        fallback: bool = False,
    ) -> RunState:
        """`writes`: this run appends (alerting, removal, Alertmanager, not a dry run): it
        takes the run lock (raising RunBusy when another run holds it) and may create the
        state directory. `unusable`: why the state directory is not to be touched at all (its
        file system did not answer); every access then fails at once with that. `fallback`:
        a run that sends alerts keeps what its journal cannot take in the fallback journal."""
        journal = Journal(path, max_bytes, unusable, checkpoint)
        problems: list[str] = []
        run_lock = _take_run_lock(journal) if writes and unusable is None else None
        state = cls(journal, [], problems, run_lock, writes)
        refused = writes and _refused(journal, problems)  # then nothing in it is read
        if not refused:
            try:
                if writes or unusable is not None or os.path.lexists(journal.path):
                    state.records = journal.load().records
            except StateError as error:
                problems.append(str(error))
        if unusable is None and not refused:  # else the journal's load said why already
            try:
                state.seen = state.seen_file.load()
            except StateError as error:
                problems.append(str(error))
        if fallback and writes:
            state.use_fallback()
        return state

    def history(self) -> History:
        """The records so far, folded. What the fold could not read is said once per run, at
        warning: what it said is not known, so a duplicate alert may follow."""
        from lockwarden.state.history import fold  # a quiet run folds nothing

        history = fold(self.records)
        if not self._said_malformed:
            self._said_malformed = True
            for problem in history.malformed:
                log.warning("%s: %s; what it said was left out", self.journal.path, problem)
        return history

    def append(self, record: JournalRecord) -> None:
        """Append to the journal (the fallback once the journal refused); after a failure with
        no fallback to take it, stop trying: the problem is said once, in `problems`."""
        if self.broken:
            return
        try:
            self.journal.append(record)
        except StateError as error:
            self.problems.append(str(error))
            if not self._fall_back():
                self.broken = True
                return
            self.append(record)
            return
        self.records.append(record)

    def _fall_back(self) -> bool:
        fallback = self.fallback
        if (
            fallback is None
            or fallback is self.journal
            or not private_directory(fallback.directory)
        ):
            return False
        self.journal.close()
        self.journal = fallback
        return True

    def replace_seen(self, record: SeenRecord, durable: bool) -> str | None:
        """Write the sighting memory's record in place of the last (state/journal.SeenFile),
        its failure returned rather than added to `problems`: the memory says for itself what
        not saving it means. A run that holds no run lock (alerting off) takes it for this
        write alone; a busy lock means another run is recording the same, and a file another
        run replaced since this one read it, with later sightings, is left as it is.

        A journal an earlier version appended `seen` records to is compacted without them once
        the file holds the memory: nothing else would ever compact a journal a run with
        alerting off no longer writes to."""
        holds = self.run_lock is not None
        run_lock = None
        try:
            if not holds:
                run_lock = RunLock.acquire(self.state_journal.directory)
                if self._overtaken(record):
                    return None
            self.seen_file.replace(record, durable)
            self.seen = record
            self._drop_journaled_seen()
        except RunBusy:
            return None
        except StateError as error:
            return str(error)
        finally:
            self.state_journal.close()
            if run_lock is not None:
                run_lock.release()
        return None

    def _overtaken(self, record: SeenRecord) -> bool:
        """Whether another run wrote the sighting file after this one read it (a run without
        the run lock reads it unlocked, at the start), with sightings later than this run's:
        theirs stand. Replacing them with this run's older ones could bring back a series a
        later run saw end, and date a new hold from its start. A record that was already
        there when this run read it is replaced whatever its time (one a run given a future
        --now left must not stop every later run from saving)."""
        try:
            current = self.seen_file.load()
        except StateError:
            return False  # the replacement says what is wrong
        if current is None:
            return False
        read_at = None if self.seen is None else self.seen.at
        return current.at != read_at and current.at > record.at

    def _drop_journaled_seen(self) -> None:
        """Compact the journal without the `seen` records an earlier version appended to it,
        once the sighting file holds the memory. A journal that cannot be rewritten (a full
        disk) keeps them until a run can: the memory itself is saved, so this is said at
        warning, not as a memory lost."""
        if not any(isinstance(record, SeenRecord) for record in self.records):
            return
        try:
            self.state_journal.compact(_without_seen)
        except StateError as error:
            log.warning("%s; its old sighting records stay until a run can", error)
            return
        self.records = _without_seen(self.records)

    def use_fallback(self) -> None:
        """The runtime directory's journal, for a run that writes: decide on its records while
        the state journal cannot be read (and write there); once it can, append them to it and
        remove the fallback (a journal that still refuses keeps the run on the fallback)."""
        fallback = _fallback_journal(self.state_journal)
        self.fallback = fallback
        if fallback is None or (not os.path.lexists(fallback.path) and not self.problems):
            return  # the usual run: nothing to remember from a degraded one
        if not private_directory(fallback.directory):
            return
        try:
            remembered = fallback.load().records
        except StateError as error:
            log.debug("no fallback journal: %s", error)
            return
        if self.problems:
            self.journal, self.records = fallback, remembered
            return
        try:
            for record in remembered:
                self.state_journal.append(record)
        except StateError as error:
            self.problems.append(str(error))
            self.state_journal.close()
            self.journal, self.records = fallback, self.records + remembered
            return
        _remove_quietly(fallback.path)
        self.records = self.records + remembered

    def compact(self, keep: Keep) -> None:
        """Compact the journal appends go to, when it is due (never after a failed write)."""
        if self.broken or not self.journal.needs_compaction():
            return
        try:
            dropped = self.journal.compact(keep)
            log.debug("compacted %s: %d records dropped", self.journal.path, dropped)
        except StateError as error:
            self.problems.append(str(error))

    def why_no_run_lock(self) -> str | None:
        """Why a run that writes holds no run lock (its state directory is unusable)."""
        if not self.writes or self.run_lock is not None:
            return None
        try:
            self.state_journal.check_directory()
        except StateError as error:
            return str(error)
        return f"the run lock in {self.state_journal.directory} could not be taken"

    def close(self) -> None:
        self.journal.close()
        self.state_journal.close()
        if self.run_lock is not None:
            self.run_lock.release()
            self.run_lock = None


def _without_seen(records: list[JournalRecord]) -> list[JournalRecord]:
    return [record for record in records if not isinstance(record, SeenRecord)]


def _refused(journal: Journal, problems: list[str]) -> bool:
    """Whether a writing run must not use the state directory (made here when only its last
    part is missing: only a run that will write may create it); why is added to `problems`."""
    try:
        journal.check_directory()
    except StateError as error:
        problems.append(str(error))
        return True
    return False


def _take_run_lock(journal: Journal) -> RunLock | None:
    """The run lock (RunBusy when another run holds it); None when the state directory is
    unusable (the load that follows says why)."""
    try:
        return RunLock.acquire(journal.directory)
    except StateError:
        return None


def _fallback_journal(journal: Journal) -> Journal | None:
    """The runtime directory's journal. Nothing is made until it is needed. None without a
    runtime directory (then an unusable state journal means a repeat each run)."""
    directory = runtime_directory(journal.path)
    if directory is None:
        return None
    return Journal(os.path.join(directory, "state.jsonl"), journal.max_bytes)


def _remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError as error:  # the next run appends its records again: a duplicate, not a loss
        log.debug("cannot remove %s: %s", path, error.strerror)
