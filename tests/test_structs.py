"""`lockwarden.structs` behaves like `dataclasses` wherever lockwarden relies on it.

Each behaviour is checked against a real `@dataclass` of the same declaration, so a difference
between the two (not just a crash) fails.
"""

from __future__ import annotations

import dataclasses
import pickle
import subprocess
import sys
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lockwarden.model import Claim, Finding, Holder, Severity, State
from lockwarden.structs import FrozenInstanceError, asdict, field, replace, struct


@struct
class Point:
    """A frozen struct with every kind of field."""

    x: int
    y: int = 0
    tags: tuple[str, ...] = ()
    notes: list[str] = field(default_factory=list)
    secret: str | None = field(default=None, repr=False)


@dataclasses.dataclass(frozen=True)
class PointDC:
    """The same declaration as a dataclass."""

    x: int
    y: int = 0
    tags: tuple[str, ...] = ()
    notes: list[str] = dataclasses.field(default_factory=list)
    secret: str | None = dataclasses.field(default=None, repr=False)


@struct(frozen=False)
class Counter:
    """A mutable struct with a __post_init__."""

    start: int
    seen: dict[str, int] = field(default_factory=dict)
    doubled: int = 0

    def __post_init__(self) -> None:
        self.doubled = self.start * 2


def test_init_defaults_and_factories_match_dataclasses() -> None:
    for made, reference in [
        (Point(1), PointDC(1)),
        (Point(1, 2), PointDC(1, 2)),
        (Point(x=3, tags=("a",)), PointDC(x=3, tags=("a",))),
        (Point(4, 5, (), ["n"], "s"), PointDC(4, 5, (), ["n"], "s")),
    ]:
        assert dataclasses.astuple(reference) == tuple(asdict(made).values())
    first, second = Point(1), Point(1)
    first.notes.append("only mine")
    assert second.notes == []  # each instance gets its own list, as with default_factory


def test_bad_calls_fail_as_with_dataclasses() -> None:
    with pytest.raises(TypeError):
        Point()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Point(1, z=2)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        replace(Point(1), z=2)


def test_repr_matches_dataclasses_and_hides_repr_false_fields() -> None:
    made, reference = Point(1, 2, ("t",), ["n"], "hidden"), PointDC(1, 2, ("t",), ["n"], "hidden")
    assert repr(made) == repr(reference).replace("PointDC", "Point")
    assert "hidden" not in repr(made)


def test_equality_and_hash_are_by_value_and_by_class() -> None:
    assert Point(1, 2) == Point(1, 2)
    assert Point(1, 2) != Point(1, 3)
    assert Point(1, 2) != PointDC(1, 2)  # another class is never equal, as with dataclasses
    with pytest.raises(TypeError):
        hash(PointDC(1))  # a list field makes both unhashable
    with pytest.raises(TypeError):
        hash(Point(1))
    one, same = Holder(pid=1, alive=True, cmdline=("a",)), Holder(pid=1, alive=True, cmdline=("a",))
    assert hash(one) == hash(same)
    assert len({one, same, Holder(pid=2, alive=True)}) == 2
    with pytest.raises(TypeError):
        hash(Counter(1))  # mutable: unhashable, as a dataclass with eq and not frozen


def test_frozen_refuses_assignment_and_deletion() -> None:
    point = Point(1)
    with pytest.raises(FrozenInstanceError):
        point.x = 2  # type: ignore[misc]
    with pytest.raises(FrozenInstanceError):
        del point.x  # type: ignore[misc]
    with pytest.raises(AttributeError):  # callers catching AttributeError still work
        point.y = 3  # type: ignore[misc]
    assert point.x == 1


def test_mutable_struct_runs_post_init_and_allows_assignment() -> None:
    counter = Counter(4)
    assert counter.doubled == 8
    counter.start = 5
    counter.seen["a"] = 1
    assert (counter.start, counter.seen, counter.doubled) == (5, {"a": 1}, 8)
    assert counter != Counter(5, {"a": 1})  # compared by value: that one doubled to 10
    assert Counter(1).seen is not Counter(1).seen


def test_replace_makes_a_changed_copy_and_runs_init() -> None:
    point = Point(1, 2, ("a",))
    moved = replace(point, y=9)
    assert (moved.x, moved.y, moved.tags) == (1, 9, ("a",))
    assert point.y == 2
    assert replace(Counter(3), start=10).doubled == 20


def test_asdict_converts_nested_structs_like_dataclasses() -> None:
    holder = Holder(pid=7, alive=True, cmdline=("sleep", "1"), name="sleep")
    finding = Finding(
        name="n",
        path="/p",
        format="kernel",
        state=State.HELD,
        severity=Severity.OK,
        reason="r",
        holder=holder,
        sharers=(holder,),
    )
    document = asdict(finding)
    assert document["holder"] == asdict(holder)
    assert document["sharers"] == (asdict(holder),)
    assert document["holder"]["cmdline"] == ("sleep", "1")


def test_declaration_errors_are_refused() -> None:
    with pytest.raises(TypeError, match="non-default field"):

        @struct
        class Bad:
            a: int = 1
            b: int  # type: ignore[misc]

    with pytest.raises(TypeError, match="cannot inherit"):

        @struct
        class Child(Point):
            z: int = 0

    with pytest.raises(ValueError, match="both default and default_factory"):
        field(default=1, default_factory=list)


def test_the_models_round_trip_through_pickle() -> None:
    claim = Claim(
        format="owner-record",
        path="/x",
        present=True,
        existence_is_lock=True,
        pid=4,
        started_at=datetime(2026, 1, 1, tzinfo=UTC),
    )
    assert pickle.loads(pickle.dumps(claim)) == claim


def test_importing_the_model_loads_neither_dataclasses_nor_inspect() -> None:
    probe = "import sys, lockwarden.model, lockwarden.config; print(sorted(sys.modules))"
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    assert "'dataclasses'" not in loaded
    assert "'inspect'" not in loaded
    assert "'lockwarden.structs'" in loaded


VALUES = st.one_of(st.integers(), st.text(max_size=5), st.none(), st.tuples(st.integers()))


@given(st.lists(VALUES, min_size=1, max_size=6), st.lists(VALUES, min_size=1, max_size=6))
def test_equality_and_hash_agree_with_dataclasses_on_any_values(
    left: list[object], right: list[object]
) -> None:
    size = min(len(left), len(right))
    names = [f"f{number}" for number in range(size)]
    annotations = dict.fromkeys(names, "object")
    made = struct(type("Made", (), {"__annotations__": dict(annotations)}))
    reference = dataclasses.dataclass(frozen=True)(
        type("Made", (), {"__annotations__": dict(annotations)})
    )
    a, b = made(*left[:size]), made(*right[:size])
    ra, rb = reference(*left[:size]), reference(*right[:size])
    assert (a == b) == (ra == rb)
    assert hash(a) == hash(ra)  # the same tuple of values is hashed
    assert repr(a) == repr(ra)
