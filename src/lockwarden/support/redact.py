"""Secrets out of a command line before lockwarden shows it.

A holder's command line is the process's own argv, and people put passwords there:
`mysql -pSECRET`, `curl -u user:pass`, `--token=...`, `sh -c 'PGPASSWORD=... psql ...'`. Every
report, alert, Alertmanager annotation and journal entry names the holder by its command line,
so that text is redacted here, once, wherever it is shown (`model.command_text` and the JSON
report's `cmdline` list call this module): the secret is replaced by `(hidden)`, the word
`hide_url` shows for an apprise URL's secret, and everything around it stays, so on-call still
sees which job it is. Root who needs the real argv reads /proc/PID/cmdline.

Two kinds of rules, both tables below. Word rules look at argv as words: an option that takes
a secret as the next word (`--password SECRET`), and a few programs' own forms (`mysql
-pSECRET`, `curl -u user:pass`, `sshpass -p SECRET`). Text rules are patterns found inside any
word: `NAME=VALUE` assignments whose name says secret (`PASSWORD=`, `AWS_SECRET_ACCESS_KEY=`,
`--token=`, psql's conninfo `password=`, a URL's `?access_token=`), a URL's `user:pass@`, an
`Authorization: Bearer ...` header, SQL's `PASSWORD '...'`. A word with spaces in it (an `sh -c`
script, a conninfo string) is split into shell words and redacted the same way, so a script's
`--password SECRET` is found too. Redacting is pure, never fails, and redacting twice changes
nothing. It errs towards hiding: a value that only looks like a secret is hidden as well.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable

REDACTED = "(hidden)"

# A NAME says secret when one of its words is one of these (`api_key`, `X-Auth-Token`), or it
# ends in one of the longer ones (`PGPASSWORD`, `GITHUB_TOKEN`, `clientsecret`).
SECRET_WORDS = frozenset(
    {
        "password",
        "passwd",
        "pass",
        "passphrase",
        "pw",
        "token",
        "secret",
        "key",
        "apikey",
        "auth",
        "authorization",
        "credential",
        "credentials",
        "cookie",
        "signature",
    }
)
SECRET_ENDINGS = ("password", "passwd", "passphrase", "token", "secret", "apikey", "credentials")
# A name that says where a secret is, or that there is none, holds no secret itself:
# `--password-file /run/x`, `--password-stdin`, `--no-password`, `PASSWORD_FILE=`.
NOT_SECRET_WORDS = frozenset({"file", "stdin", "env", "fd", "path", "prompt", "cmd", "command"})
NOT_SECRET_PREFIXES = ("no-", "no_", "skip-", "without-", "ask-")

# Programs whose own options carry a secret in a form no general rule knows: the family is
# named by the basename of any earlier word of the same command (`sudo mysql -pX` too).
MYSQL = "mysql"
CURL = "curl"
SSHPASS = "sshpass"
FAMILIES = {
    MYSQL: re.compile(r"(mysql|mariadb)[\w-]*"),
    CURL: re.compile(r"curl"),
    SSHPASS: re.compile(r"sshpass"),
}
# (family, option): the option's attached or next value is a secret. For curl's user options
# only the part after the first colon is (`-u ops:(hidden)`); `-u ops` alone is a prompt.
ATTACHED = {MYSQL: ("-p",), CURL: ("-u", "-U"), SSHPASS: ("-p",)}
NEXT_WORD = {CURL: ("-u", "-U", "--user", "--proxy-user"), SSHPASS: ("-p",)}
USER_AND_PASSWORD = {CURL}
# mysql's `--password` and `-p` without a value prompt: the next word is the database.
PROMPTS = {MYSQL: ("--password", "-p")}
SEPARATORS = frozenset({";", "|", "||", "&", "&&", "(", ")"})

_VALUE = r"""(?:'[^']*'|"[^"]*"|[^\s&;'"]+)"""
# Text rules: (pattern, replacement); each pattern's named group `secret` is what is hidden.
_ASSIGNMENT = re.compile(rf"(?<![\w.-])(?P<name>-{{0,2}}[A-Za-z_][\w.-]*)=(?P<secret>{_VALUE})")
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][\w+.-]*://[^\s/@:'\"]*):(?P<secret>[^\s/@'\"]+)@")
_HEADER = re.compile(
    r"(?P<head>(?<![\w/-])[\w-]*?(?:authorization|token|api-?key|secret|password|cookie)[\w-]*"
    r":(?!//)\s*(?:(?:bearer|basic|token|digest|negotiate)\s+)?)(?P<secret>[^\s'\"][^'\"\n]*)",
    re.IGNORECASE,
)
_SQL_PASSWORD = re.compile(
    r"(?P<head>\b(?:password|identified\s+by)\s+)(?P<secret>'[^']*'|\"[^\"]*\")", re.IGNORECASE
)
# One shell word: unquoted, single- and double-quoted pieces run together.
_SHELL_WORD = re.compile(r"""(?:'[^']*'|"(?:\\.|[^"\\])*"|\\.|[^\s'"\\])+""")
_OPTION = re.compile(r"-{1,2}(?P<name>[A-Za-z][\w.-]+)")
MAX_DEPTH = 4  # `bash -c "sh -c '...'"`: a script nested deeper gets the text rules only


