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
from typing import Callable, Dict, List, Set

# A gateway without API keys, and one with an API keys file and a key of it.
URL = os.environ.get("REDLOCKD_URL", "")
AUTH_URL = os.environ.get("REDLOCKD_TESTS_AUTH_URL", "")
API_KEY = os.environ.get("REDLOCKD_API_KEY", "")
# The redis:// URLs of the nodes behind REDLOCKD_URL, comma-separated.
REDIS = [u for u in os.environ.get("REDLOCKD_REDIS", "").split(",") if u]
# Two more gateways over the same nodes, which fault() restarts on the same port.
GATEWAYS = [u for u in os.environ.get("REDLOCKD_TESTS_GATEWAYS", "").split(",") if u]
# Where tests/clients_py_test.go takes faults (see fault()).
FAULTS = os.environ.get("REDLOCKD_TESTS_FAULTS", "")

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


needs_faults = unittest.skipUnless(FAULTS and len(GATEWAYS) == 2 and len(REDIS) == 3,
                                   "REDLOCKD_TESTS_FAULTS names no fault endpoint (tests/clients_py_test.go starts one)")


def fault(op: str, n: int = 0) -> None:
    """Has the Go test carry out a fault, and returns once it is done:
    "restart" gateway GATEWAYS[n] (SIGTERM, then a new one on its port),
    "stop" it, "start" it again; "pause" the first n nodes, "resume" them,
    "kill" node n, "revive" it (restarted with empty memory)."""
    req = urllib.request.Request(f"{FAULTS}/{op}?n={n}", data=b"", method="POST")
    with urllib.request.urlopen(req, timeout=120) as res:
        res.read()


def in_threads(n: int, f: Callable[[], None]) -> List[BaseException]:
    """Runs f in n threads at once and returns what they raised."""
    errors: List[BaseException] = []

    def run() -> None:
        try:
            f()
        except BaseException as e:  # reported by the caller
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return errors


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
    proxy closes), as from a gateway that stopped answering. The next
    ``fail[method]`` requests of a method get a 503 without being forwarded;
    the next ``drop[method]`` are forwarded and their answer is lost (the
    connection closed without it; its body is kept in ``dropped``)."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.counts: collections.Counter[str] = collections.Counter()
        self.hold: Set[str] = set()
        self.fail: collections.Counter[str] = collections.Counter()
        self.drop: collections.Counter[str] = collections.Counter()
        self.dropped: List[bytes] = []
        self._closed = threading.Event()
        self._mu = threading.Lock()
        proxy = self

        def take(c: collections.Counter[str], method: str) -> bool:
            with proxy._mu:
                if c[method] > 0:
                    c[method] -= 1
                    return True
                return False

        class Handler(BaseHTTPRequestHandler):
            def forward(self) -> None:
                proxy.counts[self.command] += 1
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else None
                if self.command in proxy.hold:
                    proxy._closed.wait(60)
                    self.close_connection = True
                    return
                if take(proxy.fail, self.command):
                    self.answer(503, {"X-Request-Id": "py-proxy-503", "Content-Type": "application/problem+json"},
                                b'{"type":"urn:redlockd:problem:quorum-unavailable","title":"x","status":503,'
                                b'"detail":"injected by the test proxy"}')
                    return
                hdrs = {k: v for k, v in self.headers.items()
                        if k.lower() in ("authorization", "lock-token", "content-type", "x-request-id")}
                req = urllib.request.Request(proxy.upstream + self.path, data=body, headers=hdrs, method=self.command)
                try:
                    with urllib.request.urlopen(req, timeout=60) as res:
                        status, rh, data = res.status, res.headers, res.read()
                except urllib.error.HTTPError as e:
                    status, rh, data = e.code, e.headers, e.read()
                if take(proxy.drop, self.command):
                    proxy.dropped.append(data)
                    self.close_connection = True
                    return
                self.answer(status, {k: rh[k] for k in ("Content-Type", "X-Request-Id", "Retry-After") if rh.get(k)},
                            data)

            def answer(self, status: int, headers: Dict[str, str], data: bytes) -> None:
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
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
