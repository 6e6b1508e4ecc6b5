"""Each format's facts are attributes of its class (formats/base.py, Format), read through the
registry: which formats `remove_stale` may touch, which recognise a whole layout and which are
found from a directory. The real config loader refuses `remove_stale` on each never-removed
format with its class's reason while accepting it on each removable one. (That no live lock of
a removable format is ever removed is test_live_locks_are_never_removed.py's, with the real
programs.)"""

from __future__ import annotations

import pytest

from lockwarden import config
from lockwarden.formats import (
    AUTO_ORDER,
    FORMATS,
    REGISTRY,
    directory_formats,
    layout_formats,
    never_removed,
)
from lockwarden.formats.base import KERNEL_ONLY

NEVER_REMOVED = {name: why for name in FORMATS if (why := FORMATS[name].never_removed) is not None}
ELIGIBLE_FORMATS = {name for name in FORMATS if FORMATS[name].never_removed is None}


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


def test_the_registry_is_one_list_in_auto_order_and_the_facts_are_its_classes() -> None:
    assert tuple(name for name, _module, _class in REGISTRY) == AUTO_ORDER
    assert len(set(AUTO_ORDER)) == len(AUTO_ORDER) == len(FORMATS)
    assert layout_formats() == ("chromium-profile", "firefox-profile", "mercurial", "emacs", "borg")
    assert directory_formats() == ("terraform", "postgres", "git")
    assert not set(layout_formats()) & set(directory_formats())
    assert never_removed("auto") is None  # no format: the removal stage says why itself


def test_the_never_removed_formats_are_the_kernels_and_the_programs_that_own_their_locks() -> None:
    assert set(NEVER_REMOVED) == {"kernel", "sqlite", "dpkg", "borg", "postgres"}
    assert all(why.strip() for why in NEVER_REMOVED.values())


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
