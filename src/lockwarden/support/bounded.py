"""File-system access under a deadline: a file system that stops answering costs one lock,
never the run.

Every read a run makes on a monitored path (lstat, open, read, readdir, readlink) happens in a
disposable child process that sends each result back over a pipe; the run waits for each one
at most its deadline. When a deadline passes, the child is killed and abandoned, the item is
`Unanswered` with the mount named (from /proc/self/mountinfo, read without touching the mount),
and a new child goes on with the rest, skipping every path on that mount: a mount seen hung is
never touched again in the run.

Why a child process and not a thread (measured on Linux 6.18, a FUSE file system whose getattr
never returns): once the server has taken a request, the thread that made it sleeps in
`request_wait_answer` uninterruptibly, and a process cannot finish exiting while one of its
threads sleeps there. Its main thread exits, but the parent (systemd, cron, `timeout`) never
sees an exit status, and SIGKILL changes nothing. A child stuck the same way is left behind:
the run exits at once, and the child (killed, reparented to init) goes when the mount answers
or its connection is aborted. The child holds none of the caller's descriptors, so a caller
reading the run's output to its end is not kept waiting by it either.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import io
import os
import select
import signal
import struct as binary
import time
from collections import deque
from collections.abc import Callable, Generator, Iterator, Sequence

# The results come from our own fork, so any pickle is trusted.
from pickle import Pickler, Unpickler
from typing import Generic, NamedTuple, TypeVar, cast

Item = TypeVar("Item")
Result = TypeVar("Result")

MOUNTINFO = "/proc/self/mountinfo"
# A message's length, and whether the child's pickler starts afresh with it (see _Sender).
_HEADER = binary.Struct("!I?")
_WORKER_NAME = b"lockwarden-fs"
MESSAGE_TAIL_S = 5.0  # the rest of a message already begun: the child is not stuck
PIPE_BYTES = 1 << 20  # the default fs.pipe-max-size
# What one read takes from the pipe. os.read allocates its whole size first: 1 MiB cost ~12 us a
# read where 64 KiB costs ~1 us, and a parent that keeps up with its child reads about one
# message a wakeup (1,000 claims: ~1,000 reads). A full pipe is still emptied in a few reads.
READ_BYTES = 1 << 16


class Mount(NamedTuple):
    """One line of /proc/self/mountinfo: where a file system is mounted, and its type."""

    point: str
    fstype: str

    def describe(self) -> str:
        return f"{self.point} ({self.fstype})"


class WorkerEnded(Exception):
    """The child ended without answering (it crashed): not a hang, the item gets this error."""

    def __init__(self) -> None:
        super().__init__("the process reading it ended without an answer (run with -v)")


class Unreadable(Exception):
    """The child's answer was sent but could not be unpickled here: most often an exception
    class whose constructor takes other arguments than the message it keeps."""

    def __init__(self, error: Exception) -> None:
        super().__init__(f"its answer could not be read back ({type(error).__name__}: {error})")


class Unanswered(Exception):
    """The file system holding a path did not answer within the deadline."""

    def __init__(self, mount: Mount | None, seconds: float) -> None:
        self.mount = mount
        self.seconds = seconds
        where = mount.describe() if mount is not None else "its mount could not be named"
        super().__init__(
            f"its file system did not answer within {format_seconds(seconds)} "
            f"(a hung mount?): {where}"
        )


def format_seconds(seconds: float) -> str:
    return f"{seconds:g}s"


def read_mounts(path: str = MOUNTINFO) -> tuple[Mount, ...]:
    """Every mount this process sees. A procfs read: it never touches the mounts themselves."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return tuple(mount for line in handle if (mount := parse_mount(line)) is not None)
    except OSError:
        return ()


def parse_mount(line: str) -> Mount | None:
    """`ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER-OPTIONS`."""
    fields = line.split()
    if len(fields) < 7 or "-" not in fields[6:]:
        return None
    separator = fields.index("-", 6)
    if separator + 1 >= len(fields):
        return None
    return Mount(_unescape(fields[4]), fields[separator + 1])


def _unescape(text: str) -> str:
    """mountinfo writes space, tab, newline and backslash in a path as octal escapes."""
    for code in ("040", "011", "012", "134"):
        text = text.replace("\\" + code, chr(int(code, 8)))
    return text


def mount_of(path: str, mounts: Sequence[Mount]) -> Mount | None:
    """The mount a path lies on, by its name alone (resolving symlinks would touch the mount);
    of mounts stacked on one point, the last one listed is the one seen."""
    normal = os.path.normpath(os.path.join("/", path))
    best: Mount | None = None
    for mount in mounts:
        point = mount.point.rstrip("/") or "/"
        inside = normal == point or normal.startswith(point + "/") or point == "/"
        if inside and (best is None or len(point) >= len(best.point.rstrip("/") or "/")):
            best = mount
    return best


