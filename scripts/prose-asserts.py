"""Count the test asserts that check prose: a substring (or the start, end or whole) of a
reason, a proof, a command's output, an alert's text or a log line.

    python scripts/prose-asserts.py [--list] [--other] [PATH ...]   (default: tests/)

An assert counts once however many prose checks it makes. A check is prose when it is
`"text" in X` / `"text" not in X`, `X.startswith("text")` / `X.endswith(...)`, `re.search(...,
X)` (match, fullmatch, findall), or `X == "text"`, and X names prose: a finding's words (reason,
proof, note, removal, action line), a command's output or error, an alert's title or body, a
log, the text of a written file. Checks on anything else (a module list, unit directives, a
path, a command line as a list) are not prose; `--other` lists them, so the line between the
two can be checked by eye. The output is one count per family and per file, then the total.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from collections import Counter
from pathlib import Path

FAMILIES = (
    (
        "finding",
        r"reason|proof|notes?\b|removal|\bwhy\b|action|never_remove|found_by|picked\(|advise|describe\(|degraded",
    ),
    ("alert", r"title|bod(y|ies)|message|markdown|alert|payload|\bchat\b|\bmail\b|annotations"),
    ("output", r"stdout|stderr|output|caplog|getvalue|logged|\blines?\b|\btext\b|problems?"),
    ("error", r"^str\("),
    (
        "file",
        r"read_text|read_bytes|journal|\bmoved\b|textfile|written|script|args|comment|block|forged",
    ),
)
# `X == "text"` is prose only where X is words (`finding.state == "held"` is a field).
PROSE_FIELD = r"reason|proof|note|removal|line|title|text|body|markdown|std(out|err)|message"
PROSE_FIELD += r"|summary|picked|describe|advise_holder|output"
# Dictionaries and identifiers whose names look like text.
NOT_TEXT = {"kept.messages", "retried.outgoing[0].message_id", "reminders[0]['message']"}
REGEX_CALLS = {"re.search", "re.match", "re.fullmatch", "re.findall"}


def last_name(node: ast.expr) -> str:
    """`reason` of `finding.reason`, `finding["reason"]` and `reason`; `picked` of `picked(x)`."""
    if isinstance(node, ast.Call):
        return last_name(node.func)
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        return str(node.slice.value)
    return node.id if isinstance(node, ast.Name) else ""


def is_text_literal(node: ast.expr) -> bool:
    """A string or f-string with something in it (`stdout == ""` says nothing was printed)."""
    return isinstance(node, ast.JoinedStr) or (
        isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value != ""
    )


def subjects(test: ast.expr) -> list[ast.expr]:
    """The expressions a text check in this assert looks into."""
    found: list[ast.expr] = []
    for node in ast.walk(test):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            for left, op, right in zip(operands[:-1], node.ops, operands[1:], strict=True):
                if isinstance(op, ast.In | ast.NotIn) and is_text_literal(left):
                    found.append(right)
                elif (
                    isinstance(op, ast.Eq | ast.NotEq)
                    and is_text_literal(right)
                    and re.fullmatch(PROSE_FIELD, last_name(left))
                ):
                    found.append(left)
        elif isinstance(node, ast.Call):
            function = ast.unparse(node.func)
            if function in REGEX_CALLS and len(node.args) >= 2:
                found.append(node.args[1])
            elif (
                isinstance(node.func, ast.Attribute)
                and node.func.attr in ("startswith", "endswith")
                and node.args
                and is_text_literal(node.args[0])
            ):
                found.append(node.func.value)
    return found


def family(subject: ast.expr) -> str | None:
    text = ast.unparse(subject)
    if text in NOT_TEXT:
        return None
    for name, pattern in FAMILIES:
        if re.search(pattern, text):
            return name
    return None


def scan(path: Path) -> list[tuple[int, str, str]]:
    """(line, family, subject) of each prose assert in a file; family "other" for the rest."""
    rows = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Assert):
            continue
        looked_into = subjects(node.test)
        if not looked_into:
            continue
        named = [(family(subject), ast.unparse(subject)) for subject in looked_into]
        prose = [(name, text) for name, text in named if name is not None]
        name, text = prose[0] if prose else ("other", named[0][1])
        rows.append((node.lineno, name, text))
    return sorted(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", default=["tests"])
    parser.add_argument("--list", action="store_true", help="print every prose assert")
    parser.add_argument("--other", action="store_true", help="print the asserts not counted")
    arguments = parser.parse_args()
    files = sorted(
        file
        for path in map(Path, arguments.paths)
        for file in ([path] if path.is_file() else path.rglob("*.py"))
    )
    by_family: Counter[str] = Counter()
    by_file: Counter[str] = Counter()
    for file in files:
        for line, name, text in scan(file):
            wanted = arguments.other if name == "other" else arguments.list
            if wanted:
                print(f"{file}:{line}: {name}: {text[:70]}")
            by_family[name] += 1
            if name != "other":
                by_file[str(file)] += 1
    print("per file:")
    for file, count in by_file.most_common():
        print(f"  {count:4}  {file}")
    print("per family:")
    for name, count in by_family.most_common():
        print(f"  {count:4}  {name}{' (not prose, not counted)' if name == 'other' else ''}")
    print(f"prose asserts: {sum(by_file.values())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