def redact_argv(argv: Iterable[str]) -> tuple[str, ...]:
    """A command line with every secret it shows replaced by `(hidden)`, word for word."""
    return _redacted_argv(tuple(argv))


@functools.lru_cache(maxsize=256)  # the same few holders are shown in every output of a run
def _redacted_argv(argv: tuple[str, ...]) -> tuple[str, ...]:
    return _redact_words(argv, 0)


@functools.lru_cache(maxsize=256)  # the same few holders are shown in every output of a run
def redact_text(text: str) -> str:
    """Any text that may carry a command line (an `sh -c` script, a conninfo string, a
    database session's query): its secrets replaced by `(hidden)`."""
    return _redact_text(text, 0)


def secret_name(name: str) -> bool:
    """Whether an option, variable or header NAME says its value is a secret."""
    lowered = name.lower().lstrip("-")
    if lowered.startswith(NOT_SECRET_PREFIXES):
        return False
    words = [word for word in re.split(r"[-_.]", lowered) if word]
    if not words or words[-1] in NOT_SECRET_WORDS:
        return False
    return any(word in SECRET_WORDS for word in words) or lowered.endswith(SECRET_ENDINGS)


def _redact_text(text: str, depth: int) -> str:
    text = _ASSIGNMENT.sub(_hide_assignment, text)
    text = _URL_PASSWORD.sub(rf"\g<head>:{REDACTED}@", text)
    for pattern in (_HEADER, _SQL_PASSWORD):
        text = pattern.sub(rf"\g<head>{REDACTED}", text)
    if depth >= MAX_DEPTH:  # the text rules only: a script nested deeper is not split
        return text
    matches = list(_SHELL_WORD.finditer(text))
    if len(matches) < 2 and not (matches and _quoted_with_space(matches[0].group())):
        return text
    words = tuple(match.group() for match in matches)
    redacted = _redact_words(words, depth + 1)
    pieces: list[str] = []
    end = 0
    for match, word in zip(matches, redacted, strict=True):
        pieces.extend((text[end : match.start()], word))
        end = match.end()
    pieces.append(text[end:])
    return "".join(pieces)


def _redact_words(words: tuple[str, ...], depth: int) -> tuple[str, ...]:
    """Word rules over `words` (argv, or a script's shell words, quotes kept), then the text
    rules inside each word."""
    out: list[str] = []
    families: set[str] = set()
    hide_next: str | None = None  # the family of the option before, "" for a general one
    for word in words:
        bare = _unquoted(word)
        if hide_next is not None:
            out.append(_hidden_value(word, bare, hide_next in USER_AND_PASSWORD))
            hide_next = None
            continue
        if bare in SEPARATORS:
            families.clear()
        hide_next = _takes_next_secret(bare, families)
        attached = _attached_secret(word, bare, families)
        out.append(attached if attached is not None else _inner(word, depth))
        families.update(_families(bare))
    return tuple(out)


def _takes_next_secret(bare: str, families: set[str]) -> str | None:
    """The family whose option `bare` is followed by a secret ("" for a general option such
    as `--password` or `-token`), or None."""
    for family in families:
        if bare in PROMPTS.get(family, ()):
            return None
    for family in families:
        if bare in NEXT_WORD.get(family, ()):
            return family
    option = _OPTION.fullmatch(bare)
    return "" if option and secret_name(option.group("name")) else None


def _attached_secret(word: str, bare: str, families: set[str]) -> str | None:
    """`-pSECRET` for mysql and sshpass, `-uops:pass` for curl: the word redacted, or None."""
    for family in families:
        for option in ATTACHED.get(family, ()):
            if bare.startswith(option) and len(bare) > len(option) and not bare.startswith("--"):
                value = bare[len(option) :]
                return option + _hidden_value(value, value, family in USER_AND_PASSWORD)
    return None


def _hidden_value(word: str, bare: str, user_first: bool) -> str:
    if user_first:  # `ops:pass` -> `ops:(hidden)`; `ops` alone has no password to hide
        user, colon, _password = bare.partition(":")
        return f"{user}:{REDACTED}" if colon else word
    return REDACTED


def _inner(word: str, depth: int) -> str:
    """The text rules inside one word; a quoted script keeps its quotes around its redaction."""
    if len(word) >= 2 and word[0] == word[-1] and word[0] in "'\"":
        return word[0] + _redact_text(word[1:-1], depth) + word[0]
    return _redact_text(word, depth)


def _families(bare: str) -> set[str]:
    program = os.path.basename(bare)
    return {family for family, pattern in FAMILIES.items() if pattern.fullmatch(program)}


def _unquoted(word: str) -> str:
    return word.replace("'", "").replace('"', "")


def _quoted_with_space(word: str) -> bool:
    return len(word) >= 2 and word[0] == word[-1] and word[0] in "'\"" and " " in word


def _hide_assignment(match: re.Match[str]) -> str:
    if not secret_name(match.group("name")):
        return match.group()
    return f"{match.group('name')}={REDACTED}"