class BoundedRun(Generic[Item, Result]):
    """Runs `work` on items in disposable child processes, each item within `timeout(item)`.

    `work(item)` returns its result and further items to do after it (a directory walk's
    subdirectories). Items are done in order; outcomes come back in that order: the result,
    the exception `work` raised, or `Unanswered`.
    """

    def __init__(
        self,
        work: Callable[[Item], tuple[Result, Sequence[Item]]],
        path_of: Callable[[Item], str],
        timeout: Callable[[Item], float],
        mounts: Sequence[Mount] | None = None,
        hung: dict[str, Unanswered] | None = None,
    ) -> None:
        """`hung`: the mounts already seen hung in this run, by mount point (shared with an
        earlier BoundedRun's `hung`: what this one sees hung is added to it)."""
        self.work = work
        self.path_of = path_of
        self.timeout = timeout
        self.mounts = tuple(read_mounts() if mounts is None else mounts)
        self.hung: dict[str, Unanswered] = {} if hung is None else hung
        self._children: list[int] = []

    def run(
        self, items: Sequence[Item]
    ) -> Generator[tuple[Item, Result | BaseException], None, None]:
        """The outcomes, as each comes; closing the generator stops the reading."""
        pending: deque[Item] = deque(items)
        try:
            while pending:
                yield from self._skip_hung(pending)
                if pending:
                    yield from self._one_worker(pending)
        finally:
            self._reap()

    def on_hung_mount(self, item: Item) -> Unanswered | None:
        if not self.hung:  # no mount seen hung in this run: nothing to look up
            return None
        mount = mount_of(self.path_of(item), self.mounts)
        return self.hung.get(mount.point) if mount is not None else None

    def _skip_hung(self, pending: deque[Item]) -> Iterator[tuple[Item, Result | BaseException]]:
        while pending and (hung := self.on_hung_mount(pending[0])) is not None:
            yield pending.popleft(), hung

    def _one_worker(self, pending: deque[Item]) -> Iterator[tuple[Item, Result | BaseException]]:
        """Start a child on `pending` and take its outcomes until it is done or one hangs."""
        reader, writer = os.pipe()
        _widen(writer)
        pid = os.fork()
        if pid == 0:  # the child never returns from here
            os.close(reader)
            self._serve(list(pending), writer)
        os.close(writer)
        self._children.append(pid)
        channel = _Channel(reader)
        try:
            while pending:
                item = pending[0]
                try:
                    message = channel.receive(self.timeout(item))
                except WorkerEnded as ended:
                    yield pending.popleft(), ended
                    return  # a new child goes on with the rest
                except Unreadable as unreadable:
                    # The two memos may no longer match: this child's later answers could
                    # come back as other objects. It is ended and a new one goes on.
                    os.kill(pid, signal.SIGKILL)
                    yield pending.popleft(), unreadable
                    return
                if message is None:
                    os.kill(pid, signal.SIGKILL)  # it dies once the file system lets it go
                    yield pending.popleft(), self._mark_hung(item)
                    return
                outcome, more = message
                pending.popleft()
                pending.extend(cast("Sequence[Item]", more))
                yield item, cast("Result | BaseException", outcome)
                yield from self._skip_hung(pending)  # the child skips them the same way
        finally:
            os.close(reader)

    def _mark_hung(self, item: Item) -> Unanswered:
        mount = mount_of(self.path_of(item), self.mounts)
        unanswered = Unanswered(mount, self.timeout(item))
        if mount is not None:
            self.hung[mount.point] = unanswered
        return unanswered

    def _serve(self, items: list[Item], writer: int) -> None:
        """In the child: do the items in order, sending each outcome, then exit."""
        code = 0
        try:
            _detach()
            sender = _Sender(writer)
            pending = deque(items)
            while pending:
                item = pending.popleft()
                if self.on_hung_mount(item) is not None:
                    continue  # the parent answers these itself
                try:
                    result, more = self.work(item)
                    message: tuple[Result | BaseException, Sequence[Item]] = (result, tuple(more))
                except Exception as error:
                    message = (error, ())
                # What was sent, not what was made: a message that could not be pickled goes
                # as an error with no further items, and the parent adds none either.
                pending.extend(cast("Sequence[Item]", sender.send(message)[1]))
        except BaseException:  # the parent stopped listening, or worse: end here, quietly
            code = 1
        finally:
            os._exit(code)

    def _reap(self) -> None:
        """Collect the children that have ended, without waiting for the others: waiting for
        a finished child to exit costs the run a scheduling delay on a busy host. One not yet
        gone is collected by init once this run exits (a zombie for milliseconds meanwhile);
        one stuck on a file system is already killed and goes when the mount lets it."""
        for pid in self._children:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
        self._children.clear()


