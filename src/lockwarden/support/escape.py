"""The one way each output format shows text that came from outside: a process's name or
command line, a file name, a cgroup, a lock record, a server's words. Such text is data, never
markup, a header or a line of its own.

* `visible`: plain text (an email body, a report line): control characters, line breaks and
  invisible formatting characters written as escapes (`\\n`), so a value cannot start a line
  that looks like one lockwarden writes (`Action: kill 1`).
* `header`: a mail Subject or a chat title: visible, on one line, and bounded.
* `markdown` and `markdown_code`: a chat message (Markdown, and Slack's mrkdwn, which apprise
  derives from it): visible, and the characters that would make markup inert. `&`, `<` and `>`
  are HTML entities, so neither Slack's `<!channel>` or `<http://evil|click>` nor an HTML tag
  is live (apprise's Slack plugin turns `<`/`>` back into live ones after its own escaping,
  `&gt;` too, but never `&amp;gt;`); emphasis, code and link characters get a backslash; an
  `@` that begins a word is an entity, so `@channel` pings no one.
"""

from __future__ import annotations

import functools
import re

HEADER_LENGTH = 200

# Markdown's inline markup: what a value must not open. `_` only where it can open or close
# emphasis (not inside a word: `wa_store` stays as it is); `@` only where it begins a mention.
_MARKUP = re.compile(r"[\\`*~\[\]]|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])|[&<>]|(?<![\w.+-])@")
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "@": "&#64;"}
# Inside a code span a backslash is literal, so only what Slack and HTML would still read.
_CODE_MARKUP = re.compile(r"[&<>]|(?<![\w.+-])@")


@functools.lru_cache(maxsize=256)  # the holders of many locks are often a few processes
def visible(text: str) -> str:
    """`text` with every character that is not printable (line breaks, tabs, escapes, the
    Unicode line separators and bidirectional overrides) written as its Python escape."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


def header(text: str, limit: int = HEADER_LENGTH) -> str:
    """One bounded line for a mail header or a title: never a header of its own."""
    line = visible(text)
    return line if len(line) <= limit else line[: limit - 1] + "…"


def markdown(text: str) -> str:
    """`text` as Markdown (and Slack mrkdwn) that shows it and does nothing else."""
    return _MARKUP.sub(lambda found: _ENTITIES.get(found[0], "\\" + found[0]), visible(text))


def markdown_code(text: str) -> str:
    """`text` inside a Markdown code span: no backtick to end it early, nothing Slack links
    or pings (a code span shows `&lt;` as it is, the price of a `<` in a command line)."""
    inner = visible(text).replace("`", "'")
    return "`" + _CODE_MARKUP.sub(lambda found: _ENTITIES[found[0]], inner) + "`"


def visible_lines(lines: list[str]) -> str:
    """Terminal text (the report, `why`, `inspect`, `discover`): each composed line made
    `visible` whole, so a file name's newline or cursor movement can neither end it nor forge
    another (in a terminal, ESC [ 1 A moves up a line, ESC [ 2 K erases it)."""
    return "".join(f"{visible(line)}\n" for line in lines)


def is_utf8(text: str) -> bool:
    """Whether `text` is UTF-8 text: a file name that is not reaches lockwarden as surrogate
    escapes, which a TOML config (Unicode only) cannot hold and no UTF-8 writer writes."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
