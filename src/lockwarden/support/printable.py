"""One line of text for a terminal, from whatever a process, a file name, a cgroup, a record or
a server said.

A file name may hold a newline, a carriage return, an escape sequence that moves the cursor
or erases a line, a right-to-left override: printed raw, it forges the lines around it (a
previous finding's `action` reads `kill -9 -1` in a terminal). Every line the text outputs
print (the report, `why`, `inspect`, `discover`) passes through `printable` once it is
composed, so a character no terminal should act on shows as its Python escape (`\\n`,
`\\x1b`, `\\u202e`; a byte of a non-UTF-8 file name as `\\udcff`) and the line stays one line.
"""

from __future__ import annotations

import functools


@functools.lru_cache(maxsize=256)  # the holders of many locks are often a few processes
def printable(text: str) -> str:
    """`text` with every character that is not printable (str.isprintable: control, format,
    separator other than the space, surrogate, unassigned) written as its escape."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


def printable_lines(lines: list[str]) -> str:
    """Lines (each one composed line, of any text) as terminal text, one per `\\n`."""
    return "".join(f"{printable(line)}\n" for line in lines)
