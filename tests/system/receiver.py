#!/usr/bin/python3
"""An HTTP receiver for apprise's json:// service, run inside the test container.

Every request is appended to DIR/requests.jsonl as {"path", "status", "body"}. The status it
answers is 200, or the number in DIR/status when that file exists (an outage on demand).
"""

import http.server
import json
import sys
from pathlib import Path

directory = Path(sys.argv[1])
port = int(sys.argv[2])


class Receiver(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        status_file = directory / "status"
        status = int(status_file.read_text()) if status_file.exists() else 200
        try:
            body = json.loads(raw)
        except ValueError:
            body = raw.decode("utf-8", "replace")
        record = {"path": self.path, "status": status, "body": body}
        with open(directory / "requests.jsonl", "a") as log:
            log.write(json.dumps(record) + "\n")
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


directory.mkdir(parents=True, exist_ok=True)
http.server.ThreadingHTTPServer(("127.0.0.1", port), Receiver).serve_forever()
