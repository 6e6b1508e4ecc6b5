"""Command line: argparse, logging, exit codes. The only place that prints errors and exits."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from lockwarden import __version__
from lockwarden import config as config_module
from lockwarden.durations import DurationError, parse_duration
from lockwarden.entry import LocksPrefetch
from lockwarden.formats import format_names
from lockwarden.model import Severity, State
from lockwarden.report import render_json, render_text
from lockwarden.run import RunResult, inspect_path, run_once

log = logging.getLogger("lockwarden")

EXIT_OK = 0
EXIT_WARNING = 1
EXIT_CRITICAL = 2
EXIT_UNKNOWN = 3
EXIT_USAGE = 64
EXIT_CONFIG = 78

EXIT_CODES_HELP = """\
exit codes (the Nagios plugin convention, so --once also works as a Nagios/Icinga check):
  0   ok: every lock is free or held within its budget
  1   warning: a lock is held past warn_after
  2   critical: a lock is held past critical_after, or is stale
  3   unknown: lockwarden could not tell (the reason is printed), or an internal error
  64  usage error: bad command-line arguments
  78  configuration error: every problem is printed, one per line, with file and key
"""


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """argparse exits 2 on bad usage, which a monitor would read as CRITICAL: use 64."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(EXIT_USAGE)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="lockwarden",
        description=(
            "Inspect exclusive store locks: say who holds each one, whether that process is "
            "alive, for how long, and what to stop."
        ),
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"lockwarden {__version__}")
    parser.add_argument(
        "--once", action="store_true", help="check every configured lock once, report, and exit"
    )
    _common(parser)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    inspect = commands.add_parser(
        "inspect",
        help="inspect one lock, no config needed",
        description="Inspect one lock or store directory: how old it is, who holds it, "
        "whether that process is alive. With --wait-ms, watch (never acquire) for its release.",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    inspect.add_argument("path", help="the lock file, lock directory, or the store directory")
    inspect.add_argument(
        "--format",
        default="auto",
        choices=format_names(),
        help="the lock's format (default: auto, which says what it picked)",
    )
    inspect.add_argument(
        "--wait-ms",
        type=_non_negative_int,
        default=0,
        metavar="N",
        help="watch up to N ms for the lock to be released (default: 0)",
    )
    inspect.add_argument("--warn-after", default="15m", help="warning budget (default: 15m)")
    inspect.add_argument("--critical-after", default="1h", help="critical budget (default: 1h)")
    _output(inspect)
    _verbosity(inspect)

    check = commands.add_parser(
        "check-config",
        help="validate the config and print the effective settings",
        description="Validate the config file and print it with every default filled in.",
    )
    _common(check)

    commands.add_parser(
        "demo",
        help="show a real blocked write and its diagnosis (about 3 s)",
        description="Make a temporary store, let a real child process hold its lock as "
        "'maintenance-job' for 2 s, show a write blocked behind it and lockwarden naming the "
        "holder, then the same write succeeding once the holder exits. Cleans up after itself.",
    )
    return parser


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        metavar="PATH",
        default=None,
        help=f"config file (default: {config_module.DEFAULT_PATH}; when it does "
        "not exist, the well-known system locks on this host are checked)",
    )
    _output(parser)
    _verbosity(parser)


