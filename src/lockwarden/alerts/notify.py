"""Delivery through apprise: the only module that imports it, and only when something is sent.

Each configured service gets its own delivery result, so a message counts as sent to a service
only when apprise reported that service delivered; the others stay pending. Every service gets
short socket timeouts (apprise's `cto`/`rto`, set on the plugin), and each send runs in its own
daemon thread that the run waits for only until the budget's deadline: a dead endpoint cannot hold
the run past its budget on any apprise version (1.2 has no call deadline of its own).

URLs carry tokens: they are logged, reported and journaled only in apprise's privacy form
(`url(privacy=True)`), and a logging filter masks any token that leaks into a log line.
"""

from __future__ import annotations

import hashlib
import logging
import os
import queue
import re
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from lockwarden.alerts.decide import match_of, targets_of
from lockwarden.alerts.messages import Message
from lockwarden.config import NotifySettings, credential_file
from lockwarden.support.abandon import THREAD_PREFIX
from lockwarden.support.checkpoints import Checkpoint, skip
from lockwarden.support.escape import header, markdown

log = logging.getLogger(__name__)

EMAIL_SCHEMES = frozenset({"mailto", "mailtos"})
TAGGED_URL = re.compile(r"^\s*([A-Za-z0-9_.\-, ]+?)\s*=\s*([A-Za-z][\w+.-]*://.*)$", re.DOTALL)
MIN_SECRET_LENGTH = 4
WORD_SECRET_LENGTH = 8  # shorter secrets are masked in log lines only as whole words
TOKEN_LENGTH = 16  # a webhook path piece this long is taken for a token, whatever it holds
# Generic webhooks: apprise's privacy form hides only their password, but a webhook URL's path
# is often its token (https://hooks.example/T0/B0/XXXX), so lockwarden never shows it.
GENERIC_WEBHOOK_SCHEMES = frozenset({"json", "jsons", "xml", "xmls", "form", "forms"})
HIDDEN_PATH = "/…"
# The threads that deliver: a send still hanging past the budget is abandoned (abandon.py).
SEND_THREAD = f"{THREAD_PREFIX}send-"


class NotifyConfigError(Exception):
    """The notification settings cannot be used (a missing credential file, a bad URL)."""


@dataclass(frozen=True)
class UrlSpec:
    """One configured apprise URL and its routing tags."""

    url: str
    tags: tuple[str, ...]
    origin: str = "notify.urls"  # where it was configured: `notify.urls[2]`, `notify.urls_file`


@dataclass(frozen=True)
class InvalidService:
    """A configured URL that apprise cannot use: it is reported on every run, never sent to."""

    origin: str
    shown: str
    problem: str


@dataclass(frozen=True)
class Delivery:
    """Whether apprise delivered one message to one service."""

    service: str
    url: str
    ok: bool
    status: str
    origin: str = ""  # where the service was configured, as Service.origin


def split_tags(entry: str, origin: str = "notify.urls") -> UrlSpec:
    """`ops,db=slack://...` -> tags (ops, db); a plain URL has no tags."""
    match = TAGGED_URL.match(entry)
    if match and "://" not in match.group(1):
        tags = tuple(tag.strip() for tag in match.group(1).split(",") if tag.strip())
        return UrlSpec(match.group(2).strip(), tags, origin)
    return UrlSpec(entry.strip(), (), origin)


def url_specs(settings: NotifySettings, environ: Mapping[str, str] | None = None) -> list[UrlSpec]:
    """Every URL from `urls`, `urls_env` and `urls_file` (not the apprise config file), each
    with where it came from, as an error message names it."""
    env = os.environ if environ is None else environ
    entries = [(url, f"notify.urls[{number}]") for number, url in enumerate(settings.urls, start=1)]
    if settings.urls_env:
        value = env.get(settings.urls_env)
        if not value:
            raise NotifyConfigError(f"notify.urls_env: ${settings.urls_env} is not set or empty")
        entries.extend(
            (url, f"notify.urls_env (${settings.urls_env} word {number})")
            for number, url in enumerate(value.split(), start=1)
        )
    if settings.urls_file:
        path = credential_path(settings.urls_file, env)
        entries.extend(
            (url, f"notify.urls_file ({path} line {number})") for url, number in _url_lines(path)
        )
    return [split_tags(entry, origin) for entry, origin in entries if entry.strip()]


