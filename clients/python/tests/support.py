"""What the tests share: the gateways under test (from the environment) and
a proxy between a client and the gateway that can stop answering."""

from __future__ import annotations

import collections
import os
import secrets
import socket
import threading
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Set

# A gateway without API keys, and one with an API keys file and a key of it.
URL = os.environ.get("REDLOCKD_URL", "")
AUTH_URL = os.environ.get("REDLOCKD_TESTS_AUTH_URL", "")
API_KEY = os.environ.get("REDLOCKD_API_KEY", "")
# The redis:// URLs of the nodes behind REDLOCKD_URL, comma-separated.
REDIS = [u for u in os.environ.get("REDLOCKD_REDIS", "").split(",") if u]

needs_gateway = unittest.skipUnless(URL, "REDLOCKD_URL names no gateway (tests/clients_py_test.go starts one)")


def resource(test: unittest.TestCase) -> str:
    """A resource name of its own for test."""
    name = test.id().rsplit(".", 1)[-1].replace("_", "-")
    return f"py-{name}-{secrets.token_hex(4)}"


def closed_url() -> str:
    """The URL of a port of 127.0.0.1 that nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def eventually(test: unittest.TestCase, what: str, f: Callable[[], bool], within: float = 10.0) -> None:
    """Polls f until it is true; fails the test after within seconds."""
    deadline = time.monotonic() + within
    while not f():
        if time.monotonic() > deadline:
            test.fail(f"not within {within}s: {what}")
        time.sleep(0.02)


def flush_nodes() -> None:
    """Empties every node (FLUSHALL): each lock vanishes behind its holder's back."""
    for u in REDIS:
        p = urllib.parse.urlsplit(u)
        with socket.create_connection((p.hostname, p.port or 6379), timeout=5) as s:
            s.sendall(b"*1\r\n$8\r\nFLUSHALL\r\n")
            if not s.recv(64).startswith(b"+OK"):
                raise RuntimeError(f"FLUSHALL refused by {p.hostname}:{p.port}")


class Proxy:
    """Forwards requests to upstream, counting them by method. A request whose
    method is in ``hold`` gets no answer (its connection is dropped when the
    proxy closes), as from a gateway that stopped answering."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.counts: collections.Counter[str] = collections.Counter()
        self.hold: Set[str] = set()
        self._closed = threading.Event()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def forward(self) -> None:
                proxy.counts[self.command] += 1
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else None
                if self.command in proxy.hold:
                    proxy._closed.wait(60)
                    self.close_connection = True
                    return
                hdrs = {k: v for k, v in self.headers.items()
                        if k.lower() in ("authorization", "lock-token", "content-type", "x-request-id")}
                req = urllib.request.Request(proxy.upstream + self.path, data=body, headers=hdrs, method=self.command)
                try:
                    with urllib.request.urlopen(req, timeout=60) as res:
                        status, rh, data = res.status, res.headers, res.read()
                except urllib.error.HTTPError as e:
                    status, rh, data = e.code, e.headers, e.read()
                self.send_response(status)
                for k in ("Content-Type", "X-Request-Id", "Retry-After"):
                    if rh.get(k):
                        self.send_header(k, rh[k])
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_DELETE = forward

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._closed.set()
        self._server.shutdown()
        self._server.server_close()