def _output(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print a JSON document, not text")
    parser.add_argument(
        "--now",
        type=_timestamp,
        default=None,
        metavar="RFC3339",
        help="pretend the current time is this (for tests and what-ifs)",
    )


def _timestamp(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an RFC 3339 time") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def now_of(arguments: argparse.Namespace) -> datetime:
    return arguments.now or datetime.now(UTC)


def _verbosity(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="log details, and the traceback of an internal error",
    )


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    return value


def main(argv: Sequence[str] | None = None, locks: LocksPrefetch | None = None) -> int:
    """`locks`: /proc/locks already being read (see entry.py); None reads it when needed."""
    parser = build_parser()
    arguments = parser.parse_args(argv)
    verbose = getattr(arguments, "verbose", False)
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING,
        format="lockwarden: %(levelname)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return dispatch(parser, arguments, locks)
    except config_module.ConfigError as error:
        for problem in error.problems:
            print(f"lockwarden: config error: {problem}", file=sys.stderr)
        return EXIT_CONFIG
    except UsageError as error:
        print(f"lockwarden: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except Exception as error:  # a health check that crashes must still say UNKNOWN
        log.debug("internal error", exc_info=True)
        print(
            f"lockwarden: UNKNOWN: internal error: {type(error).__name__}: {error} "
            "(run with -v for the traceback)",
            file=sys.stderr,
        )
        return EXIT_UNKNOWN


def dispatch(
    parser: argparse.ArgumentParser,
    arguments: argparse.Namespace,
    locks: LocksPrefetch | None = None,
) -> int:
    if arguments.command == "inspect":
        return command_inspect(arguments)
    if arguments.command == "check-config":
        return command_check_config(arguments)
    if arguments.command == "demo":
        from lockwarden.demo import run_demo

        return run_demo()
    if arguments.once:
        return command_once(arguments, locks)
    parser.print_help(sys.stderr)
    return EXIT_USAGE


def load_config(path: str | None) -> config_module.Config:
    """--config PATH must exist; the default path may be absent (then: built-in defaults)."""
    if path is not None:
        return config_module.load(path)
    if os.path.exists(config_module.DEFAULT_PATH):
        return config_module.load(config_module.DEFAULT_PATH)
    return config_module.builtin()


def command_once(arguments: argparse.Namespace, locks: LocksPrefetch | None = None) -> int:
    config = load_config(arguments.config)
    locks_text = locks.text() if locks is not None else None
    result = run_once(config, now_of(arguments), locks_text=locks_text)
    emit(result, arguments.json)
    return int(result.status)


def command_check_config(arguments: argparse.Namespace) -> int:
    config = load_config(arguments.config)
    source = config.source or "built-in defaults (no config file)"
    document = config_module.effective(config)
    if arguments.json:
        import json

        print(json.dumps({"source": source, "config": document}, indent=2))
    else:
        import tomli_w  # only check-config writes TOML; a run every minute should not load it

        print(f"# effective configuration from {source}: valid, {len(config.locks)} locks")
        print(tomli_w.dumps(document), end="")
    return EXIT_OK


def command_inspect(arguments: argparse.Namespace) -> int:
    try:
        warn_after = parse_duration(arguments.warn_after)
        critical_after = parse_duration(arguments.critical_after)
    except DurationError as error:
        raise UsageError(str(error)) from None
    path = os.path.abspath(arguments.path)

    def look() -> RunResult:
        return inspect_path(path, now_of(arguments), arguments.format, warn_after, critical_after)

    result = look()
    if arguments.wait_ms and _blocking(result):
        result = _watch(look, result, arguments.wait_ms)
    emit(result, arguments.json)
    return int(result.status)


def _blocking(result: RunResult) -> bool:
    return result.findings[0].state in (State.HELD, State.HELD_TOO_LONG, State.STALE)


def _watch(look: Callable[[], RunResult], first: RunResult, wait_ms: int) -> RunResult:
    """Poll (never acquire) until the lock is released or the wait is over; say which."""
    from dataclasses import replace

    print(
        f"lockwarden: watching {first.findings[0].path} for up to {wait_ms} ms ...", file=sys.stderr
    )
    started = time.monotonic()
    deadline = started + wait_ms / 1000
    result = first
    while time.monotonic() < deadline:
        time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
        result = look()
        if not _blocking(result):
            waited = (time.monotonic() - started) * 1000
            note = f"released after {waited:.0f} ms of the {wait_ms} ms wait"
            return replace(result, notes=(*result.notes, note))
    note = f"still held after waiting {wait_ms} ms; waiting longer will not help — stop the holder"
    return replace(result, notes=(*result.notes, note))


def emit(result: RunResult, as_json: bool) -> None:
    if as_json:
        sys.stdout.write(render_json(result))
    else:
        colour = sys.stdout.isatty() and "NO_COLOR" not in os.environ
        sys.stdout.write(render_text(result, colour=colour))
    sys.stdout.flush()


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())


__all__ = ["EXIT_CONFIG", "EXIT_USAGE", "Severity", "main"]