def credential_path(name: str, environ: Mapping[str, str]) -> str:
    """An absolute path as is; a bare name inside $CREDENTIALS_DIRECTORY (LoadCredential=)."""
    path = credential_file(name, environ)
    if path is None:
        raise NotifyConfigError(
            f"notify.urls_file: {name!r} is a credential name but $CREDENTIALS_DIRECTORY is not "
            "set (use LoadCredential= in the service, or an absolute path)"
        )
    return path


def _url_lines(path: str) -> list[tuple[str, int]]:
    from lockwarden.config.secrets import urls_file_problem

    untrusted = urls_file_problem(path)  # its writer would decide where alerts go
    if untrusted is not None:
        raise NotifyConfigError(f"notify.urls_file: {untrusted}")
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read(1 << 20).splitlines()
    except OSError as error:
        raise NotifyConfigError(f"notify.urls_file: cannot read {path}: {error.strerror}") from None
    return [
        (line.strip(), number)
        for number, line in enumerate(lines, start=1)
        if line.strip() and not line.lstrip().startswith("#")
    ]


def _no_url(settings: NotifySettings, environ: Mapping[str, str] | None) -> str:
    """Why a [notify] section that is set names no service (a credential file made empty with
    `install /dev/null`, or holding only comments): its alerts would reach nobody."""
    sources = ["notify.urls"] if settings.urls else []
    if settings.urls_env:
        sources.append(f"notify.urls_env (${settings.urls_env})")
    if settings.urls_file:
        path = credential_path(settings.urls_file, os.environ if environ is None else environ)
        sources.append(f"notify.urls_file ({path})")
    named = " and ".join(sources) or "notify"
    return f"{named} lists no URL (empty, or only comments): alerts would reach nobody"


def scheme_shown(url: str) -> str:
    """What may be shown of a URL apprise cannot parse (no privacy form exists): its scheme."""
    if "://" not in url:
        return "(not a URL)"
    return url.split("://", 1)[0][:20] + "://…"


def why_invalid(apprise: Any, url: str) -> str:
    """Why apprise rejected a URL, in words an operator can act on (never quoting it)."""
    if "://" not in url:
        return "not an apprise URL (no SCHEME://); not shown, as it may hold secrets"
    scheme = url.split("://", 1)[0].lower()
    if scheme not in known_schemes(apprise):
        return f"unknown scheme {scheme!r}: apprise has no such service"
    return (
        f"apprise cannot parse this {scheme}:// URL (a missing or malformed token, host or "
        "target?); not shown, as it may hold secrets"
    )


def known_schemes(apprise: Any) -> set[str]:
    """Every scheme the installed apprise serves (loads every plugin: only on an error path)."""
    from lockwarden.alerts.apprise_loader import schemes_of

    schemes: set[str] = set()
    for entry in apprise.Apprise().details().get("schemas", []):
        for key in ("protocols", "secure_protocols"):
            schemes |= schemes_of(type("Claimed", (), {"protocol": entry.get(key) or ()}))
    return schemes


@dataclass(frozen=True)
class Service:
    """One apprise service, with the id the journal tracks it by."""

    service_id: str
    url: str
    tags: frozenset[str]
    email: bool
    plugin: Any
    legacy_id: str = ""  # the id older lockwarden versions journaled: see service_id_of
    origin: str = "notify.config"  # where it was configured: `notify.urls[2]`, ...


def service_id_of(identity: str) -> str:
    """A stable name for one service in the journal: a hash, never the URL (it has tokens).

    `identity` is the URL as the operator configured it (tags and blanks stripped), not
    apprise's `plugin.url()`: that text changes between apprise versions (parameters added,
    reordered), and a pending retry must still find its service after an apprise upgrade.
    Journals written before kept `service_id_of(plugin.url())`: see `legacy_id`."""
    return hashlib.sha256(identity.encode()).hexdigest()[:16]


