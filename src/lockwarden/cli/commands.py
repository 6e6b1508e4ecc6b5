"""Command line: argparse, logging, exit codes. The only place that prints errors and exits."""

from __future__ import annotations

import argparse
import atexit
import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from lockwarden import __version__
from lockwarden import config as config_module
from lockwarden.check import sightings
from lockwarden.check.sightings import Memory
from lockwarden.formats import LOCKED_FILE, format_names
from lockwarden.model import Finding, Severity, State
from lockwarden.output.report import json_text, render_blocks, render_json, report_blocks
from lockwarden.pipeline import FileReads, RunResult, inspect_lock, inspect_path
from lockwarden.state.journal import SeenFile, StateError
from lockwarden.support import abandon, logs
from lockwarden.support.checkpoints import Checkpoint, skip
from lockwarden.support.durations import DurationError, format_config_duration, parse_duration
from lockwarden.support.escape import visible
from lockwarden.support.exit_codes import (
    EXIT_BROKEN_PIPE,
    EXIT_BUSY,
    EXIT_CODES_HELP,
    EXIT_CONFIG,
    EXIT_HOLD_HELD,
    EXIT_HOLD_OS_ERROR,
    EXIT_HOLD_STALE,
    EXIT_INTERNAL,
    EXIT_OK,
    EXIT_UNKNOWN,
    EXIT_USAGE,
    HOLD_EXIT_CODES_HELP,
    INSPECT_EXIT_CODES_HELP,
    WHY_EXIT_CODES_HELP,
)

if TYPE_CHECKING:
    from lockwarden.cli.notify_view import NotifyView

