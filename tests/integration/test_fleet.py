"""A fleet on the real engines: three simulated hosts, Prometheus, a two-peer Alertmanager
cluster and a webhook receiver, all on 127.0.0.1 ports picked here (Debian's `prometheus`,
`prometheus-node-exporter` and `prometheus-alertmanager`, with `amtool`).

Each host is its own node-exporter with its own textfile directory, and its own lockwarden
config and state. Prometheus scrapes them with the shipped rules (1 s scrape and evaluation
intervals; the two rules that page here have no `for:`), sets a `host` label per target by
relabelling, and sends to both Alertmanager peers. The same cases then run through the direct
`[alertmanager]` target without Prometheus. Everything is asserted from what the receiver got.

Every process is started here and killed by its PID at the end (the `children` fixture).
"""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests

from conftest import FLOCK_HOLDER, Children, require_tool, run_cli, wait_until, write_config

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "packaging" / "prometheus" / "lockwarden.rules.yml"
INHIBIT = ROOT / "packaging" / "prometheus" / "lockwarden.inhibit.yml"
HOSTS = ("host1", "host2", "host3")
# The second peer waits this long for the first one's notification log to reach it by gossip
# before it notifies itself.
PEER_TIMEOUT_S = 2
# Longer than the peer's wait with room to spare, as in any real setup (5m against 15s): the
# second peer decides on what it saw when its wait began, so a group interval shorter than the
# wait lets it send a stale "firing" just after the first peer's "resolved".
GROUP_INTERVAL_S = 6
GROUP_WAIT_S = 5  # long enough for two hosts' alerts to land in one first notification
# After a notification, how long a duplicate could still take to appear: the second peer's
# wait, with room for a loaded machine.
SETTLE_S = PEER_TIMEOUT_S + 4
WAIT_S = 60  # the longest any one expected notification may take

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Receiver:
    """A real webhook receiver: every notification Alertmanager delivers, as JSON."""

    server: ThreadingHTTPServer
    received: list[dict[str, Any]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/"

    def of(self, lock: str, status: str | None = None) -> list[dict[str, Any]]:
        """Notifications of the group of one lock (group_by: alertname, lock)."""
        return [
            payload
            for payload in list(self.received)
            if payload["groupLabels"].get("lock") == lock
            and (status is None or payload["status"] == status)
        ]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    received: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append(json.loads(body))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Receiver(server, received)
    finally:
        server.shutdown()
        server.server_close()


def start(children: Children, argv: list[str], log: Path) -> subprocess.Popen[str]:
    """A server process whose output goes to a file (a pipe nobody reads would fill up)."""
    with log.open("w") as output:
        proc = subprocess.Popen(argv, stdout=output, stderr=subprocess.STDOUT, text=True)
    children.procs.append(proc)
    return proc


def ready(url: str, proc: subprocess.Popen[str], log: Path) -> None:
    def answers() -> bool:
        assert proc.poll() is None, f"{proc.args} exited: {log.read_text()[-2000:]}"
        try:
            return requests.get(url, timeout=1).ok
        except requests.RequestException:
            return False

    assert wait_until(answers, timeout=30, interval=0.1), log.read_text()[-2000:]


@dataclass
class Alertmanagers:
    urls: list[str]
    procs: list[subprocess.Popen[str]]


def shipped_inhibit_rules() -> list[dict[str, Any]]:
    """The inhibit_rules of packaging/prometheus/lockwarden.inhibit.yml, as a user pastes them."""
    import yaml

    rules: list[dict[str, Any]] = yaml.safe_load(INHIBIT.read_text())["inhibit_rules"]
    return rules


def alertmanager_cluster(children: Children, tmp_path: Path, receiver: Receiver) -> Alertmanagers:
    alertmanager = require_tool("prometheus-alertmanager")
    config = tmp_path / "alertmanager.yml"
    config.write_text(
        json.dumps(
            {
                "inhibit_rules": shipped_inhibit_rules(),
                "route": {
                    "receiver": "webhook",
                    "group_by": ["alertname", "lock"],
                    "group_wait": f"{GROUP_WAIT_S}s",
                    "group_interval": f"{GROUP_INTERVAL_S}s",
                    "repeat_interval": "1h",
                },
                "receivers": [
                    {
                        "name": "webhook",
                        "webhook_configs": [{"url": receiver.url, "send_resolved": True}],
                    }
                ],
            }
        )
    )
    web = [free_port(), free_port()]
    cluster = [free_port(), free_port()]
    procs = []
    for index in range(2):
        storage = tmp_path / f"alertmanager-{index}"
        storage.mkdir()
        argv = [
            alertmanager,
            f"--config.file={config}",
            f"--storage.path={storage}",
            f"--web.listen-address=127.0.0.1:{web[index]}",
            f"--cluster.listen-address=127.0.0.1:{cluster[index]}",
            f"--cluster.advertise-address=127.0.0.1:{cluster[index]}",
            f"--cluster.peer=127.0.0.1:{cluster[1 - index]}",
            f"--cluster.peer-timeout={PEER_TIMEOUT_S}s",
            "--cluster.gossip-interval=100ms",
            "--cluster.pushpull-interval=2s",
            "--cluster.settle-timeout=5s",
            "--log.level=warn",
        ]
        procs.append(start(children, argv, tmp_path / f"alertmanager-{index}.log"))
    urls = [f"http://127.0.0.1:{port}" for port in web]
    for index, url in enumerate(urls):
        ready(f"{url}/-/ready", procs[index], tmp_path / f"alertmanager-{index}.log")
    assert wait_until(lambda: all(cluster_size(url) == 2 for url in urls), timeout=30)
    return Alertmanagers(urls, procs)


def single_alertmanager(children: Children, tmp_path: Path, program: str, config: Path) -> str:
    """One Alertmanager with no cluster peers on a free port, ready; its URL."""
    port = free_port()
    log = tmp_path / "alertmanager.log"
    argv = [
        program,
        f"--config.file={config}",
        f"--storage.path={tmp_path / 'alertmanager-data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--cluster.listen-address=",
        "--log.level=warn",
    ]
    proc = start(children, argv, log)
    url = f"http://127.0.0.1:{port}"
    ready(f"{url}/-/ready", proc, log)
    return url


def cluster_size(url: str) -> int:
    try:
        status = requests.get(f"{url}/api/v2/status", timeout=1).json()
    except requests.RequestException:
        return 0
    return len(status["cluster"].get("peers") or [])


@dataclass
class Host:
    """One simulated host: its lockwarden config and state, its textfile directory."""

    name: str
    directory: Path
    locks: dict[str, Path]
    section: str

    @property
    def textfile_directory(self) -> Path:
        return self.directory / "textfile"

    def config(self) -> str:
        tables = "".join(
            f'[[lock]]\nname = "{name}"\npath = "{path}"\nformat = "kernel"\n'
            'warn_after = "0"\ncritical_after = "0"\n\n'
            for name, path in self.locks.items()
        )
        return write_config(
            self.directory / "config.toml",
            f'[state]\npath = "{self.directory}/state/state.jsonl"\n\n{self.section}\n{tables}',
        )

    def run(self) -> subprocess.CompletedProcess[str]:
        completed = run_cli("--once", "--config", self.config(), "-v")
        assert completed.returncode in (0, 2), completed.stdout + completed.stderr
        return completed


def make_hosts(tmp_path: Path, section: Callable[[str, Path], str]) -> dict[str, Host]:
    """Hosts 1 and 3 both watch one lock on shared storage; host 2 has its own locks."""
    shared = tmp_path / "shared-storage" / "LOCK"
    shared.parent.mkdir()
    hosts = {}
    for name in HOSTS:
        directory = tmp_path / name
        (directory / "textfile").mkdir(parents=True)
        own = {lock: directory / f"{lock}.lock" for lock in ("store", "silenced", "after-kill")}
        locks = own if name == "host2" else {"shared": shared}
        hosts[name] = Host(name, directory, locks, section(name, directory))
    return hosts


def hold(children: Children, path: Path) -> subprocess.Popen[str]:
    return children.python(FLOCK_HOLDER, str(path))


def release(holder: subprocess.Popen[str]) -> None:
    holder.kill()
    holder.wait(timeout=10)


def arrives(predicate: Callable[[], bool], what: str, receiver: Receiver) -> None:
    assert wait_until(predicate, timeout=WAIT_S, interval=0.2), (
        f"no {what}; got {json.dumps(receiver.received)[-3000:]}"
    )


def silence(alertmanagers: Alertmanagers, lock: str) -> None:
    amtool = require_tool("amtool")
    added = subprocess.run(
        [
            amtool,
            "silence",
            "add",
            f"lock={lock}",
            f"--alertmanager.url={alertmanagers.urls[0]}",
            "--author=fleet-test",
            "--comment=maintenance",
            "--duration=1h",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert added.returncode == 0, added.stderr
    # Gossiped to the other peer before anything fires, or that peer could notify.
    assert wait_until(lambda: silenced_on(alertmanagers.urls[1], lock), timeout=20)


def silenced_on(url: str, lock: str) -> bool:
    silences = requests.get(f"{url}/api/v2/silences", timeout=2).json()
    return any(
        item["status"]["state"] == "active"
        and {"name": "lock", "value": lock}
        in [{"name": m["name"], "value": m["value"]} for m in item["matchers"]]
        for item in silences
    )


def suppressed_on(url: str, lock: str) -> bool:
    alerts = requests.get(
        f"{url}/api/v2/alerts", params={"filter": f'lock="{lock}"'}, timeout=2
    ).json()
    return any(alert["status"]["state"] == "suppressed" for alert in alerts)


def only(receiver: Receiver, lock: str) -> list[dict[str, Any]]:
    """The one notification of a lock's group, or a failure that says what came instead."""
    got = receiver.of(lock)
    assert len(got) == 1, f"{lock}: expected one notification, got {summary(got)}"
    return got


def summary(payloads: list[dict[str, Any]]) -> list[tuple[str, list[str], str]]:
    """(status, hosts, the peer that sent it) of each notification: what a failure shows."""
    return [(p["status"], sorted(alert_hosts(p)), p["externalURL"]) for p in payloads]


def alert_hosts(payload: dict[str, Any]) -> set[str]:
    return {alert["labels"].get("host", "") for alert in payload["alerts"]}


def run_fleet_cases(
    hosts: dict[str, Host],
    alertmanagers: Alertmanagers,
    receiver: Receiver,
    children: Children,
    delivered: Callable[[], None] = lambda: None,
) -> None:
    """The cases, asserted from the receiver; `delivered` makes the agents' state visible
    to Alertmanager (run every host; with Prometheus, that is all it takes too)."""
    host2 = hosts["host2"]
    silence(alertmanagers, "silenced")

    # Held too long on host 2; the shared lock on hosts 1 and 3; a silenced lock on host 2.
    holders = [hold(children, host2.locks[lock]) for lock in ("store", "silenced")]
    holders.append(hold(children, hosts["host1"].locks["shared"]))
    delivered()
    arrives(lambda: bool(receiver.of("store", "firing")), "alert for host2's lock", receiver)
    arrives(
        lambda: any(alert_hosts(p) == {"host1", "host3"} for p in receiver.of("shared")),
        "one alert for the shared lock naming hosts 1 and 3",
        receiver,
    )
    assert all(suppressed_on(url, "silenced") for url in alertmanagers.urls)
    time.sleep(SETTLE_S)
    [store] = only(receiver, "store")
    [alert] = store["alerts"]
    assert alert["labels"]["host"] == "host2" and alert["labels"]["lock"] == "store"
    assert alert["labels"]["holder_pid"] == str(holders[0].pid)
    assert alert["labels"]["severity"] == "critical"
    assert "host2" in alert["annotations"]["summary"]
    [shared] = only(receiver, "shared")  # one group, one notification, both hosts
    assert {a["labels"]["holder_pid"] for a in shared["alerts"]} == {str(holders[2].pid)}
    assert receiver.of("silenced") == []

    # Released: exactly one resolved each.
    for holder in holders:
        release(holder)
    delivered()
    arrives(lambda: bool(receiver.of("store", "resolved")), "resolved for host2", receiver)
    arrives(lambda: bool(receiver.of("shared", "resolved")), "resolved for shared", receiver)
    time.sleep(SETTLE_S)
    store_statuses = [payload["status"] for payload in receiver.of("store")]
    assert store_statuses == ["firing", "resolved"], summary(receiver.of("store"))
    # Hosts 1 and 3 let go a moment apart, so Alertmanager may send an update in between
    # (one alert resolved, one firing): still one group, and one "resolved" at the end.
    assert len(receiver.of("shared", "resolved")) == 1, summary(receiver.of("shared"))
    assert receiver.of("shared")[-1]["status"] == "resolved"
    assert len({payload["groupKey"] for payload in receiver.of("shared")}) == 1
    assert receiver.of("silenced") == []

    # One Alertmanager peer killed: the other still notifies, exactly once.
    killed = alertmanagers.procs[0]
    killed.kill()
    killed.wait(timeout=10)
    holder = hold(children, host2.locks["after-kill"])
    delivered()
    arrives(lambda: bool(receiver.of("after-kill")), "alert with one peer down", receiver)
    time.sleep(SETTLE_S)
    [after] = only(receiver, "after-kill")
    assert [a["labels"]["holder_pid"] for a in after["alerts"]] == [str(holder.pid)]


def test_fleet_through_prometheus_groups_silences_and_survives_a_peer(
    tmp_path: Path, children: Children, receiver: Receiver
) -> None:
    prometheus = require_tool("prometheus")
    node_exporter = require_tool("prometheus-node-exporter")
    alertmanagers = alertmanager_cluster(children, tmp_path, receiver)
    hosts = make_hosts(
        tmp_path,
        lambda name, directory: f'[prometheus]\ntextfile = "{directory}/textfile/lockwarden.prom"',
    )
    exporters = {}
    for name, host in hosts.items():
        port = free_port()
        log = tmp_path / f"{name}-node-exporter.log"
        argv = [
            node_exporter,
            f"--web.listen-address=127.0.0.1:{port}",
            "--collector.disable-defaults",
            "--collector.textfile",
            f"--collector.textfile.directory={host.textfile_directory}",
        ]
        proc = start(children, argv, log)
        exporters[name] = port
        ready(f"http://127.0.0.1:{port}/metrics", proc, log)
        host.run()  # every host has its textfile before the first scrape
    web = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(json.dumps(prometheus_config(exporters, alertmanagers)))
    argv = [
        prometheus,
        f"--config.file={config}",
        f"--storage.tsdb.path={tmp_path / 'prometheus-data'}",
        f"--web.listen-address=127.0.0.1:{web}",
        # Firing alerts are re-sent every 2 s and stay valid for 4 sends, so a busy machine
        # does not let one lapse (and fire again) between two evaluations.
        "--rules.alert.resend-delay=2s",
        "--log.level=warn",
    ]
    log = tmp_path / "prometheus.log"
    proc = start(children, argv, log)
    query = f"http://127.0.0.1:{web}/api/v1/query"
    ready(f"http://127.0.0.1:{web}/-/ready", proc, log)

    def scraped_all() -> bool:
        answer = requests.get(query, params={"query": "lockwarden_last_run_timestamp_seconds"})
        found = {item["metric"].get("host") for item in answer.json()["data"]["result"]}
        return found == set(HOSTS)

    assert wait_until(scraped_all, timeout=30, interval=0.2), log.read_text()[-2000:]

    def run_every_host() -> None:
        for host in hosts.values():
            host.run()

    run_fleet_cases(hosts, alertmanagers, receiver, children, run_every_host)
    # The shipped rules as Prometheus loaded them (not a copy).
    rules = requests.get(f"http://127.0.0.1:{web}/api/v1/rules", timeout=5).json()
    names = {rule["name"] for group in rules["data"]["groups"] for rule in group["rules"]}
    assert {"LockwardenLockHeldTooLong", "LockwardenLockStale"} <= names


def prometheus_config(exporters: dict[str, int], alertmanagers: Alertmanagers) -> dict[str, Any]:
    """1 s scrapes and evaluations; a `host` label per node-exporter by relabelling."""
    relabel = [
        {
            "source_labels": ["__address__"],
            "regex": f"127\\.0\\.0\\.1:{port}",
            "target_label": "host",
            "replacement": name,
        }
        for name, port in exporters.items()
    ]
    targets = [f"127.0.0.1:{port}" for port in exporters.values()]
    return {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "alerting": {
            "alertmanagers": [
                {"static_configs": [{"targets": [u.split("//")[1] for u in alertmanagers.urls]}]}
            ]
        },
        "scrape_configs": [
            {
                "job_name": "node",
                "static_configs": [{"targets": targets}],
                "relabel_configs": relabel,
            }
        ],
    }


def test_fleet_direct_to_alertmanager_without_prometheus(
    tmp_path: Path, children: Children, receiver: Receiver
) -> None:
    alertmanagers = alertmanager_cluster(children, tmp_path, receiver)
    urls = json.dumps(alertmanagers.urls)
    hosts = make_hosts(
        tmp_path, lambda name, _directory: f'[alertmanager]\nurls = {urls}\nhost = "{name}"'
    )
    outputs: list[str] = []

    def run_every_host() -> None:
        for host in hosts.values():
            outputs.append(host.run().stdout)

    run_fleet_cases(hosts, alertmanagers, receiver, children, run_every_host)
    # With a peer down, the run said so (and still reached the other one).
    assert "NOT delivered to http://127.0.0.1" in outputs[-2] + outputs[-3] + outputs[-1]


TEMPLATES = ROOT / "packaging" / "prometheus" / "lockwarden.tmpl"


def test_the_shipped_slack_and_email_templates_name_severity_hosts_holders_and_actions(
    tmp_path: Path, children: Children, receiver: Receiver
) -> None:
    """Debian's Alertmanager with the shipped templates, a Slack receiver whose api_url is a
    local server and a mail receiver on a local SMTP server: one lock held on shared storage,
    seen by two hosts, is one notification whose title carries the severity, the lock, each
    host with the holder's PID and role, and whose body lists each host's holders and action."""
    from alerts.helpers import Smtp

    alertmanager = require_tool("prometheus-alertmanager")
    smtp = Smtp()
    smtp.controller.start()
    try:
        title = '{{ template "lockwarden.title" . }}'
        text = '{{ template "lockwarden.text" . }}'
        config = tmp_path / "alertmanager.yml"
        config.write_text(
            json.dumps(
                {
                    "templates": [str(TEMPLATES)],
                    "inhibit_rules": shipped_inhibit_rules(),
                    "route": {
                        "receiver": "oncall",
                        "group_by": ["alertname", "lock"],
                        "group_wait": f"{GROUP_WAIT_S}s",
                        "group_interval": f"{GROUP_INTERVAL_S}s",
                        "repeat_interval": "1h",
                    },
                    "receivers": [
                        {
                            "name": "oncall",
                            "slack_configs": [
                                {"api_url": receiver.url, "channel": "#oncall",
                                 "title": title, "text": text, "send_resolved": True}
                            ],
                            "email_configs": [
                                {"to": "oncall@example.net", "from": "am@example.net",
                                 "smarthost": f"127.0.0.1:{smtp.port}", "require_tls": False,
                                 "headers": {"Subject": title}, "text": text, "html": ""}
                            ],
                        }
                    ],
                }
            )
        )  # fmt: skip
        url = single_alertmanager(children, tmp_path, alertmanager, config)
        section = f'[alertmanager]\nurls = ["{url}"]\nhost = "{{name}}"'
        hosts = make_hosts(tmp_path, lambda name, _directory: section.format(name=name))
        holder = hold(children, hosts["host1"].locks["shared"])
        for name in ("host1", "host3"):
            hosts[name].run()

        def slack_with_both_hosts() -> list[dict[str, Any]]:
            return [
                attachment
                for payload in list(receiver.received)
                for attachment in payload.get("attachments", [])
                if "host1" in attachment["title"] and "host3" in attachment["title"]
            ]

        arrives(lambda: bool(slack_with_both_hosts()), "a Slack message naming both", receiver)
        [slack] = slack_with_both_hosts()[:1]
        assert slack["title"].startswith("CRITICAL LockHeldTooLong shared:"), slack["title"]
        for name in ("host1", "host3"):
            assert f"{name} PID {holder.pid} (" in slack["title"], slack["title"]
            assert f"CRITICAL on {name}: " in slack["text"], slack["text"]
        assert slack["text"].count(f"holders: PID {holder.pid}") == 2, slack["text"]
        assert slack["text"].count(f"action: kill {holder.pid}") == 2, slack["text"]
        assert wait_until(lambda: len(smtp.sink.messages) >= 1, timeout=WAIT_S)
        assert smtp.subjects()[0] == slack["title"]
        assert smtp.bodies()[0].count(f"action: kill {holder.pid}") == 2, smtp.bodies()
    finally:
        smtp.controller.stop()


def test_an_escalation_never_tells_the_warning_channel_resolved(
    tmp_path: Path, children: Children, receiver: Receiver
) -> None:
    """Routing by severity, as most setups do, with the shipped inhibit_rules: a lock held
    past warn_after pages the warning channel; past critical_after the critical channel; the
    warning channel hears nothing more until the lock is free, then one "resolved" (before,
    the escalation resolved the warning alert while the lock got worse)."""
    alertmanager = require_tool("prometheus-alertmanager")
    config = tmp_path / "alertmanager.yml"
    webhook = [{"url": receiver.url, "send_resolved": True}]
    config.write_text(
        json.dumps(
            {
                "inhibit_rules": shipped_inhibit_rules(),
                "route": {
                    "receiver": "warning",
                    "group_by": ["alertname", "lock"],
                    "group_wait": "1s",
                    "group_interval": "2s",
                    "repeat_interval": "1h",
                    "routes": [{"matchers": ['severity="critical"'], "receiver": "critical"}],
                },
                "receivers": [
                    {"name": "warning", "webhook_configs": webhook},
                    {"name": "critical", "webhook_configs": webhook},
                ],
            }
        )
    )
    url = single_alertmanager(children, tmp_path, alertmanager, config)
    lock = tmp_path / "store.lock"
    lockwarden = write_config(
        tmp_path / "config.toml",
        f'[state]\npath = "{tmp_path}/state/state.jsonl"\n'
        f'[alertmanager]\nurls = ["{url}"]\nhost = "db1"\n'
        f'[[lock]]\nname = "store"\npath = "{lock}"\nformat = "kernel"\n'
        'warn_after = "0"\ncritical_after = "4s"\n',
    )
    holder = hold(children, lock)

    def channel(name: str) -> list[str]:
        return [p["status"] for p in list(receiver.received) if p["receiver"] == name]

    assert run_cli("--once", "--config", lockwarden).returncode == 1
    arrives(lambda: channel("warning") == ["firing"], "the warning page", receiver)
    time.sleep(4)
    assert run_cli("--once", "--config", lockwarden).returncode == 2
    arrives(lambda: channel("critical") == ["firing"], "the critical page", receiver)
    time.sleep(SETTLE_S)  # several group intervals: a "resolved" would have come by now
    assert channel("warning") == ["firing"], summary(receiver.received)
    release(holder)
    assert run_cli("--once", "--config", lockwarden).returncode == 0
    arrives(lambda: channel("critical") == ["firing", "resolved"], "critical resolved", receiver)
    arrives(lambda: channel("warning") == ["firing", "resolved"], "warning resolved", receiver)