def secrets_of(full_url: str, private_url: str) -> set[str]:
    """The pieces of a URL that its privacy form hides: those must never be printed."""
    pieces = re.split(r"[/:@?&=#,%\s]+", full_url)
    return {
        piece for piece in pieces if len(piece) >= MIN_SECRET_LENGTH and piece not in private_url
    }


def shown_url(private_url: str, schemes: set[str]) -> str:
    """How a service is named in output and the journal: apprise's privacy form without its
    query, and for a generic webhook without its path either."""
    without_query = private_url.split("?", 1)[0]
    if not schemes & GENERIC_WEBHOOK_SCHEMES or "://" not in without_query:
        return without_query
    scheme, rest = without_query.split("://", 1)
    authority, slash, _path = rest.partition("/")
    return f"{scheme}://{authority}{HIDDEN_PATH}" if slash else without_query


def path_secrets(private_url: str) -> set[str]:
    """The path pieces of a generic webhook URL that look like its token (masked wherever
    they appear), and the whole path when it has several pieces."""
    path = _webhook_path(private_url)
    pieces = {piece for piece in path.split("/") if len(piece) >= MIN_SECRET_LENGTH}
    return {piece for piece in pieces if _token_like(piece)} | ({path} if "/" in path else set())


def path_routes(private_url: str) -> set[str]:
    """The other path pieces of a generic webhook URL (/hook, /alerts, an ntfy-style topic
    such as /lockwardenprod): masked where they stand as a URL's path segment, never as a
    word of a sentence, which would garble every line with that word in it."""
    pieces = {piece for piece in _webhook_path(private_url).split("/")}
    return {piece for piece in pieces if len(piece) >= MIN_SECRET_LENGTH} - path_secrets(
        private_url
    )


def _webhook_path(private_url: str) -> str:
    return private_url.split("?", 1)[0].split("#", 1)[0].split("://", 1)[-1].partition("/")[2]


def _token_like(piece: str) -> bool:
    """Long, or with a digit, or a capital after its first letter: what a generated token is
    and a word ("Events", "hook") is not."""
    return (
        len(piece) >= TOKEN_LENGTH
        or any(character.isdigit() for character in piece)
        or (any(c.isupper() for c in piece[1:]) and any(c.islower() for c in piece))
    )


class RedactingFilter(logging.Filter):
    """Masks secrets in every log record that passes a handler it is attached to."""

    def __init__(
        self, secrets: Iterable[str], segments: Iterable[str | tuple[str, str]] = ()
    ) -> None:
        """`secrets`: masked anywhere (a short one as a word); `segments`: masked where they
        stand as the first segment of a URL's path (`host/hook?`, `"POST /hook HTTP/1.1"`,
        `Retrying: /hook/a`), never inside a file path (`/etc/hook/config.toml`)."""
        super().__init__()
        self.secrets = sorted(set(secrets), key=len, reverse=True)
        pieces = [
            re.escape(secret) if len(secret) >= WORD_SECRET_LENGTH else _as_word(secret)
            for secret in self.secrets
        ]
        routes = [each for each in set(segments) if _route(each) not in self.secrets]
        pieces += [
            _segment_pattern(each) for each in sorted(routes, key=_route_length, reverse=True)
        ]
        self.pattern = re.compile("|".join(pieces)) if pieces else None

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = self.mask(message)
        if masked != message:
            record.msg, record.args = masked, None
        if record.exc_info and not record.exc_text:  # a traceback can quote a URL too
            record.exc_text = self.mask(logging.Formatter().formatException(record.exc_info))
        return True

    def mask(self, text: str) -> str:
        return self.pattern.sub("****", text) if self.pattern is not None else text


# A request path standing alone: its `/` begins the text or follows a space, a quote, `(`,
# `=`, `:` or `,` (`"POST /hook HTTP/1.1"`, `Retrying: /hook`), never a path piece or a word
# (`/etc/hook/config.toml`, `and/hook`).
STANDALONE_PATH = r"(?<=/)(?<![^\s'\"(=:,]/)"


