"""Support for the fault rows: the fork server (forkrun.py) driven from a test, and a small
writer of per-trial configs (many trials share one receiver and one held lock; each trial has
its own lock name, so every message title says which trial sent it)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alerts.helpers import Children, Receiver, cli_env

FORKRUN = str(Path(__file__).with_name("forkrun.py"))
EXIT_BUSY = 75
Job = tuple[list[str], dict[str, str]]  # argv and extra environment of one run


@dataclass(frozen=True)
class Ran:
    pid: int
    code: int
    seconds: float
    stdout: str
    stderr: str

    @property
    def crashed(self) -> bool:
        """Died by a signal or an uncaught exception rather than returning an exit code."""
        return self.code < 0 or self.code == 70 or "Traceback" in self.stderr


class ForkRunner:
    """One fork server per test; every batch of runs is forked from it and waited for."""

    def __init__(self, children: Children, scratch: Path) -> None:
        self.scratch = scratch
        scratch.mkdir(exist_ok=True)
        self.count = 0
        self.server = subprocess.Popen(
            [sys.executable, FORKRUN],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=cli_env(),
        )
        children.procs.append(self.server)  # type: ignore[arg-type]
        assert self.server.stdout is not None
        assert self.server.stdout.readline().strip() == "ready"

    def batch(self, runs: list[Job]) -> list[Ran]:
        """Start every (argv, env) together, wait for all, return each outcome in order."""
        jobs: list[dict[str, Any]] = []
        for argv, env in runs:
            self.count += 1
            out = self.scratch / f"{self.count}.out"
            err = self.scratch / f"{self.count}.err"
            jobs.append({"argv": argv, "env": env, "stdout": str(out), "stderr": str(err)})
        assert self.server.stdin is not None and self.server.stdout is not None
        self.server.stdin.write(json.dumps(jobs) + "\n")
        self.server.stdin.flush()
        results = json.loads(self.server.stdout.readline())
        return [
            Ran(
                result["pid"],
                result["code"],
                result["seconds"],
                Path(job["stdout"]).read_text(errors="replace"),
                Path(job["stderr"]).read_text(errors="replace"),
            )
            for job, result in zip(jobs, results, strict=True)
        ]

    def once(self, config: Path, now: str, *extra: str, **env: str) -> Ran:
        return self.batch([(["--once", "--config", str(config), "--now", now, *extra], env)])[0]


def write_config(
    path: Path,
    lock_name: str,
    lock_path: Path,
    state_path: Path,
    urls: list[str],
    timeout: str = "3s",
    extra: str = "",
) -> Path:
    path.write_text(
        f"""
[alerts]
repeat_interval = "1h"

[state]
path = {json.dumps(str(state_path))}
{extra}

[notify]
urls = {json.dumps(urls)}
timeout = "{timeout}"

[[lock]]
name = "{lock_name}"
path = "{lock_path}"
warn_after = "30m"
critical_after = "1h"
"""
    )
    path.chmod(0o600)
    return path


def titles_for(receiver: Receiver, lock_name: str) -> list[str]:
    """Titles of the payloads about one lock (names end with a space or colon in titles)."""
    return [
        str(p["title"])
        for p in receiver.payloads
        if f" {lock_name} " in f" {p['title']} ".replace(":", " ")
    ]
