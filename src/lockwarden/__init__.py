"""lockwarden: who holds each store lock, is it alive, for how long, and what to stop."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

# `import lockwarden` stays cheap (the CLI imports it first): the hold API loads on first use.
# Its package is `holding`, not `hold`: importing a submodule `lockwarden.hold` would replace
# the function `lockwarden.hold` with the module.
_LAZY = {
    "hold": "lockwarden.holding.hold",
    "HoldError": "lockwarden.holding.hold",
    "LockHeld": "lockwarden.holding.hold",
    "LockStale": "lockwarden.holding.hold",
    "LockUnavailable": "lockwarden.holding.hold",
}
__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'lockwarden' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value