def _segment_pattern(segment: str | tuple[str, str]) -> str:
    """Where a route stands as the first segment of a URL's path: after its own authority
    (`127.0.0.1:8088/hook`), or at the start of a request path standing alone."""
    authority, route = segment if isinstance(segment, tuple) else ("", segment)
    after = f"(?<={re.escape(authority)}/)|" if authority else ""
    return rf"(?:{after}{STANDALONE_PATH}){re.escape(route)}(?=[/?#&\s'\"),;:]|$)"


def told_apart(services: list[Service]) -> list[Service]:
    """Services whose shown URLs would read alike (two webhooks on one host:port, their paths
    hidden) get the start of their id after it, so a report never names two as one."""
    shown = [service.url for service in services]
    return [
        replace(service, url=f"{service.url} #{service.service_id[:6]}")
        if shown.count(service.url) > 1
        else service
        for service in services
    ]


MAX_THROTTLE_ALLOWANCE_S = 60.0
"""At most this long added for services' own rate limits: the unit ends a run after 5 min, and
a run killed mid-send writes no journal (the next run would send everything again)."""


def throttle_allowance(chosen: Sequence[Sequence[Service]]) -> float:
    """The time a service's own rate limit adds to the budget: apprise waits
    `request_rate_per_sec` between two messages to one service (5.5 s for mail), so three
    locks resolved at once take 11 s of a healthy mail server's time. Services send side by
    side, so the slowest one's wait is what the run waits longer."""
    counts: dict[str, int] = {}
    rates: dict[str, float] = {}
    for services in chosen:
        for service in services:
            counts[service.service_id] = counts.get(service.service_id, 0) + 1
            rate = getattr(service.plugin, "request_rate_per_sec", 0.0)
            rates[service.service_id] = float(rate) if isinstance(rate, int | float) else 0.0
    return max((rates[sid] * (count - 1) for sid, count in counts.items()), default=0.0)


def _as_word(secret: str) -> str:
    """A short secret (a password of `user:pass@host`) is masked where it stands alone, never
    inside a longer word or name ("dead" in "deadline", "store" in the lock name
    "hook-store"), which would garble the line; after a %-escape (`%2Fpass`) it stands alone."""
    return (
        rf"(?:(?<![\w.-])|(?<=%[0-9A-Fa-f]{{2}})){re.escape(secret)}(?![\w.-]|%[0-9A-Fa-f]{{2}}\w)"
    )


def _route(segment: str | tuple[str, str]) -> str:
    return segment[1] if isinstance(segment, tuple) else segment


def _route_length(segment: str | tuple[str, str]) -> int:
    return len(_route(segment))


def redact_in_logs(
    secrets: Iterable[str], segments: Iterable[str | tuple[str, str]] = ()
) -> RedactingFilter:
    """Mask these strings in every line written by a handler of the root logger, of the
    `lockwarden` logger (the CLI's own handler, which does not propagate to the root), or by
    logging's last resort (what prints a library's warning when the root has no handler, as
    under the CLI: urllib3's "Retrying ... /path" carries a webhook's token)."""
    redaction = RedactingFilter(
        (secret for secret in secrets if secret), (segment for segment in segments if segment)
    )
    handlers = [*logging.getLogger().handlers, *logging.getLogger("lockwarden").handlers]
    if logging.lastResort is not None:
        handlers.append(logging.lastResort)
    for handler in handlers:
        handler.addFilter(redaction)
    return redaction


