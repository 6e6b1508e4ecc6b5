"""Build an apprise notifier that imports only the plugins of the configured URL schemes.

`apprise.Apprise().add(url)` looks the scheme up in apprise's plugin manager, whose first
lookup imports every plugin module (about 190 in apprise 2.x: ~150 ms and ~18 MB here). An
agent that alerts through one `json://` or `slack://` URL needs one of them.

apprise has no public call that loads a single plugin by scheme. What is public:
`Apprise.add()` accepts a ready `NotifyBase` object; every plugin class turns a URL into its
constructor's arguments with the classmethod `parse_url(url)` (exactly what
`Apprise.instantiate()` does after its lookup); and `protocol` / `secure_protocol` name the
schemes a class serves. What is not public is *where* a plugin class lives: apprise 1.x kept
`apprise/plugins/NotifyJSON.py`, 1.7 and later `apprise/plugins/custom_json.py`. So the module
of each scheme is listed below, newest layout first, and every entry is checked against the
installed apprise by tests/unit/alerts/test_apprise_loader.py, which fails when apprise
moves, renames or drops one. Any scheme not listed, any module that does not import, any class
that does not claim the scheme, or any URL its class rejects falls back to
`Apprise.add(url)`: slower, never wrong.

On apprise 1.2 (Debian 12) `import apprise` itself imports every plugin, so nothing is saved
there, but the same code works.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Iterable
from typing import Any

log = logging.getLogger(__name__)

# scheme -> (module, class) candidates, newest apprise layout first.
_JSON = (
    ("apprise.plugins.custom_json", "NotifyJSON"),
    ("apprise.plugins.NotifyJSON", "NotifyJSON"),
)
_FORM = (
    ("apprise.plugins.custom_form", "NotifyForm"),
    ("apprise.plugins.NotifyForm", "NotifyForm"),
)
_XML = (("apprise.plugins.custom_xml", "NotifyXML"), ("apprise.plugins.NotifyXML", "NotifyXML"))
_EMAIL = (("apprise.plugins.email", "NotifyEmail"), ("apprise.plugins.NotifyEmail", "NotifyEmail"))
_NTFY = (("apprise.plugins.ntfy", "NotifyNtfy"), ("apprise.plugins.NotifyNtfy", "NotifyNtfy"))

PLUGIN_MODULES: dict[str, tuple[tuple[str, str], ...]] = {
    "json": _JSON,
    "jsons": _JSON,
    "form": _FORM,
    "forms": _FORM,
    "xml": _XML,
    "xmls": _XML,
    "mailto": _EMAIL,
    "mailtos": _EMAIL,
    "ntfy": _NTFY,
    "ntfys": _NTFY,
    "slack": (
        ("apprise.plugins.slack", "NotifySlack"),
        ("apprise.plugins.NotifySlack", "NotifySlack"),
    ),
    "discord": (
        ("apprise.plugins.discord", "NotifyDiscord"),
        ("apprise.plugins.NotifyDiscord", "NotifyDiscord"),
    ),
    "tgram": (
        ("apprise.plugins.telegram", "NotifyTelegram"),
        ("apprise.plugins.NotifyTelegram", "NotifyTelegram"),
    ),
}


def scheme_of(url: str) -> str:
    return url.partition("://")[0].lower() if "://" in url else ""


def plugin_class(scheme: str) -> Any | None:
    """The plugin class serving this scheme, importing only its module, or None."""
    for module_name, class_name in PLUGIN_MODULES.get(scheme, ()):
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        plugin = getattr(module, class_name, None)
        if plugin is not None and scheme in schemes_of(plugin):
            return plugin
    return None


def schemes_of(plugin: Any) -> set[str]:
    """The schemes a plugin class claims: `protocol` and `secure_protocol`, str or sequence."""
    claimed: set[str] = set()
    for value in (getattr(plugin, "protocol", None), getattr(plugin, "secure_protocol", None)):
        if isinstance(value, str):
            claimed.add(value.lower())
        elif isinstance(value, Iterable):
            claimed.update(str(item).lower() for item in value)
    return claimed


def direct_service(url: str, asset: Any, tags: Iterable[str] = ()) -> Any | None:
    """What `Apprise.instantiate(url, asset, tags)` builds, without the lookup that loads
    every plugin; None when this URL needs that lookup (then call `Apprise.add(url)`)."""
    plugin = plugin_class(scheme_of(url))
    if plugin is None or not getattr(plugin, "enabled", True):
        return None
    try:
        arguments = plugin.parse_url(url)
        if not arguments:
            return None
        arguments["asset"] = asset
        arguments["tag"] = set(tags)
        service = plugin(**arguments)
    except Exception:  # apprise's own instantiate() treats any error as "cannot load this URL"
        log.debug("%s:// could not be built directly", scheme_of(url), exc_info=True)
        return None
    return service if getattr(service, "enabled", True) else None
