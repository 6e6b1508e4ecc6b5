"""A pending retry survives an apprise upgrade (issue: the service id was a hash of apprise's
`plugin.url()`, whose text changes between apprise versions, so the retry was given up as
"service no longer configured").

The journal is written by a real run while the receiver refuses; its service id is then
rewritten to what another apprise version's `plugin.url()` text hashes to (that version is not
installed beside this one, so its id is made here from such a text), and a later run with the
receiver up must deliver the pending alert exactly once.
"""

from __future__ import annotations

import json
from pathlib import Path

from lockwarden.alerts.notify import service_id_of

from .helpers import Receiver, title_kind
from .test_end_to_end import TOKEN, Scenario, scenario

__all__ = ["scenario"]


def journal_records(path: Path) -> list[dict]:  # type: ignore[type-arg]
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def rename_service(path: Path, old: str, new: str) -> None:
    path.write_text(path.read_text().replace(old, new))


def pending_alert_after_refusal(scenario: Scenario, receiver: Receiver) -> str:
    scenario.configure([receiver.url(TOKEN)])
    scenario.hold()
    receiver.stop()
    scenario.once(120)
    [due] = [r for r in journal_records(scenario.state_path) if r["type"] == "due"]
    [service] = due["targets"]
    assert service == service_id_of(receiver.url(TOKEN))  # the URL as configured, not url()
    return str(service)


def test_the_service_id_is_the_configured_url_not_apprises_text_of_it(
    scenario: Scenario, receiver: Receiver
) -> None:
    pending_alert_after_refusal(scenario, receiver)


def test_a_retry_journaled_under_another_apprise_versions_id_is_delivered_once(
    scenario: Scenario, receiver: Receiver
) -> None:
    current = pending_alert_after_refusal(scenario, receiver)
    # apprise 1.2's json:// URL text, as an older lockwarden hashed it
    other_version_text = (
        f"json://lockwarden:{TOKEN}@127.0.0.1:{receiver.port}/hook"
        "?format=markdown&overflow=upstream&rto=4.0&cto=4.0&verify=yes"
    )
    old = service_id_of(other_version_text)
    assert old != current
    rename_service(scenario.state_path, current, old)

    receiver.start()
    done = scenario.once(125)
    assert done.returncode == 2, done.stderr
    journaled = {record["type"] for record in journal_records(scenario.state_path)}
    assert "giveup" not in journaled  # not given up as a service no longer configured
    assert [title_kind(str(p["title"])) for p in receiver.payloads] == ["writes blocked"]
    scenario.once(130)
    assert len(receiver.payloads) == 1  # delivered once, not again under the other id


def test_a_retry_journaled_by_an_older_lockwarden_on_this_apprise_is_delivered_once(
    scenario: Scenario, receiver: Receiver
) -> None:
    """Older lockwarden versions journaled `sha256(plugin.url())`: matched by that id."""
    import apprise

    current = pending_alert_after_refusal(scenario, receiver)
    plugin = apprise.Apprise.instantiate(receiver.url(TOKEN))
    legacy = service_id_of(plugin.url())
    rename_service(scenario.state_path, current, legacy)
    # no earlier attempt names the URL: only the legacy id can match it
    lines = [
        line
        for line in scenario.state_path.read_text().splitlines()
        if json.loads(line)["type"] != "sent"
    ]
    scenario.state_path.write_text("\n".join(lines) + "\n")

    receiver.start()
    scenario.once(125)
    scenario.once(130)
    assert [title_kind(str(p["title"])) for p in receiver.payloads] == ["writes blocked"]