class _SendReasons(logging.Handler):
    """apprise's own words for a send that failed ("error=500", "A Connection error occurred
    ..."), which apprise 1.9 logs as a warning and leaves out of its result: kept per sending
    thread, so a delivery says why it failed, not just "failure"."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.last: dict[int, str] = {}

    def emit(self, record: logging.LogRecord) -> None:
        self.last[record.thread or 0] = record.getMessage()

    def take(self) -> str | None:
        return self.last.pop(threading.get_ident(), None)


_SEND_REASONS = _SendReasons()


class Notifier:
    """The configured services, loaded once per run, and a send budget for the whole run.

    A URL apprise cannot use never stops the others: it is kept in `invalid`, reported on every
    run, and never sent to."""

    def __init__(
        self,
        settings: NotifySettings,
        environ: Mapping[str, str] | None = None,
        checkpoint: Checkpoint = skip,
    ):
        """`checkpoint`: called with "mid-send" once the first service has answered."""
        import apprise

        self.checkpoint = checkpoint

        self._apprise = apprise
        apprise_log = logging.getLogger("apprise")
        if _SEND_REASONS not in apprise_log.handlers:
            apprise_log.addHandler(_SEND_REASONS)
        self.budget = settings.timeout
        # The budget is for waiting on the network, so it starts at the first send: loading
        # apprise's plugins (seconds on a loaded host) must not use it up before anything is sent.
        self.deadline: float | None = None
        self._throttle_allowed = False
        self._asset = apprise.AppriseAsset(app_id="lockwarden", app_desc="lockwarden lock alerts")
        self.services: list[Service] = []
        self.invalid: list[InvalidService] = []
        for spec in url_specs(settings, environ):
            plugin = self._plugin(spec)
            if plugin is None:
                problem = why_invalid(apprise, spec.url)
                self.invalid.append(InvalidService(spec.origin, scheme_shown(spec.url), problem))
            else:
                self._append(self._service(plugin, spec.url, spec.origin))
        if settings.config:
            self._add_config(settings.config)
        if not self.services and not self.invalid:
            raise NotifyConfigError(_no_url(settings, environ))
        self._install_redaction()  # by the shown URLs as apprise gives them, then:
        self.services = told_apart(self.services)

    def _plugin(self, spec: UrlSpec) -> Any | None:
        from lockwarden.alerts.apprise_loader import direct_service

        # Built from its own plugin class where apprise_loader knows it, so an alert run
        # loads one plugin module instead of all ~190 (apprise_loader.py says how).
        plugin = direct_service(spec.url, self._asset, spec.tags)
        if plugin is not None:
            return plugin
        return self._apprise.Apprise.instantiate(
            spec.url, asset=self._asset, tag=list(spec.tags) or None, suppress_exceptions=True
        )

    def _add_config(self, location: str) -> None:
        config = self._apprise.AppriseConfig(asset=self._asset)
        loaded = self._apprise.Apprise(asset=self._asset)
        plugins: list[Any] = (
            list(loaded.find()) if config.add(location) and loaded.add(config) else []
        )
        if not plugins:
            self.invalid.append(
                InvalidService(
                    "notify.config", location, "cannot be loaded, or defines no usable service"
                )
            )
            return
        for plugin in plugins:
            # No configured text to name it by: apprise's own URL it is (an apprise upgrade may
            # rename it; a pending retry then finds it by its shown URL, see `match`).
            self._append(self._service(plugin, plugin.url()))

    def _append(self, service: Service) -> None:
        """One service per URL: the same URL in the config and the credential (or twice in a
        file) is sent to once, routed by every tag it was given, and named by every origin."""
        for index, known in enumerate(self.services):
            if known.service_id == service.service_id:
                log.info("%s is configured twice (%s, %s): sent once", known.url, known.origin,
                         service.origin)  # fmt: skip
                origin = f"{known.origin} and {service.origin}"  # each place it is named
                self.services[index] = replace(known, tags=known.tags | service.tags, origin=origin)
                return
        self.services.append(service)

    def _service(self, plugin: Any, identity: str, origin: str = "notify.config") -> Service:
        # Named before the timeouts change its URL: the id must not move with [notify] timeout.
        legacy_id = service_id_of(plugin.url())
        # Short socket timeouts, so a dead or hanging endpoint fails within the budget.
        cap = max(0.5, self.budget)
        plugin.socket_connect_timeout = min(float(plugin.socket_connect_timeout), cap)
        plugin.socket_read_timeout = min(float(plugin.socket_read_timeout), cap)
        protocols = {plugin.protocol, getattr(plugin, "secure_protocol", None)}
        flat = {p for item in protocols for p in (item if isinstance(item, tuple) else (item,))}
        if flat & EMAIL_SCHEMES and not isinstance(plugin.notify_format, tuple):
            # apprise 1.2 mails HTML whatever the body is; newer ones follow the body's format:
            # an alert mail is plain text on every version.
            plugin.notify_format = self._apprise.NotifyFormat.TEXT
        return Service(
            service_id=service_id_of(identity.strip()),
            url=shown_url(plugin.url(privacy=True), flat),
            tags=frozenset(plugin.tags or ()),
            email=bool(flat & EMAIL_SCHEMES),
            plugin=plugin,
            legacy_id=legacy_id,
            origin=origin,
        )

    def _install_redaction(self) -> None:
        secrets: set[str] = set()
        segments: set[str | tuple[str, str]] = set()
        for service in self.services:
            full, private = service.plugin.url(), service.plugin.url(privacy=True)
            secrets |= secrets_of(full, private)
            if service.url.endswith(HIDDEN_PATH):  # a generic webhook: its path is a secret
                secrets |= path_secrets(private)
                authority = private.split("://", 1)[-1].partition("/")[0]
                segments |= {(authority, route) for route in path_routes(private)}
        self._redaction = redact_in_logs(secrets, segments)

    def targets(self, tags: tuple[str, ...]) -> tuple[str, ...]:
        """The services a lock routes to (decide.targets_of)."""
        return targets_of(self.services, tags)

    def unrouted(self, tags: tuple[str, ...]) -> str | None:
        """Why a lock with these notify_tags reaches no service, when none of its tags is on a
        configured service (and none is tagged `always`); None when it reaches one, or when
        no service is usable at all (that is reported on its own)."""
        if not tags or not self.services or self.targets(tags):
            return None
        present = sorted({str(tag) for service in self.services for tag in service.tags})
        on_services = (
            f"the services' tags are {', '.join(present)}" if present else ("no service has a tag")
        )
        return f"notify_tags {', '.join(tags)} match no notify service ({on_services})"

    def match(self, service_id: str, shown_urls: Iterable[str] = ()) -> str | None:
        """The service a journaled id means now (decide.match_of)."""
        return match_of(self.services, service_id, shown_urls)

    def send(self, message: Message, service_ids: Iterable[str]) -> list[Delivery]:
        """Send one message to each service at once; each one's own outcome."""
        return self.send_batch([(message, service_ids)])[0]

    def send_batch(self, batch: Sequence[tuple[Message, Iterable[str]]]) -> list[list[Delivery]]:
        """Send every message of a run, each to its services, within the run's budget.

        Each service gets one daemon thread that sends it its messages in order, and the run
        waits for them only until the deadline: a hanging service delays no other service's
        messages, and a send still hanging then is abandoned (the process may exit under it)
        and reported "timed out" (retried next run). Results come in the batch's order."""
        chosen = [[s for s in self.services if s.service_id in set(ids)] for _m, ids in batch]
        count = sum(len(services) for services in chosen)
        if count == 0:
            return [[] for _ in batch]
        if self.deadline is None:
            self.deadline = time.monotonic() + self.budget
        if self.deadline - time.monotonic() <= 0.05:
            return [
                [
                    Delivery(s.service_id, s.url, False, "out of time budget", s.origin)
                    for s in services
                ]
                for services in chosen
            ]
        if not self._throttle_allowed:  # once a run, and never past what a unit allows
            self._throttle_allowed = True
            self.deadline += min(throttle_allowance(chosen), MAX_THROTTLE_ALLOWANCE_S)
        finished = self._wait_for(self._start_sends(batch, chosen), count)
        return [
            [
                finished.get((index, s.service_id))
                or Delivery(s.service_id, s.url, False, "timed out", s.origin)
                for s in services
            ]
            for index, services in enumerate(chosen)
        ]

    def _start_sends(
        self, batch: Sequence[tuple[Message, Iterable[str]]], chosen: list[list[Service]]
    ) -> queue.SimpleQueue[tuple[int, Delivery]]:
        finished: queue.SimpleQueue[tuple[int, Delivery]] = queue.SimpleQueue()
        for service in {s.service_id: s for services in chosen for s in services}.values():
            work = [
                (index, message)
                for index, ((message, _ids), services) in enumerate(zip(batch, chosen, strict=True))
                if service in services
            ]
            threading.Thread(
                target=self._send_in_order,
                args=(service, work, finished),
                name=f"{SEND_THREAD}{service.service_id}",
                daemon=True,
            ).start()
        return finished

    def _send_in_order(
        self,
        service: Service,
        work: list[tuple[int, Message]],
        finished: queue.SimpleQueue[tuple[int, Delivery]],
    ) -> None:
        for index, message in work:
            finished.put((index, self._send_one(service, message)))

    def _wait_for(
        self, finished: queue.SimpleQueue[tuple[int, Delivery]], count: int
    ) -> dict[tuple[int, str], Delivery]:
        assert self.deadline is not None
        received: dict[tuple[int, str], Delivery] = {}
        while len(received) < count:
            try:
                index, delivery = finished.get(timeout=max(0.0, self.deadline - time.monotonic()))
            except queue.Empty:
                break  # the rest are past the budget: not delivered, retried next run
            received[(index, delivery.service)] = delivery
            if len(received) == 1:
                self.checkpoint("mid-send")  # one service answered, others may be in flight
        return received

    def _send_one(self, service: Service, message: Message) -> Delivery:
        apprise = self._apprise
        single = apprise.Apprise()
        single.add(service.plugin)
        # The title once more as one bounded line: a retry journaled by an older version
        # carries its title as it was then, and a line break in a Subject is a header of its
        # own. Chat services put the title into the Markdown (Mattermost writes it above the
        # body): it is Markdown there, as the body is.
        title = header(message.title)
        body, title, body_format = (
            (message.text, title, apprise.NotifyFormat.TEXT)
            if service.email
            else (message.markdown, markdown(title), apprise.NotifyFormat.MARKDOWN)
        )
        _SEND_REASONS.take()  # what an earlier send on this thread left
        try:
            result = single.notify(
                body=body,
                title=title,
                body_format=body_format,
                notify_type=message.notify_type,
            )
        except Exception as error:  # a plugin bug is one failed delivery, not a failed run
            log.debug("sending to %s raised %s", service.url, type(error).__name__)
            return Delivery(service.service_id, service.url, False, "error", service.origin)
        status = _status_of(result)
        reason = None if result else _failure_reason(result)
        if reason:
            status = f"{status}: {self._redaction.mask(_one_line(reason))}"
        return Delivery(service.service_id, service.url, bool(result), status, service.origin)


REASON_LENGTH = 300


def _one_line(text: str) -> str:
    """A server's words as one short line: no control characters (a remote error text must
    not put line breaks or terminal escapes into stdout, stderr or the journal)."""
    line = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return line if len(line) <= REASON_LENGTH else line[: REASON_LENGTH - 1] + "…"


def _failure_reason(result: Any) -> str | None:
    """apprise's last warning about a failed send: from the result's own log (apprise 2 sends
    in its own threads), else as logged on this thread (apprise 1.9); None where neither says
    (apprise 1.2 sends on a thread of its own and keeps no log)."""
    logs = getattr(result, "logs", None)
    if callable(logs):
        said = [
            str(entry.message)
            for entry in logs()
            if str(getattr(entry, "level", "")).upper() in ("WARNING", "ERROR", "CRITICAL")
        ]
        _SEND_REASONS.take()
        return said[-1] if said else None
    return _SEND_REASONS.take()


def _status_of(result: Any) -> str:
    """Newer apprise returns a result with a status (success, failure, timeout); 1.2 a bool."""
    status = getattr(getattr(result, "status", None), "name", None)
    if isinstance(status, str):
        return status.lower()
    return "success" if result else "failure"
