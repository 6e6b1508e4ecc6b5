"""Replace a file so that no reader ever sees part of it: temp file, fsync, rename."""

from __future__ import annotations

import contextlib
import os


def write_atomically(path: str, text: str, mode: int) -> None:
    """Write `text` to a temporary file in `path`'s directory, flush it to disk, set `mode`
    explicitly (a UMask=0077 unit would otherwise decide it), then rename it over `path`.

    The temporary name starts with a dot and ends in `.tmp`, so globbing readers such as
    node-exporter's textfile collector (`*.prom`) never pick it up.
    """
    directory = os.path.dirname(path) or "."
    import tempfile  # a metrics write only, never a quiet run without one

    descriptor, temporary = tempfile.mkstemp(
        dir=directory, prefix=f".{os.path.basename(path)}.", suffix=".tmp"
    )
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    _sync_directory(directory)


def write_new(path: str, text: str, mode: int, replace: bool = False) -> None:
    """Create `path` with `text` and `mode`; an existing file is kept (FileExistsError) unless
    `replace`, which swaps it atomically (write_atomically). What `init` and `discover --write`
    use for the configs they write."""
    if replace:
        write_atomically(path, text, mode)
        return
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(text)
        os.fchmod(handle.fileno(), mode)


def _sync_directory(directory: str) -> None:
    """Make the rename itself durable across a crash."""
    descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
