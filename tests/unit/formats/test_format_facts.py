"""formats/removable.py: the one table of which formats `remove_stale` may touch. Every name in
it is a registered format, no format is both removable and never removed, and the real config
loader refuses `remove_stale` on each never-removed format with the table's reason while
accepting it on each removable one. (That no live lock of an eligible format is ever removed
is test_live_locks_are_never_removed.py's, with the real programs.)"""

from __future__ import annotations

import pytest

from lockwarden import config
from lockwarden.formats import FORMATS
from lockwarden.formats.removable import ELIGIBLE_FORMATS, KERNEL_ONLY, NEVER_REMOVED


def lock_document(lock_format: str) -> dict[str, object]:
    return {
        "lock": [
            {
                "name": "store",
                "path": "/srv/store/x.pid",
                "format": lock_format,
                "remove_stale": True,
            }
        ]
    }


def test_every_format_named_is_a_registered_one() -> None:
    assert set(ELIGIBLE_FORMATS) <= set(FORMATS)
    assert set(NEVER_REMOVED) <= set(FORMATS)


def test_no_format_is_both_removable_and_never_removed() -> None:
    assert set(ELIGIBLE_FORMATS).isdisjoint(NEVER_REMOVED)


def test_the_kernel_only_formats_say_why_with_one_reason() -> None:
    assert {name for name, why in NEVER_REMOVED.items() if why == KERNEL_ONLY} == {
        "kernel",
        "sqlite",
        "dpkg",
    }


@pytest.mark.parametrize("lock_format", sorted(NEVER_REMOVED))
def test_the_config_refuses_remove_stale_on_a_never_removed_format(lock_format: str) -> None:
    with pytest.raises(config.ConfigError) as refused:
        config.parse(lock_document(lock_format), "lockwarden.toml")
    assert refused.value.problems == [
        f"lockwarden.toml: lock[1].remove_stale: format {lock_format!r} is never removed: "
        f"{NEVER_REMOVED[lock_format]}"
    ]


@pytest.mark.parametrize("lock_format", sorted(ELIGIBLE_FORMATS))
def test_the_config_accepts_remove_stale_on_a_removable_format(lock_format: str) -> None:
    [lock] = config.parse(lock_document(lock_format), "lockwarden.toml").locks
    assert (lock.format, lock.remove_stale) == (lock_format, True)


def test_every_registered_format_is_either_removable_or_never_removed() -> None:
    assert set(ELIGIBLE_FORMATS) | set(NEVER_REMOVED) == set(FORMATS)
