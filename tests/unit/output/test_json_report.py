"""The JSON report's unknown_cause: the model's causes, the schema's and the documented ones."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import REPORT_SCHEMA
from factories import make_finding
from lockwarden.model import RemovalStep, Severity, State, UnknownCause
from lockwarden.output.report import finding_document

JSON_DOCS = Path(__file__).resolve().parents[3] / "docs" / "json.md"


def test_the_schema_allows_exactly_the_models_causes() -> None:
    lock = json.loads(REPORT_SCHEMA.read_text())["$defs"]["lock"]["properties"]
    assert lock["unknown_cause"]["enum"] == [None, *(cause.value for cause in UnknownCause)]


def documented_values(header: str) -> list[str]:
    """The first column of the table in docs/json.md whose header starts with `header`."""
    table = JSON_DOCS.read_text().split(f"| `{header}` |", 1)[1].split("\n\n", 1)[0]
    return re.findall(r"^\| `([a-z_]+)` \|", table, re.MULTILINE)


def test_the_json_docs_explain_every_cause() -> None:
    assert documented_values("unknown_cause") == [cause.value for cause in UnknownCause]


def test_the_json_docs_explain_every_removal_step() -> None:
    assert documented_values("step") == [step.value for step in RemovalStep]


@pytest.mark.parametrize("cause", [UnknownCause.NO_ANSWER, None])
def test_a_finding_carries_its_cause_into_the_document(cause: UnknownCause | None) -> None:
    state = State.FREE if cause is None else State.UNKNOWN
    finding = make_finding(state=state, severity=Severity.UNKNOWN, unknown_cause=cause)
    assert finding_document(finding)["unknown_cause"] == (cause and cause.value)
