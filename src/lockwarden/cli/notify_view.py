"""Which notify services a run would use, as check-config shows them: each one's URL as every
report masks it, where it was configured (`notify.urls[2]`, the urls_file and its line), and its
tags; the URLs apprise cannot use; and what only the service itself can read from here."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from lockwarden.config import NOTIFY_CREDENTIAL, NotifySettings

if TYPE_CHECKING:
    from lockwarden.alerts.notify import InvalidService, Notifier, Service

log = logging.getLogger("lockwarden")


@dataclass(frozen=True)
class NotifyView:
    """The notify services of a config as this shell sees them. `unseen`: the sources only the
    service can read (their services are missing from `services`); `error`: why the settings
    cannot be used at all (a urls_file that cannot be read, one that lists no URL);
    `complete`: every source of the config was read here, so its routing is known."""

    configured: bool = False
    services: tuple[Service, ...] = ()
    unusable: tuple[InvalidService, ...] = ()
    unseen: tuple[str, ...] = ()
    error: str | None = None
    notifier: Notifier | None = None
    complete: bool = False


def notify_view(settings: NotifySettings, unseen: tuple[str, ...] = ()) -> NotifyView:
    """The services `settings` name, loaded as a run loads them (one per URL, however often it
    is configured), without sending. `unseen`: sources already known to be out of reach."""
    if not settings.configured:
        return NotifyView(unseen=unseen)
    from lockwarden.alerts.notify import Notifier, NotifyConfigError

    checkable, left_out = checkable_here(settings)
    unseen = (*unseen, *left_out)
    if not checkable.configured:  # only what the service alone can see: nothing to load here
        return NotifyView(configured=True, unseen=unseen)
    try:
        notifier = Notifier(checkable)
    except NotifyConfigError as error:
        return NotifyView(configured=True, unseen=unseen, error=str(error))
    services, unusable = tuple(notifier.services), tuple(notifier.invalid)
    return NotifyView(True, services, unusable, unseen, None, notifier, complete=not left_out)


def checkable_here(settings: NotifySettings) -> tuple[NotifySettings, tuple[str, ...]]:
    """The notify settings check-config can read in this shell, and what it left out: an
    environment variable or a systemd credential that only the service has is named in a
    warning, and left out."""
    unseen: list[str] = []
    if settings.urls_env and not os.environ.get(settings.urls_env):
        log.warning(
            "notify.urls_env: $%s is not set here, so its URLs were not checked (set it, or run "
            "check-config where the service's environment is)",
            settings.urls_env,
        )
        unseen.append(
            f"notify.urls_env: ${settings.urls_env} is not set here; the service reads its "
            "URLs from its own environment"
        )
        settings = replace(settings, urls_env=None)
    file = settings.urls_file
    if file and not os.path.isabs(file) and not os.environ.get("CREDENTIALS_DIRECTORY"):
        log.warning(
            "notify.urls_file: %r is a systemd credential, which only the service sees, so its "
            "URLs were not checked",
            file,
        )
        unseen.append(
            f"notify.urls_file: {file!r} is a systemd credential (LoadCredential=), which only "
            "the service sees"
        )
        settings = replace(settings, urls_file=None)
    return settings, tuple(unseen)


def unit_credential_unseen(settings: NotifySettings, stores: tuple[str, ...]) -> str | None:
    """What a user other than root cannot know from a shell: whether the system unit also reads
    its notify credential (the_units_credential looks only as root). None when it was looked
    for, or does not apply (the config names a urls_file, or $CREDENTIALS_DIRECTORY is set)."""
    if settings.urls_file is not None or "CREDENTIALS_DIRECTORY" in os.environ:
        return None
    if os.geteuid() == 0:
        return None
    return (
        f"the {NOTIFY_CREDENTIAL} credential: lockwarden.service also reads it where "
        f"LoadCredential= finds it ({', '.join(stores)}), which only root can look in"
    )


def services_document(view: NotifyView) -> dict[str, Any]:
    """check-config --json's account of the services: masked URLs only."""
    return {
        "services": [
            {"url": service.url, "origin": service.origin, "tags": _tags(service)}
            for service in view.services
        ],
        "unusable": [
            {"url": bad.shown, "origin": bad.origin, "problem": bad.problem}
            for bad in view.unusable
        ],
        "not_seen_here": list(view.unseen),
    }


def render_services(view: NotifyView) -> str:
    """check-config's commented section after the TOML: each service a run would use."""
    lines = []
    if view.services:
        count = len(view.services)
        lines.append(f"# notify services a run would use ({count}):")
        lines.extend(f"#   {service.url} ({_from(service)})" for service in view.services)
    elif not view.configured and not view.unseen:
        lines.append(
            "# notify services: none, alerting is off (no [notify] URL is set and no "
            f"{NOTIFY_CREDENTIAL} credential was found)"
        )
    elif not view.unusable:
        lines.append("# notify services: none that can be seen from here")
    if view.unusable:
        lines.append("# notify URLs apprise cannot use (never sent to):")
        lines.extend(f"#   {bad.shown} ({bad.origin}): {bad.problem}" for bad in view.unusable)
    if view.unseen:
        lines.append("# not seen here, so their services are not listed:")
        lines.extend(f"#   {unseen}" for unseen in view.unseen)
    return "".join(line + "\n" for line in lines)


def _tags(service: Service) -> list[str]:
    return sorted(str(tag) for tag in service.tags)


def _from(service: Service) -> str:
    tags = _tags(service)
    return service.origin + (f", tags {','.join(tags)}" if tags else "")
