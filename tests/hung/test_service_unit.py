"""The units leave a reader stuck on a hung mount behind instead of waiting on it.

Measured under a real systemd 252 (a container booted with systemd-nspawn, a FUSE mount whose
getattr never returns bound into it): with the default KillMode=control-group the unit's main
process exited with status 3 after 3.3 s, but the unit stayed "deactivating" on the stuck
child through stop-sigterm, SIGKILL and final-sigterm timeouts and ended `Result=timeout`;
with KillMode=process it ended `Result=success` after 3.2 s, the child noted as left behind.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import SYSTEM_UNITS, USER_UNITS, unit_directives


@pytest.mark.parametrize("units", [SYSTEM_UNITS, USER_UNITS], ids=["system", "user"])
def test_the_unit_stops_only_its_main_process(units: Path) -> None:
    assert unit_directives(units / "lockwarden.service")["KillMode"] == ["process"]