log = logging.getLogger("lockwarden")


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """argparse exits 2 on bad usage, which a monitor would read as CRITICAL: use 64."""

    def __init__(self, *args: Any, **keywords: Any) -> None:
        super().__init__(*args, **keywords)

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
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="with --once: decide and print what would be sent; send and write nothing",
    )
    _common(parser, prefix=GLOBAL)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    inspect = commands.add_parser(
        "inspect",
        help="inspect one lock, no config needed",
        description="Inspect one lock or store directory: how old it is, who holds it, "
        "whether that process is alive. With --wait-ms, watch (never acquire) for its release.",
        epilog=INSPECT_EXIT_CODES_HELP,
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
    warn, critical = (
        format_config_duration(config_module.DEFAULT_WARN_AFTER),
        format_config_duration(config_module.DEFAULT_CRITICAL_AFTER),
    )
    inspect.add_argument(
        "--warn-after",
        default=None,
        type=_duration,
        metavar="DURATION",
        help=f"warning budget (default: the configured lock's, else {warn})",
    )
    inspect.add_argument(
        "--critical-after",
        default=None,
        type=_duration,
        metavar="DURATION",
        help=f"critical budget (default: the configured lock's, else {critical})",
    )
    inspect.add_argument(
        "--config",
        metavar="PATH",
        default=None,
        help="judge PATH as this config's [[lock]] of that path does: its format, budgets and "
        f"host aliases (default: {config_module.DEFAULT_PATH}, when it lists PATH)",
    )
    _output(inspect)
    _verbosity(inspect)

    why = commands.add_parser(
        "why",
        help="why a process is stuck: the lock it waits for, and who holds it",
        description="Say whether a process waits on a kernel lock (flock, POSIX or OFD: the\n"
        "call one of its threads is blocked in), follow the lock to its holders, and a holder\n"
        "that waits in turn to the end of the chain (a cycle is a deadlock). A process in no\n"
        "lock call is said to be doing what its state and system call say. Without a PID:\n"
        "every process the kernel lists as waiting on a lock. A process in no lock call whose\n"
        "database session waits on a lock the config watches is followed through the server\n"
        "to the holding session and its client. The exit code is the worst of\n"
        "the locks waited for, judged with the budgets given (0 also when nothing waits).",
        epilog=WHY_EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    why.add_argument("pid", nargs="?", type=_pid, help="the process that is stuck (default: all)")
    why.add_argument(
        "--config",
        metavar="PATH",
        default=None,
        help="follow waits on the database locks this config lists (default: "
        f"{config_module.DEFAULT_PATH}, when it exists)",
    )
    why.add_argument(
        "--database",
        metavar="CONNECTION",
        action="append",
        default=[],
        help="also follow waits on every lock of this PostgreSQL database (a libpq service "
        "name or DSN without a password, as a [[lock]]'s connection; repeatable)",
    )
    why.add_argument(
        "--warn-after",
        default=None,
        type=_duration,
        metavar="DURATION",
        help=f"warning budget (default: {warn}; a database lock's: its configured one)",
    )
    why.add_argument(
        "--critical-after",
        default=None,
        type=_duration,
        metavar="DURATION",
        help=f"critical budget (default: {critical}; a database lock's: its configured one)",
    )
    _output(why)
    _verbosity(why)

    check = commands.add_parser(
        "check-config",
        help="validate the config and print the effective settings",
        description="Validate the config file and print it with every default filled in.",
    )
    _common(check)

    _discover_parser(commands)
    init = commands.add_parser(
        "init",
        help="write a commented starter config for the locks found on this host",
        description="Write a starter config listing the locks found on this host (the "
        "well-known system locks, every file the kernel shows locked now, and known lock "
        "layouts under the DIRECTORIES given), with [defaults] at their defaults and the "
        "optional sections commented out. Refuses to replace an existing file without --force.",
    )
    init.add_argument(
        "directories",
        nargs="*",
        metavar="DIRECTORY",
        help="also look for known lock layouts under these directories",
    )
    init.add_argument(
        "--path",
        default=config_module.DEFAULT_PATH,
        metavar="PATH",
        help=f"where to write it (default: {config_module.DEFAULT_PATH})",
    )
    init.add_argument("--force", action="store_true", help="replace an existing file")
    _verbosity(init)
    _hold_parser(commands)
    notify_test = commands.add_parser(
        "notify-test",
        help="send a test message to every configured service and report each result",
        description="Send a test message to every configured notification service (or those "
        "tagged --tag) and say, per service, whether apprise delivered it. Exit 0 when all did.",
    )
    notify_test.add_argument("--tag", action="append", default=[], help="only services tagged T")
    _common(notify_test)

    history = commands.add_parser(
        "history",
        help="show incidents from the state journal",
        description="List incidents from the state journal: when each opened, its reminders, "
        "when it resolved, and every delivery result.",
    )
    history.add_argument("--lock", default=None, metavar="NAME", help="only this lock")
    _common(history)

    commands.add_parser(
        "demo",
        help="show a real blocked write and its diagnosis (about 3 s)",
        description="Make a temporary store, let a real child process hold its lock as "
        "'maintenance-job' for 2 s, show a write blocked behind it and lockwarden naming the "
        "holder, then the same write succeeding once the holder exits. Cleans up after itself.",
    )
    return parser


def _discover_parser(commands: Any) -> None:
    discover = commands.add_parser(
        "discover",
        help="find candidate locks on this host and show their state",
        description="List every file the kernel's lock table holds, and the lock layouts "
        "(owner records: a LOCK, lock or .lock directory or file naming its holder; Chromium "
        "and Firefox profiles, Mercurial and borg repositories, Emacs .#FILE locks) under the "
        "directories given, each with its detected format and current state. Nothing is "
        "locked or changed. With --write, save them as a config that check-config accepts.",
    )
    discover.add_argument("directories", nargs="*", metavar="DIR", help="directories to walk")
    discover.add_argument("--write", metavar="PATH", help="write the candidates as a config")
    discover.add_argument(
        "--force", action="store_true", help="let --write replace an existing file"
    )
    discover.add_argument(
        "--max-depth", type=_non_negative_int, default=6, metavar="N", help="walk depth (6)"
    )
    discover.add_argument(
        "--database",
        action="append",
        default=[],
        metavar="CONNECTION",
        help="also list the locks this PostgreSQL server shows (a libpq service name or DSN; "
        "the password from ~/.pgpass or PGPASSFILE): advisory locks held or awaited, the "
        "migration tools' locks, Liquibase's lock table, tables with a blocked writer",
    )
    _output(discover)
    _verbosity(discover)


def _hold_parser(commands: argparse._SubParsersAction[_Parser]) -> None:
    hold = commands.add_parser(
        "hold",
        help="take a lock, recorded and watched, for the time COMMAND runs",
        description="Create the lock at PATH (mkdir, or a file with --file) with an owner record "
        "naming this supervisor's PID, ROLE, host, boot id and COMMAND; run COMMAND in the "
        "foreground; remove the lock once it, and every process it started that still has the "
        "lock open, have exited, however they exit. `kill PID` of the supervisor stops COMMAND "
        "and frees the lock.",
        epilog=HOLD_EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="lockwarden hold PATH --role ROLE [options] -- COMMAND [ARGS...]",
    )
    hold.add_argument("path", help="the lock itself (e.g. STORE/LOCK), created by hold")
    hold.add_argument("--role", required=True, help="what the holder is doing (e.g. re-sync)")
    hold.add_argument(
        "--max-hold", type=_duration, metavar="DURATION", help="declared limit: warn past it"
    )
    hold.add_argument(
        "--wait",
        default="0",
        type=_duration,
        metavar="DURATION",
        help="wait this long for a holder to let go (default: 0, fail at once)",
    )
    hold.add_argument("--file", action="store_true", help="a lock file, not a lock directory")
    hold.add_argument(
        "--break-stale",
        action="store_true",
        help="remove a lock whose holder is provably gone, then take it",
    )
    hold.add_argument(
        "--kill-after",
        type=_duration,
        metavar="DURATION",
        help="send COMMAND SIGTERM this long after it started, SIGKILL after grace",
    )
    hold.add_argument(
        "--kill-grace",
        default="10s",
        type=_duration,
        metavar="DURATION",
        help="time between SIGTERM and SIGKILL (default: 10s)",
    )
    hold.add_argument(
        "--warn-every",
        default="1m",
        type=_duration,
        metavar="DURATION",
        help="repeat the --max-hold warning this often (default: 1m)",
    )
    _verbosity(hold)


# The top level's --config/--json/--now land under these names, so that `lockwarden --json
# inspect X` can be told from `lockwarden inspect X --json` and moved to the subcommand (or
# refused when the subcommand has no such option) instead of being silently dropped.
GLOBAL = "global_"
GLOBAL_OPTIONS = ("config", "json", "now")


def _common(parser: argparse.ArgumentParser, prefix: str = "") -> None:
    parser.add_argument(
        "--config",
        dest=f"{prefix}config",
        metavar="PATH",
        default=None,
        help=f"config file (default: {config_module.DEFAULT_PATH}; when it does "
        "not exist, the well-known system locks on this host are checked)",
    )
    _output(parser, prefix)
    _verbosity(parser)


def _output(parser: argparse.ArgumentParser, prefix: str = "") -> None:
    parser.add_argument(
        "--json", dest=f"{prefix}json", action="store_true", help="print a JSON document, not text"
    )
    parser.add_argument(
        "--now",
        dest=f"{prefix}now",
        type=_timestamp,
        default=None,
        metavar="RFC3339",
        help="pretend the current time is this, e.g. 2026-12-03T18:00:00Z (UTC when it has no "
        "offset; for tests and what-ifs)" + (_ONCE_NOW if prefix == GLOBAL else ""),
    )


_ONCE_NOW = (
    "; --once also journals it as the time of its sightings and alerts: add --dry-run for a "
    "what-if that writes nothing"
)


def merge_global_options(arguments: argparse.Namespace) -> None:
    """Options written before the subcommand apply to it, or are a usage error when it has no
    such option; `--once`/`--dry-run` never combine with a subcommand."""
    command = arguments.command
    for name in GLOBAL_OPTIONS:
        value = getattr(arguments, GLOBAL + name)
        if command is None:
            setattr(arguments, name, value)
        elif value not in (None, False):
            if not hasattr(arguments, name):
                raise UsageError(f"--{name} does not apply to '{command}'")
            if getattr(arguments, name) in (None, False):
                setattr(arguments, name, value)
    if command is not None and (arguments.once or arguments.dry_run):
        flag = "--once" if arguments.once else "--dry-run"
        raise UsageError(f"{flag} does not combine with '{command}'; run 'lockwarden {flag}' alone")


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


def _duration(text: str) -> float:
    """A duration option's seconds; argparse names the option in the error."""
    try:
        return parse_duration(text)
    except DurationError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    return value


def split_hold_command(argv: list[str]) -> tuple[list[str], list[str]]:
    """`hold PATH ... -- COMMAND ARGS`: everything after the first `--` is COMMAND, untouched
    (argparse would read COMMAND's own options as lockwarden's)."""
    if "hold" not in argv or "--" not in argv or argv.index("--") < argv.index("hold"):
        return argv, []
    split = argv.index("--")
    return argv[:split], argv[split + 1 :]


def run() -> int:
    """The `lockwarden` command (pyproject's entry point, and `python -m lockwarden`)."""
    return leave(main())


def leave(code: int) -> int:
    """End the process with `code` without interpreter finalisation, once what it would
    still do that anyone can see is done: the exit handlers run (logging's flushes and closes
    its handlers) and the standard streams are flushed. What is skipped is freeing every
    object of every module one by one: ~12 ms of a quiet run's CPU, twice the bare
    interpreter's own (benchmarks/run.py's floor), for lockwarden's classes and functions;
    the kernel takes the memory back at once. While a thread that is no daemon runs, it
    returns `code` instead, and Python's own exit waits for that thread.

    A send or a database check past its deadline may still wait in a socket (abandon.py):
    then not even the exit handlers run, for one could wait on a lock that thread holds, and
    finalisation can crash under a daemon thread still inside C code."""
    main_thread = threading.main_thread()
    if any(not each.daemon and each is not main_thread for each in threading.enumerate()):
        return code
    if not abandon.left_running():
        atexit._run_exitfuncs()  # what Python's own exit runs, in the same order
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a reader gone, a stream closed
            stream.flush()
    os._exit(code)


def main(argv: Sequence[str] | None = None, checkpoint: Checkpoint = skip) -> int:
    """The command line. `checkpoint`: called at each step of a `--once` run
    (checkpoints.py; the reliability tests stop runs there)."""
    parser = build_parser()
    before, command = split_hold_command(list(sys.argv[1:] if argv is None else argv))
    arguments = parser.parse_args(before)
    arguments.command_args = command
    verbose = getattr(arguments, "verbose", False)
    handler = logs.configure(verbose, sys.stderr, os.environ)
    try:
        merge_global_options(arguments)
        return dispatch(parser, arguments, checkpoint)
    except config_module.ConfigError as error:
        for problem in error.problems:
            log.error("config error: %s", problem)
        return EXIT_CONFIG
    except UsageError as error:
        log.error("error: %s", error)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`lockwarden --once | head`): like a shell pipeline, say SIGPIPE,
        # and keep Python from complaining again when it flushes stdout at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except Exception as error:  # a health check that crashes must say so, as a failure
        log.debug("internal error", exc_info=True)
        log.error(
            "UNKNOWN: internal error: %s: %s (run with -v for the traceback)",
            type(error).__name__,
            visible(str(error)),
        )
        return EXIT_INTERNAL
    finally:
        # lockwarden used as a library after this call: its lines go where the application
        # sends them again, not to this call's stderr handler.
        logs.release(handler)


def dispatch(
    parser: argparse.ArgumentParser,
    arguments: argparse.Namespace,
    checkpoint: Checkpoint = skip,
) -> int:
    if arguments.command == "inspect":
        return command_inspect(arguments)
    if arguments.command == "why":
        return command_why(arguments)
    if arguments.command == "check-config":
        return command_check_config(arguments)
    if arguments.command == "discover":
        return command_discover(arguments)
    if arguments.command == "init":
        return command_init(arguments)
    if arguments.command == "hold":
        return command_hold(arguments)
    if arguments.command in ("notify-test", "history"):
        from lockwarden.cli import alert_commands

        config = load_config(arguments.config)
        if arguments.command == "notify-test":
            config = as_the_unit(config)
            output = alert_commands.notify_test(
                config, arguments.tag, now_of(arguments), arguments.json
            )
        else:
            output = alert_commands.history(config, arguments.lock, arguments.json)
        sys.stdout.write(output.stdout)
        if output.error:
            print(f"lockwarden: {output.error}", file=sys.stderr)
        return output.code
    if arguments.command == "demo":
        from lockwarden.cli.demo import run_demo

        return run_demo()
    if arguments.once:
        return command_once(arguments, checkpoint)
    parser.print_help(sys.stderr)
    given = [option for option in ("dry_run", "json") if getattr(arguments, option, False)]
    needs = f"--{given[0].replace('_', '-')} needs --once" if given else "nothing to do"
    sys.stderr.write(f"lockwarden: error: {needs}: give --once or a COMMAND (see above)\n")
    return EXIT_USAGE


def load_config(path: str | None) -> config_module.Config:
    """--config PATH must exist; the default path may be absent (then: built-in defaults)."""
    if path is None and not os.path.exists(config_module.DEFAULT_PATH):
        return config_module.builtin()
    from lockwarden.config.secrets import config_file_problem, readable_secrets_warning

    untrusted = config_file_problem(path or config_module.DEFAULT_PATH)
    if untrusted is not None:  # its writer would decide what root does: not read at all
        raise config_module.ConfigError([untrusted])
    config = config_module.load(path or config_module.DEFAULT_PATH)
    warning = readable_secrets_warning(config)
    if warning:
        log.warning("%s", warning)
    return config


def command_once(arguments: argparse.Namespace, checkpoint: Checkpoint = skip) -> int:
    from lockwarden.run import once
    from lockwarden.state.journal import RunBusy

    config = as_the_unit(load_config(arguments.config), announce=False)
    started = time.monotonic()
    try:
        alerted = once(config, now_of(arguments), arguments.dry_run, checkpoint)
    except RunBusy as busy:
        from lockwarden.cli import alert_commands  # what a busy, dry or JSON run prints

        holder = alert_commands.run_lock_holder(busy, now_of(arguments))
        journal = logs.writes_to_journal(sys.stderr, os.environ)
        # Real time, not --now: a wedged run (a child stuck on a hung mount keeps the lock's
        # descriptor) is stuck by the wall clock.
        stuck = alert_commands.stuck_message(busy, holder, datetime.now(UTC))
        if stuck is not None:  # a finding of its own: nothing is watched while it lasts
            print(f"{'<3>' if journal else ''}lockwarden: error: {stuck}", file=sys.stderr)
            return EXIT_UNKNOWN
        message = alert_commands.busy_message(busy, now_of(arguments), holder)
        # At notice, not info: a run lock that stays held skips every run in silence else.
        notice = "<5>" if journal else ""
        print(
            f"{notice}lockwarden: {message}; this run exits without doing anything", file=sys.stderr
        )
        return EXIT_BUSY
    duration = time.monotonic() - started
    result = alerted.result
    log.info("checked %d locks in %.3f s: %s", len(result.findings), duration, result.status.label)
    if arguments.dry_run or arguments.json:
        from lockwarden.cli import alert_commands  # what only a dry or a JSON run prints

        if arguments.dry_run:
            sys.stdout.write(alert_commands.render_dry_run(alerted, arguments.json))
        else:
            sys.stdout.write(alert_commands.render_once_json(alerted))
    else:
        emit(result, arguments.json)
    sys.stdout.flush()
    if not config.locks and not config.builtin:
        if not config.host.blocked_writers:
            # A check that watches nothing must not read as OK to a monitor.
            log.warning("%s lists no [[lock]]: nothing was checked", config.source)
            return EXIT_UNKNOWN
        log.info("%s lists no [[lock]]: only blocked writers were looked for", config.source)
    return int(result.status)


# Where systemd's LoadCredential=NAME looks for a credential of a system service.
SYSTEM_CREDSTORES = ("/etc/credstore", "/run/credstore", "/usr/lib/credstore")


def the_units_credential(
    settings: config_module.NotifySettings,
    environ: Mapping[str, str],
    stores: Sequence[str] | None = None,
    announce: bool = True,
) -> config_module.NotifySettings:
    """`--once`, check-config and notify-test, run by root in a shell, read the notify
    credential where LoadCredential= finds it for lockwarden.service (systemd passes
    $CREDENTIALS_DIRECTORY to the service alone), as the service would: when the config sets no
    urls_file. Only that credential, which the shipped unit loads; the line printed says which
    file. Unchanged with a $CREDENTIALS_DIRECTORY given (even empty), for another user, or with
    none found. `stores`: where to look (default SYSTEM_CREDSTORES, read at each call)."""
    if settings.urls_file is not None or "CREDENTIALS_DIRECTORY" in environ:
        return settings
    if os.geteuid() != 0:
        return settings
    for store in SYSTEM_CREDSTORES if stores is None else stores:
        path = os.path.join(store, config_module.NOTIFY_CREDENTIAL)
        if os.path.isfile(path):
            said = f"reading {path}, as LoadCredential= passes it to lockwarden.service"
            if announce:  # check-config, notify-test: a person asked where alerts go
                print(f"lockwarden: {said}", file=sys.stderr)
            else:  # --once: a root cron job runs it every minute; -v shows it
                log.info("%s", said)
            return replace(settings, urls_file=path)
    return settings


def as_the_unit(config: config_module.Config, announce: bool = True) -> config_module.Config:
    """The config as a run under lockwarden.service sees it: with the unit's notify credential
    when run by hand (the_units_credential). Every command that alerts or says where alerts go
    (`--once`, check-config, notify-test) takes its services from here, so they agree.
    `announce`: say on stderr which credential was read (else only with -v)."""
    from lockwarden.config.secrets import credential_warnings

    notify = the_units_credential(config.notify, os.environ, announce=announce)
    stores = SYSTEM_CREDSTORES if os.geteuid() == 0 else ()  # only root may look in them
    for warning in credential_warnings(notify, os.environ, stores):
        log.warning("%s", warning)
    return replace(config, notify=notify)


def command_check_config(arguments: argparse.Namespace) -> int:
    from lockwarden.cli.notify_view import notify_view, unit_credential_unseen

    try:
        config = load_config(arguments.config)
    except config_module.ConfigError as error:  # the notify URLs too, so all is said at once
        where = arguments.config or config_module.DEFAULT_PATH
        notify = None if error.notify is None else the_units_credential(error.notify, os.environ)
        urls = [] if notify is None else _notify_problems(notify_view(notify), error.locks, where)
        raise config_module.ConfigError(error.problems + urls) from None
    unit = as_the_unit(config)
    unseen = unit_credential_unseen(unit.notify, SYSTEM_CREDSTORES)
    view = notify_view(unit.notify, () if unseen is None else (unseen,))
    problems = runtime_problems(unit, view)
    if problems:  # the same form as a config error: FILE: key: message, exit 78
        raise config_module.ConfigError(problems)
    source = config.source or "built-in defaults (no config file)"
    document = config_module.effective(config)
    if arguments.json:
        import json

        from lockwarden.cli.notify_view import services_document

        whole = {"source": source, "config": document} | services_document(view)
        print(json.dumps(whole, indent=2))
    else:
        import tomli_w  # only check-config writes TOML; a run every minute should not load it

        from lockwarden.cli.notify_view import render_services

        count = len(config.locks)
        print(f"# effective configuration from {source}: valid, {count} lock{'s' * (count != 1)}")
        print(tomli_w.dumps(document))
        print(render_services(view), end="")
    return EXIT_OK


def runtime_problems(config: config_module.Config, view: NotifyView) -> list[str]:
    """What a valid file still cannot do at run time: notify URLs apprise's own parser rejects
    (checked without sending), a lock whose notify_tags no service carries, a state directory
    a run would refuse, and a Prometheus textfile directory it cannot write."""
    from lockwarden.state.journal import state_dir_problem
    from lockwarden.support.trusted import write_problem

    where = config.source or "built-in defaults"
    problems = _notify_problems(view, list(enumerate(config.locks, start=1)), where)
    state_problem = state_dir_problem(config.state.directory)  # every run saves its sightings
    if state_problem:
        problems.append(f"{where}: state.path: {state_problem}")
    problems.extend(_password_file_problems(config, where))
    textfile = config.prometheus_textfile
    directory = os.path.dirname(textfile) if textfile else None
    if directory and not os.path.isdir(directory):
        problems.append(
            f"{where}: prometheus.textfile: its directory {directory} does not exist (make it, "
            "or point this at node-exporter's --collector.textfile.directory)"
        )
    elif directory and not os.access(directory, os.W_OK | os.X_OK):
        problems.append(
            f"{where}: prometheus.textfile: its directory {directory} is not writable by uid "
            f"{os.geteuid()}, which each run needs to replace the file"
        )
    elif directory and (untrusted := write_problem(directory)) is not None:
        problems.append(f"{where}: prometheus.textfile: a run refuses to write there: {untrusted}")
    return problems


def _password_file_problems(config: config_module.Config, where: str) -> list[str]:
    """A database lock's password_file that cannot be read here (its check would be unknown
    every run); a credential only the service sees is named in a warning, and one that other
    users can read is warned about as a config holding secrets is."""
    problems = []
    for number, lock in enumerate(config.locks, start=1):
        name = lock.database.password_file if lock.database is not None else None
        if name is None:
            continue
        key = f"lock[{number}].password_file"
        path = config_module.credential_file(name, os.environ)
        if path is None:
            log.warning(
                "%s: %r is a systemd credential, which only the service sees, so it "
                "was not checked",
                key,
                name,
            )
            continue
        try:
            with open(path, "rb") as handle:
                mode = os.fstat(handle.fileno()).st_mode
        except OSError as error:
            problems.append(f"{where}: {key}: cannot read {path}: {error.strerror}")
            continue
        if mode & 0o044:
            log.warning(
                "%s: %s is readable by other users (mode %04o): chmod 0600 %s",
                key,
                path,
                mode & 0o7777,
                path,
            )
    return problems


def _notify_problems(
    view: NotifyView,
    locks: Sequence[tuple[int, config_module.LockConfig]],
    where: str,
) -> list[str]:
    """The notify URLs apprise's own parser rejects (checked without sending), and the locks
    whose notify_tags no service carries."""
    if view.error is not None:
        return [f"{where}: {view.error}"]
    problems = [f"{where}: {bad.origin}: {bad.shown}: {bad.problem}" for bad in view.unusable]
    if view.notifier is not None and view.complete:  # every service was read: routing known
        notifier = view.notifier
        problems.extend(
            f"{where}: lock[{number}].notify_tags: {why}: its alerts would reach nobody"
            for number, lock in locks
            if (why := notifier.unrouted(lock.notify_tags)) is not None
        )
    return problems


def command_discover(arguments: argparse.Namespace) -> int:
    """Exit 0 whatever the locks' states: discovery lists, `--once` judges."""
    from lockwarden.cli.discover import (
        discover_locks,
        discovery_document,
        render_discovery,
        write_config,
    )
    from lockwarden.procfs.reader import HostReader, wall_clock

    now = now_of(arguments)
    discovery = discover_locks(
        arguments.directories,
        HostReader(wall_clock),
        now,
        arguments.max_depth,
        databases=arguments.database,
    )
    if arguments.json:
        sys.stdout.write(json_text(discovery_document(discovery)))
    else:
        sys.stdout.write(render_discovery(discovery))
    if arguments.write:
        try:
            write_config(arguments.write, discovery, now, force=arguments.force)
        except FileExistsError:
            raise UsageError(f"{arguments.write} exists; pass --force to replace it") from None
        print(f"wrote {len(discovery.candidates)} locks to {arguments.write}", file=sys.stderr)
    return EXIT_OK


def command_init(arguments: argparse.Namespace) -> int:
    from lockwarden.cli import sample_config

    path = os.path.abspath(arguments.path)
    candidates = sample_config.host_candidates(arguments.directories)
    text = sample_config.render_starter(candidates, path)
    try:
        sample_config.write_new_config(path, text, arguments.force)
    except FileExistsError:
        raise UsageError(f"{path} already exists; pass --force to replace it") from None
    except OSError as error:
        raise UsageError(f"cannot write {path}: {error.strerror or error}") from None
    print(
        f"wrote {path} with {len(candidates)} locks found on this host; "
        f"check it with: lockwarden check-config --config {path}"
    )
    return EXIT_OK


def _configured_lock(
    path: str, config_path: str | None
) -> tuple[config_module.LockConfig, str, config_module.Config] | None:
    """The [[lock]] of this path in the config given, or in the default config when there is
    one, with that config's path and the config (its state directory). A default config that
    cannot be loaded is said, not fatal: `inspect` needs no config."""
    if config_path is None and not os.path.exists(config_module.DEFAULT_PATH):
        return None
    try:
        config = load_config(config_path)
    except config_module.ConfigError as error:
        if config_path is not None:
            raise
        log.warning("not using %s for its locks' budgets: %s", config_module.DEFAULT_PATH, error)
        return None
    for lock in config.locks:
        if lock.database is None and _same_lock(lock.path, path):
            return lock, config.source or config_module.DEFAULT_PATH, config
    return None


def _runs_sightings(
    configured: tuple[config_module.LockConfig, str, config_module.Config], path: str, now: datetime
) -> Memory:
    """What the config's runs have seen of the lock (their sighting memory, read, never
    written), under the name `inspect` gives it: a hold they have seen for a while is as old to
    `inspect` as to their next run, which pages on it. A memory that cannot be read is said,
    not fatal: the lock is judged without it, as a first run; so is one on a file system that
    does not answer within fs_timeout, which would stall `inspect` where no deadline reaches."""
    lock, _source, config = configured
    directory = config.state.directory
    probe = FileReads((), 0, directory, config.fs_timeout)  # no lock: the directory's probe only
    try:
        unusable = probe.state_problem()
    finally:
        probe.close()
    try:
        record = SeenFile(directory, unusable).load()
    except StateError as error:
        log.warning("not using the runs' sighting memory: %s", error)
        return Memory()
    latest = sightings.last_seen([record]) if record is not None else None
    remembered = sightings.memory(latest, now, {lock.name: sightings.longest_gap(lock.warn_after)})
    series = remembered.series.get(lock.name)
    below = remembered.below.get(lock.name)
    return Memory({} if series is None else {path: series}, {} if below is None else {path: below})


def _same_lock(configured: str, path: str) -> bool:
    """A configured path names the inspected lock: the same path, or the store directory of a
    `STORE/LOCK` (never just any file's directory: /var/lock is not /var/lock/backup.lock)."""
    from lockwarden.formats import STORE_LOCK_NAMES

    wanted = os.path.abspath(configured)
    store = os.path.basename(wanted) in STORE_LOCK_NAMES and path == os.path.dirname(wanted)
    return path == wanted or store


def _inspected_lock(
    path: str,
    arguments: argparse.Namespace,
    configured: tuple[config_module.LockConfig, str, config_module.Config] | None,
) -> tuple[config_module.LockConfig, tuple[str, ...]]:
    """The lock `inspect` judges: the configured one (budgets given on the command line still
    win), else one of the path with the budgets given or the defaults."""
    if configured is None:
        warn_after, critical_after = _budgets(arguments)
        lock = config_module.LockConfig(
            name=path,
            path=path,
            format=arguments.format,
            warn_after=warn_after,
            critical_after=critical_after,
        )
        return lock, ()
    lock, source, _config = configured
    warn_after, critical_after = _budgets(arguments, lock.warn_after, lock.critical_after)
    lock = replace(
        lock,
        name=path,
        warn_after=warn_after,
        critical_after=critical_after,
        format=lock.format if arguments.format == "auto" else arguments.format,
    )
    budgets = (
        f"warn after {format_config_duration(warn_after)}, critical after "
        f"{format_config_duration(critical_after)}"
    )
    return lock, (f"judged as [[lock]] {configured[0].name!r} of {source}: {budgets}",)


def _budgets(
    arguments: argparse.Namespace,
    warn: float = config_module.DEFAULT_WARN_AFTER,
    critical: float = config_module.DEFAULT_CRITICAL_AFTER,
) -> tuple[float, float]:
    """--warn-after and --critical-after (each defaulting to the budget given), checked."""
    warn_after = warn if arguments.warn_after is None else arguments.warn_after
    critical_after = critical if arguments.critical_after is None else arguments.critical_after
    if warn_after > critical_after:
        raise UsageError(
            f"--warn-after {format_config_duration(warn_after)} is longer than --critical-after "
            f"{format_config_duration(critical_after)}; a warning must come first (raise "
            "--critical-after too)"
        )
    return warn_after, critical_after


def command_inspect(arguments: argparse.Namespace) -> int:
    path = os.path.abspath(arguments.path)
    configured = _configured_lock(path, arguments.config)
    lock, notes = _inspected_lock(path, arguments, configured)
    seen = _runs_sightings(configured, path, now_of(arguments)) if configured else None

    def look() -> RunResult:
        # inspect journals nothing: a later --now asks what a run would say
        return inspect_lock(lock, now_of(arguments), what_if=True, notes=notes, remembered=seen)

    result = look()
    if arguments.wait_ms and _blocking(result):
        result = _watch(look, result, arguments.wait_ms)
    emit(result, arguments.json, command="inspect")
    return int(result.status)


def command_why(arguments: argparse.Namespace) -> int:
    from lockwarden.cli import why

    warn_after, critical_after = _budgets(arguments)
    now = now_of(arguments)

    def inspect(path: str) -> Finding:
        found = inspect_path(path, now, LOCKED_FILE, warn_after, critical_after, name=path)
        return found.findings[0]

    databases = _database_looks(arguments, now)
    silent: list[str] = []
    if arguments.pid is not None:
        pids = [arguments.pid]
    else:
        looked = databases() if databases is not None else []
        silent = why.unanswered(looked)
        pids = sorted({*why.waiting_pids(), *why.database_waiting_pids(looked)})
        hidden = why.hidden_waiters()
        if hidden is not None:
            log.warning("%s", hidden)
    walk = why.Walk(inspect, databases=databases)  # one per `why`: each lock judged once
    answers = [why.answer(pid, walk) for pid in pids]
    if arguments.json:
        sys.stdout.write(why.render_json(answers, now))
    else:
        sys.stdout.write(why.render_text(answers))
    for problem in silent:  # no waiter there is known: not the same as none
        log.error("%s", problem)
    worst = max((item.severity for item in answers), default=Severity.OK)
    return int(max(worst, Severity.UNKNOWN) if silent and worst < Severity.CRITICAL else worst)


def _database_looks(
    arguments: argparse.Namespace, now: datetime
) -> Callable[[], list[Finding]] | None:
    """The config's database locks, judged as its runs judge them (with --warn-after and
    --critical-after when given), asked of their servers once and only when needed; None when
    there are none (a default config that cannot be loaded is said, not fatal)."""
    configured = _configured_database_locks(arguments.config)
    given = _given_databases(arguments)
    if not configured and not given:
        return None
    if arguments.warn_after is not None or arguments.critical_after is not None:
        configured = [  # a budget not given stays the lock's own
            replace(lock, warn_after=warn, critical_after=critical)
            for lock in configured
            for warn, critical in [_budgets(arguments, lock.warn_after, lock.critical_after)]
        ]
    cache: list[list[Finding]] = []

    def looks() -> list[Finding]:
        if not cache:
            from lockwarden.databases.check import inspect_waits
            from lockwarden.pipeline import inspect_locks, policy_for
            from lockwarden.procfs.reader import HostReader, wall_clock

            host = HostReader(wall_clock)
            found = list(inspect_locks(configured, host, now)) if configured else []
            for lock in given:  # every wait chain of that database: one finding each
                found.extend(inspect_waits(lock, policy_for(lock), host, now))
            cache.append(found)
        return cache[0]

    return looks


def _configured_database_locks(path: str | None) -> list[config_module.LockConfig]:
    """The database locks of the config given, or of the default one when there is one (a
    default config that cannot be loaded is said, not fatal: `why` needs no config)."""
    if path is None and not os.path.exists(config_module.DEFAULT_PATH):
        return []
    try:
        config = load_config(path)
    except config_module.ConfigError as error:
        if path is not None:
            raise
        log.warning("not following database waits: %s: %s", config_module.DEFAULT_PATH, error)
        return []
    return [lock for lock in config.locks if lock.database is not None]


def _given_databases(arguments: argparse.Namespace) -> list[config_module.LockConfig]:
    """--database CONNECTION: every lock wait of that PostgreSQL database (check/observation
    WAITS), judged with the budgets given."""
    from lockwarden.check.observation import WAITS
    from lockwarden.config.schema import check_connection

    warn_after, critical_after = _budgets(arguments)
    locks = []
    for connection in arguments.database:
        if connection.startswith("mysql://"):
            raise UsageError(
                "--database follows PostgreSQL's lock waits only; for MySQL, list the lock "
                "as a [[lock]] with database = 'mysql' and pass --config"
            )
        try:  # a password on a command line is in every `ps`: refused, as in a config
            check_connection(connection)
        except ValueError as error:
            raise UsageError(f"--database: {error}") from None
        watch = config_module.DatabaseWatch("postgresql", connection, WAITS, "any lock")
        locks.append(
            config_module.LockConfig(
                name=f"waits on {connection}",
                path=watch.describe(),
                format="postgresql",
                warn_after=warn_after,
                critical_after=critical_after,
                database=watch,
            )
        )
    return locks


def _pid(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a process ID")
    return int(text)


def command_hold(arguments: argparse.Namespace) -> int:
    from lockwarden.holding import hold as holding

    command = arguments.command_args
    if not command:
        raise UsageError("hold needs a COMMAND after --")
    supervision = holding.Supervision(
        max_hold_s=arguments.max_hold,
        warn_every_s=arguments.warn_every,
        kill_after_s=arguments.kill_after,
        kill_grace_s=arguments.kill_grace,
    )
    wait_s: float = arguments.wait

    def warn(message: str) -> None:
        print(f"lockwarden hold: {message}", file=sys.stderr, flush=True)

    try:
        return holding.hold_command(
            os.path.abspath(arguments.path),
            arguments.role,
            command,
            as_file=arguments.file,
            wait_s=wait_s,
            break_stale=arguments.break_stale,
            supervision=supervision,
            warn=warn,
        )
    except holding.HoldError as error:
        warn(str(error))
        return _hold_exit_code(error)


def _hold_exit_code(error: Exception) -> int:
    from lockwarden.holding import hold as holding

    if isinstance(error, holding.Interrupted):
        return 128 + error.signal_number
    if isinstance(error, holding.LockStale):
        return EXIT_HOLD_STALE
    if isinstance(error, holding.LockHeld):
        return EXIT_HOLD_HELD
    return EXIT_HOLD_OS_ERROR


def _blocking(result: RunResult) -> bool:
    return result.findings[0].state in (State.HELD, State.HELD_TOO_LONG, State.STALE)


def _watch(look: Callable[[], RunResult], first: RunResult, wait_ms: int) -> RunResult:
    """Poll (never acquire) until the lock is released or the wait is over; say which."""
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
    note = f"still held after waiting {wait_ms} ms"
    return replace(result, notes=(*result.notes, note))


def emit(result: RunResult, as_json: bool, command: str = "once") -> None:
    if as_json:
        sys.stdout.write(render_json(result, command))
    else:
        colour = sys.stdout.isatty() and "NO_COLOR" not in os.environ
        journal = logs.writes_to_journal(sys.stdout, os.environ)
        blocks = report_blocks(result, colour)
        if journal:  # entries with fields; what could not be sent goes to the stream
            from lockwarden.output import journal as native

            blocks = blocks[native.send(blocks) :]
        sys.stdout.write(render_blocks(blocks, journal))
    sys.stdout.flush()


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())


__all__ = ["EXIT_BUSY", "EXIT_CONFIG", "EXIT_USAGE", "Severity", "main"]