def _detach() -> None:
    """The child keeps none of the caller's standard streams (a caller reading the run's
    output to its end must not wait for an abandoned child) and says what it is in `ps`."""
    gc.disable()  # a short life: a collection would only copy the parent's pages for nothing
    null = os.open(os.devnull, os.O_RDWR)
    for stream in (0, 1, 2):
        os.dup2(null, stream)
    os.close(null)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # a parent gone away ends it
    try:
        with open("/proc/self/comm", "wb") as comm:
            comm.write(_WORKER_NAME)
    except OSError:
        pass  # a name in `ps` is a courtesy


def _widen(pipe: int) -> None:
    """A pipe that holds a whole run's answers (1,000 claims are ~175 KB): the child then never
    waits for the parent, and the parent takes them in a few large reads instead of waking
    for each one. A host that caps pipes lower (fs.pipe-max-size) keeps the default 64 KiB."""
    with contextlib.suppress(OSError):
        fcntl.fcntl(pipe, fcntl.F_SETPIPE_SZ, PIPE_BYTES)


class _Sender:
    """The child's end of the pipe: one pickler for all its messages, whose memo lets a message
    refer to what an earlier one sent. A claim's 37 field names, its format's name and the
    like go once per child, not once per lock (1,000 claims: 175 KB, pickled in 2 ms and
    unpickled in 5, where a pickle each took 684 KB, 7 ms and 11). The parent unpickles them
    in order with one unpickler (_Channel). What is sent is never changed afterwards: a claim
    is frozen, and an error or a list of further items is made for its one message."""

    def __init__(self, writer: int) -> None:
        self.writer = writer
        self.stream = io.BytesIO()
        self.pickler = Pickler(self.stream, -1)
        self.fresh = False

    def send(self, message: tuple[object, Sequence[object]]) -> tuple[object, Sequence[object]]:
        """Send the message, or an error in its place when it cannot be pickled; returns
        what was sent."""
        try:
            self.pickler.dump(message)
        except Exception as error:  # an unpicklable result or exception: say what it was
            self._start_afresh()
            message = (RuntimeError(f"{type(error).__name__}: {error}"), ())
            self.pickler.dump(message)
        data = self.stream.getvalue()
        self.stream.seek(0)
        self.stream.truncate()
        payload = _HEADER.pack(len(data), self.fresh) + data
        self.fresh = False
        while payload:
            payload = payload[os.write(self.writer, payload) :]
        return message

    def _start_afresh(self) -> None:
        """A dump that failed may have memoized what the parent never got: a new pickler, and
        the parent told to start a new unpickler with it."""
        self.stream = io.BytesIO()
        self.pickler = Pickler(self.stream, -1)
        self.fresh = True


class _Channel:
    """The parent's end of the pipe: messages taken from a buffer filled by large reads, so a
    child that answers quickly costs one wakeup per burst, not one per item."""

    def __init__(self, reader: int) -> None:
        self.reader = reader
        self.buffer = bytearray()
        self.poller = select.poll()
        self.poller.register(reader, select.POLLIN)
        self.at = 0  # where the unpickler reads in the buffer
        self.unpickler = Unpickler(self)  # one per child: its memo is the child's pickler's

    def receive(self, timeout: float) -> tuple[object, Sequence[object]] | None:
        """The next message; None when it did not come in time; WorkerEnded if the child
        died. A message already begun gets extra time: the child is not stuck then."""
        deadline = _now() + timeout
        while True:
            message = self._take()
            if message is not None:
                return message
            left = deadline - _now()
            if left <= 0 and self.buffer:
                left, deadline = MESSAGE_TAIL_S, _now() + MESSAGE_TAIL_S
            if left <= 0 or not self.poller.poll(left * 1000):
                return None
            chunk = os.read(self.reader, READ_BYTES)
            if not chunk:
                raise WorkerEnded
            self.buffer += chunk

    def _take(self) -> tuple[object, Sequence[object]] | None:
        if len(self.buffer) < _HEADER.size:
            return None
        length, fresh = _HEADER.unpack_from(self.buffer)
        end = _HEADER.size + length
        if len(self.buffer) < end:
            return None
        if fresh:
            self.unpickler = Unpickler(self)
        self.at = _HEADER.size
        try:
            outcome, more = self.unpickler.load()  # from our own fork
        except Exception as error:  # pickled, but not made again here (an odd exception)
            del self.buffer[:end]
            raise Unreadable(error) from error
        if self.at != end:
            raise RuntimeError(f"a message of {length} bytes was read as {self.at - _HEADER.size}")
        del self.buffer[:end]
        return outcome, more

    def read(self, size: int) -> bytes:
        """The unpickler's read, within the message begun at `at`."""
        chunk = bytes(self.buffer[self.at : self.at + size])
        self.at += len(chunk)
        return chunk

    def readline(self) -> bytes:
        """The unpickler's readline (protocol 0 opcodes; the child's pickles use none)."""
        end = self.buffer.find(b"\n", self.at) + 1 or len(self.buffer)
        return self.read(end - self.at)


def _now() -> float:
    return time.monotonic()
