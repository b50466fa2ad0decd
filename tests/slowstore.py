"""A slow artifact store for tests: a real HTTP proxy on 127.0.0.1 in front of a real ``mlflow server`` that
holds each artifact upload (a ``PUT`` under ``/api/2.0/mlflow-artifacts/``) for ``delay_s`` before passing it on,
as a far or busy object store does. Every upload's start and end are kept (``uploads``)."""

from __future__ import annotations

import http.client
import http.server
import threading
import time
import urllib.parse
from typing import Any

ARTIFACTS = "/api/2.0/mlflow-artifacts/"


class SlowProxy:
    def __init__(self, upstream: str, delay_s: float) -> None:
        self.upstream = urllib.parse.urlparse(upstream)
        self.delay_s = delay_s
        self.uploads: list[tuple[float, float, str]] = []  # (start, end, path)
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _pass(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                slow = self.command == "PUT" and self.path.startswith(ARTIFACTS)
                start = time.time()
                if slow:
                    time.sleep(proxy.delay_s)
                conn = http.client.HTTPConnection(proxy.upstream.hostname, proxy.upstream.port, timeout=300)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                if slow:
                    proxy.uploads.append((start, time.time(), self.path))
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                conn.close()

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _pass  # noqa: N815

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
