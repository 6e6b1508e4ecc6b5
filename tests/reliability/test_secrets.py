"""Row 9: secrets. A config with a token in each place a token can be (a notify URL, a
urls_file, a urls_env variable, the heartbeat URL), debug logging on (-v), a real HTTP receiver
on 127.0.0.1 that fails first, echoing the request path and headers (so the Basic credentials)
in its error body, then succeeds; the runs are real lockwarden runs (forked from forkrun.py,
calling the real CLI: --once, check-config, notify-test, history).

Promises: no token — raw, or in the Basic-auth form the receiver echoes — appears in stdout,
stderr, the journal or the Prometheus .prom file; a config file holding secrets that group or
others can read gets a warning on stderr (docs/reliability.md)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from alerts.helpers import Children, Receiver, receiver
from alerts.test_end_to_end import Scenario
from conftest import run_python

from .faults_support import ForkRunner, Ran
from .figures_faults import Figure, record

__all__ = ["receiver"]

TOKENS = {
    "urls": "UrlTok3nSecret0001",
    "urls_file": "FileTok3nSecret0002",
    "urls_env": "EnvTok3nSecret0003",
    "heartbeat": "HbTok3nSecret0004abcd",
    "webhook path": "PathTok3nSecret0005",
}
ENV_NAME = "LOCKWARDEN_TEST_SECRET_URLS"


def forms(token: str) -> list[str]:
    """The token itself and the Basic credentials that carry it (what an echo shows)."""
    return [token, base64.b64encode(f"lockwarden:{token}".encode()).decode()]


def test_tokens_appear_nowhere_under_debug_logging_and_an_echoing_receiver(
    tmp_path: Path, children: Children, receiver: Receiver, figures: list[str]
) -> None:
    scenario = Scenario(tmp_path, children)
    scenario.hold()
    urls_file = tmp_path / "apprise-urls"
    urls_file.write_text(f"{receiver.url(TOKENS['urls_file'])}\n")
    urls_file.chmod(0o600)
    prom = tmp_path / "lockwarden.prom"
    path_url = f"json://127.0.0.1:{receiver.port}/hooks/{TOKENS['webhook path']}"
    heartbeat = f"http://127.0.0.1:{receiver.port}/ping/{TOKENS['heartbeat']}"
    scenario.config.write_text(
        f"""
prometheus = {{ textfile = {json.dumps(str(prom))} }}

[state]
path = {json.dumps(str(scenario.state_path))}

[notify]
urls = [{json.dumps(receiver.url(TOKENS["urls"]))}, {json.dumps(path_url)}]
urls_file = {json.dumps(str(urls_file))}
urls_env = "{ENV_NAME}"
timeout = "3s"

[heartbeat]
url = {json.dumps(heartbeat)}

