"""support/checkpoints.py: the named steps of a run. Each step the table names is one a run
really reaches (a checkpoint call with that name in the package), and no run calls a step the
table does not name; the reliability tests kill a run at each listed step, so a listed step
nobody reaches would make that test pass without testing anything."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import lockwarden
from lockwarden.support.checkpoints import STEPS, skip

PACKAGE = Path(lockwarden.__file__).parent
# A step is named as a string literal: checkpoint("x"), self.checkpoint("x"), or handed to the
# journal's two-halves writer, _write_half(..., "x").
CALL = re.compile(r"""(?:checkpoint|_write_half)\([^()]*?"([a-z-]+)"\)""")


def steps_named_in_the_package() -> set[str]:
    named: set[str] = set()
    for source in PACKAGE.rglob("*.py"):
        named.update(CALL.findall(source.read_text(encoding="utf-8")))
    return named


def test_the_steps_are_distinct() -> None:
    assert len(set(STEPS)) == len(STEPS)


def test_every_listed_step_is_reached_by_a_run_and_no_other_is() -> None:
    assert steps_named_in_the_package() == set(STEPS)


@pytest.mark.parametrize("step", STEPS)
def test_skip_does_nothing_at_any_step(step: str) -> None:
    assert skip(step) is None
