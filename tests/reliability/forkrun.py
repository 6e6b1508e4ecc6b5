"""A fork server for the reliability tests: it imports lockwarden (and apprise, requests) once,
then runs each requested `lockwarden ARGS` in a freshly forked child process that calls the
real `cli.main`, with its own environment, stdout and stderr files. A child is a real process:
it takes the real run lock, writes the real journal and can be killed by a real SIGKILL.

Why: hundreds of runs (kill -9 at every step, 350 overlapping runs) would spend most of their
time starting the interpreter and importing apprise; a fork costs milliseconds.

Protocol: one JSON line on stdin per batch (a list of jobs started together); one JSON line on
stdout per batch (each job's pid, exit code — negative for a signal — and seconds taken).
A job: {"argv": [...], "env": {...}, "stdout": PATH, "stderr": PATH}.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any


def preload() -> None:
    import apprise  # noqa: F401  (imported here so no child pays for it)
    import requests  # noqa: F401

    import lockwarden.alert_commands
    import lockwarden.alerting
    import lockwarden.cli
    import lockwarden.heartbeat
    import lockwarden.notify
    import lockwarden.prometheus  # noqa: F401


def child(job: dict[str, Any]) -> None:
    """In the forked child: become the requested run, then exit with its code."""
    code = 70
    try:
        os.environ.update(job.get("env", {}))
        for descriptor, path in ((1, job["stdout"]), (2, job["stderr"])):
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(target, descriptor)
            os.close(target)
        from lockwarden.cli import main

        try:
            code = main(job["argv"])
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