[[lock]]
name = "wa-store"
path = "{scenario.lock}"
critical_after = "1h"
"""
    )
    scenario.config.chmod(0o600)
    env = {ENV_NAME: receiver.url(TOKENS["urls_env"])}
    runner = ForkRunner(children, tmp_path / "runs")
    config = ["--config", str(scenario.config)]
    receiver.mode, receiver.fail_status = "fail", 503  # echoes path and headers back
    outputs: list[Ran] = []
    for minutes in (120, 125):
        outputs.append(runner.once(scenario.config, scenario.at(minutes), "-v", **env))
    receiver.mode = "ok"
    outputs.append(runner.once(scenario.config, scenario.at(130), "-v", "--json", **env))
    outputs += runner.batch(
        [
            (["check-config", *config, "-v"], env),
            (["notify-test", *config, "-v"], env),
            (["history", *config, "--json"], env),
        ]
    )
    assert len(receiver.payloads) >= 4 + 4  # each service: the alert and the test message
    assert receiver.pings  # the heartbeat really was pinged
    places = {f"run {i} stdout": r.stdout for i, r in enumerate(outputs)}
    places |= {f"run {i} stderr": r.stderr for i, r in enumerate(outputs)}
    places["journal"] = scenario.journal_text()
    places["prom"] = prom.read_text()
    assert places["journal"] and "lockwarden_lock_state" in places["prom"]
    leaks = [
        f"{where} holds the {name} token"
        for where, text in places.items()
        for name, token in TOKENS.items()
        if any(form in text for form in forms(token))
    ]
    figure = Figure("row 9, secrets", cases=len(places) * len(TOKENS), failures=len(leaks))
    for ran in outputs:
        figure.took(ran.seconds)
    figure.detail = f"{len(TOKENS)} tokens x {len(places)} outputs (stdout, stderr, journal, .prom)"
    record(figures, figure)
    assert leaks == []
    assert all(not ran.crashed for ran in outputs)


def test_a_config_with_secrets_readable_by_others_is_warned_about(
    tmp_path: Path, children: Children, receiver: Receiver
) -> None:
    scenario = Scenario(tmp_path, children)
    scenario.configure([receiver.url(TOKENS["urls"])])
    runner = ForkRunner(children, tmp_path / "runs")
    for mode, warned in ((0o644, True), (0o640, True), (0o600, False)):
        scenario.config.chmod(mode)
        done = runner.batch([(["check-config", "--config", str(scenario.config)], {})])[0]
        assert done.code == 0, done.stderr
        assert ("readable by other users" in done.stderr) is warned, (oct(mode), done.stderr)
        assert TOKENS["urls"] not in done.stderr + done.stdout
    no_secret = tmp_path / "plain.toml"
    no_secret.write_text(f'[[lock]]\nname = "a"\npath = "{scenario.lock}"\n')
    no_secret.chmod(0o644)
    quiet = runner.batch([(["check-config", "--config", str(no_secret)], {})])[0]
    assert "readable by other users" not in quiet.stderr


def test_a_token_in_a_lockwarden_log_line_is_masked_on_the_cli_handler() -> None:
    """In-process (the handler is the CLI's own): the masking filter must sit on the handler
    that really writes lockwarden's lines, which does not propagate to the root logger."""
    import io
    import logging

    from lockwarden.alerts.notify import redact_in_logs
    from lockwarden.support import logs

    stream = io.StringIO()
    logger = logging.getLogger("lockwarden")
    saved = (list(logger.handlers), logger.level, logger.propagate)
    try:
        logs.configure(True, stream, {"NO_COLOR": "1"})
        redact_in_logs([TOKENS["urls"]])
        logging.getLogger("lockwarden.alerts.notify").warning(
            "posting to x://%s@host", TOKENS["urls"]
        )
    finally:
        logger.handlers[:] = saved[0]
        logger.setLevel(saved[1])
        logger.propagate = saved[2]
    assert "posting to x://****@host" in stream.getvalue()
    assert TOKENS["urls"] not in stream.getvalue()


def test_a_token_is_masked_by_the_cli_handler_set_up_before_the_redaction() -> None:
    """The CLI's stderr handler, set up before notify installs its masking filter, masks the
    token too (the filter goes on every handler that exists when it is installed)."""
    import io
    import logging

    from lockwarden.alerts.notify import redact_in_logs
    from lockwarden.support import logs

    stream = io.StringIO()
    logger = logging.getLogger("lockwarden")
    saved = (list(logger.handlers), logger.level, logger.propagate)
    try:
        logger.handlers[:] = []
        handler = logs.configure(False, stream, {"NO_COLOR": "1"})
        redact_in_logs([TOKENS["urls"]])
        logging.getLogger("lockwarden.alerts.notify").warning(
            "posting to x://%s@host", TOKENS["urls"]
        )
        logs.release(handler)
    finally:
        logger.handlers[:] = saved[0]
        logger.setLevel(saved[1])
        logger.propagate = saved[2]
    assert "posting to x://****@host" in stream.getvalue()
    assert TOKENS["urls"] not in stream.getvalue()


LIBRARY_WARNING = """
import logging, sys
from lockwarden.alerts.notify import redact_in_logs
token = sys.argv[1]
redact_in_logs([token])
# No handler anywhere, as under the CLI: logging's last resort prints a library's warning.
logging.getLogger("urllib3.connectionpool").warning("Retrying after a reset: /hook/%s", token)
try:
    raise ConnectionError(f"refused: http://127.0.0.1:9/hook/{token}")
except ConnectionError:
    logging.getLogger("apprise").error("send failed", exc_info=True)
"""


def test_library_warnings_and_tracebacks_are_masked_too() -> None:
    """urllib3 and apprise log to their own loggers; with no root handler (the CLI sets none)
    logging's last resort prints them, and a traceback can quote the URL as well."""
    done = run_python(LIBRARY_WARNING, TOKENS["urls"])
    assert done.returncode == 0, done.stderr
    assert "Retrying after a reset: /hook/****" in done.stderr
    assert "refused: http://127.0.0.1:9/hook/****" in done.stderr  # the traceback's last line
    assert TOKENS["urls"] not in done.stderr
