"""A fork server for the reliability tests: it imports lockwarden (and apprise, requests) once,
then runs each requested `lockwarden ARGS` in a freshly forked child process that calls the
real `cli.main`, with its own environment, stdout and stderr files. A child is a real process:
it takes the real run lock, writes the real journal and can be killed by a real SIGKILL.

Why: hundreds of runs (kill -9 at every step, 350 overlapping runs) would spend most of their
time starting the interpreter and importing apprise; a fork costs milliseconds.

Protocol: one JSON line on stdin per batch (a list of jobs started together); one JSON line on
stdout per batch (each job's pid, exit code — negative for a signal — and seconds taken).
A job: {"argv": [...], "env": {...}, "stdout": PATH, "stderr": PATH}; an env entry CRASH_AT =
"STEP[:N]" is not put in the child's environment but makes the checkpoint the run is given
(lockwarden/checkpoints.py) kill the child with SIGKILL the Nth time (default: the first) the
run reaches STEP.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any

from lockwarden.support.checkpoints import Checkpoint, skip

CRASH_AT = "CRASH_AT"


def preload() -> None:
    import apprise  # noqa: F401  (imported here so no child pays for it)
    import requests  # noqa: F401

    import lockwarden.alerts.delivery
    import lockwarden.alerts.heartbeat
    import lockwarden.alerts.notify
    import lockwarden.cli.alert_commands
    import lockwarden.cli.commands
    import lockwarden.output.prometheus  # noqa: F401


def child(job: dict[str, Any]) -> None:
    """In the forked child: become the requested run, then exit with its code."""
    code = 70
    try:
        environment = dict(job.get("env", {}))
        checkpoint = crash_checkpoint(environment.pop(CRASH_AT, None))
        os.environ.update(environment)
        for descriptor, path in ((1, job["stdout"]), (2, job["stderr"])):
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(target, descriptor)
            os.close(target)
        from lockwarden.cli.commands import main

        try:
            code = main(job["argv"], checkpoint=checkpoint)
        except SystemExit as leaving:
            code = leaving.code if isinstance(leaving.code, int) else 1
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # a crash of lockwarden itself: shown in the child's stderr
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
        code = 70
    finally:
        os._exit(code)


def crash_checkpoint(wanted: str | None) -> Checkpoint:
    """STEP[:N]: a checkpoint that kills this process, as `kill -9` would, the Nth time the
    run reaches STEP; none (skip, as in production) when nothing is wanted."""
    if not wanted:
        return skip
    name, _, count = wanted.partition(":")
    remaining = [int(count) if count.isdigit() else 1]

    def checkpoint(step: str) -> None:
        if step != name:
            return
        remaining[0] -= 1
        if remaining[0] == 0:
            os.kill(os.getpid(), signal.SIGKILL)

    return checkpoint


def run_batch(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    started: dict[int, tuple[int, float]] = {}
    for index, job in enumerate(jobs):
        began = time.monotonic()
        pid = os.fork()
        if pid == 0:
            child(job)
        started[pid] = (index, began)
    results: list[dict[str, Any]] = [{} for _ in jobs]
    while started:
        pid, status = os.wait()
        index, began = started.pop(pid)
        code = os.waitstatus_to_exitcode(status)
        results[index] = {"pid": pid, "code": code, "seconds": time.monotonic() - began}
    return results


def serve() -> None:
    preload()
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip():
            print(json.dumps(run_batch(json.loads(line))), flush=True)


if __name__ == "__main__":
    serve()
