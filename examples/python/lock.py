#!/usr/bin/env python3
"""Hold a redlockd lock from Python with nothing but the standard library.

    from lock import Lock, LockHeld

    with Lock("nightly-report", wait_ms=10_000) as lock:
        for row in rows:
            lock.check()                       # raises LockLost once the lock is gone
            db.write(row, fence=lock.fence)    # the storage rejects stale fences

The lock is extended every ttl/3 in a background thread while the block runs
and released when it ends. Python cannot stop your code from outside, so the
block must call lock.check() (or test lock.valid()) before each step that
needs the lock, and pass lock.fence to the storage it writes to.

Run as a program it is a small demo (see --help); it sends $REDLOCKD_API_KEY as
a bearer key and, like `redlockd run`, exits 75 when the lock is held by another
owner, 69 when the gateway or a quorum is unavailable, 76 when the lock was lost
during the work, 64 when the gateway refused the request or the API key (a
configuration error: trying again cannot help).
"""

import argparse
import json
import os
import socket
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

EXIT_USAGE, EXIT_UNAVAILABLE, EXIT_HELD, EXIT_LOST = 64, 69, 75, 76


class LockError(Exception):
    """Base class of the errors of Lock."""


class LockHeld(LockError):
    """Another owner holds the lock (not acquired within wait_ms)."""


class LockLost(LockError):
    """The lock was lost: the work done under it may not have been exclusive."""


class Unavailable(LockError):
    """The gateway or a quorum of Redis nodes is unavailable: outcome unknown."""


class Refused(LockError):
    """The gateway refused the request: a 4xx other than 409 (400 a bad value,
    401 a missing or wrong API key, 404 a wrong URL, 413). A configuration
    error that no retry fixes."""


def _refused(status):
    return status is not None and 400 <= status < 500 and status != 409


class Lock:
    """A redlockd lock as a context manager.

    url defaults to $REDLOCKD_URL, then http://127.0.0.1:8080. api_key
    (default $REDLOCKD_API_KEY) is sent as a bearer token. token is an optional client-chosen token (22-128
    characters of [A-Za-z0-9_-]): acquiring again with it is idempotent.
    """

    def __init__(self, resource, *, url=None, ttl_ms=30_000, wait_ms=0, token=None, owner=None, api_key=None):
        self.resource = resource
        self.url = (url or os.environ.get("REDLOCKD_URL") or "http://127.0.0.1:8080").rstrip("/")
        self.ttl_ms, self.wait_ms = ttl_ms, wait_ms
        self.token, self.owner = token, owner
        self.api_key = api_key if api_key is not None else os.environ.get("REDLOCKD_API_KEY")
        self.fence = None
        self.until = 0.0  # end of the safe window, time.monotonic() seconds
        self.lost_reason = "the lock's validity ended"
        self._lost = threading.Event()
        self._stop = threading.Event()
        self._thread = None

    # -- the protocol ------------------------------------------------------

    def _request(self, method, body=None, *, timeout, with_token=False):
        """Sends one request; returns (status, decoded JSON body or {})."""
        headers = {}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if with_token:
            headers["Lock-Token"] = self.token  # the token travels in a header, never in the URL
        if self.api_key:
            headers["Authorization"] = "Bearer " + self.api_key
        req = urllib.request.Request(
            self.url + "/locks/" + urllib.parse.quote(self.resource, safe=""),
            data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as res:
                status, raw = res.status, res.read()
        except urllib.error.HTTPError as e:  # 4xx and 5xx answers
            status, raw = e.code, e.read()
        try:
            return status, json.loads(raw) if raw else {}
        except ValueError:
            return status, {}

    def acquire(self):
        body = {"ttl_ms": self.ttl_ms, "wait_ms": self.wait_ms}
        if self.token:
            body["token"] = self.token
        if self.owner:
            body["owner"] = self.owner
        start = time.monotonic()  # validity counts from before the request: our round trip is subtracted
        try:
            status, res = self._request("POST", body, timeout=self.wait_ms / 1000 + 10)
        except OSError as e:  # refused, unreachable, timed out
            raise Unavailable(f"cannot reach the gateway at {self.url}: {e}") from e
        if status == 409:
            raise LockHeld(f"{self.resource} is held by another owner (retry in {res.get('retry_after_ms')} ms)")
        if _refused(status):
            raise Refused(f"the gateway refused to acquire {self.resource}: HTTP {status}: {res.get('detail', '')}")
        if status != 201:
            raise Unavailable(f"acquire {self.resource}: HTTP {status}: {res.get('detail', '')}")
        self.token, self.fence = res["token"], res["fencing_token"]
        self.until = start + res["validity_ms"] / 1000
        if self.until - time.monotonic() < self.ttl_ms * 2 / 3000:
            # The validity counts from before the request, so a wait ate into
            # it: extend at once (an extension never waits) to know the window.
            self._extend(max(self.until, time.monotonic() + self.ttl_ms / 3000))
            if self._lost.is_set():
                raise LockLost(f"{self.resource}: lost right after it was acquired: {self.lost_reason}")
        return self

    def _extend(self, deadline):
        """Extends the lock, trying again after a 503 or no answer, until deadline.

        On a 409 (the lock is not ours any more), another 4xx (e.g. the API key
        was revoked: no extension can succeed) or at deadline the lock is lost.
        """
        while not self._stop.is_set():
            start = time.monotonic()
            left = deadline - start
            if left <= 0:
                return self._lose("no extension succeeded before the lock's validity ended")
            try:
                status, res = self._request("PATCH", {"ttl_ms": self.ttl_ms}, timeout=min(left, self.ttl_ms / 3000),
                                            with_token=True)
            except OSError:
                status, res = None, {}
            if status == 200:
                self.until = start + res["validity_ms"] / 1000
                return
            if status == 409:
                return self._lose(f"the gateway says the lock is not ours any more ({res.get('lock_state')})")
            if _refused(status):
                return self._lose(f"the gateway refused the extension: HTTP {status}: {res.get('detail', '')}")
            self._stop.wait(min(0.2, max(left, 0)))  # 503 or no answer: try again while valid

    def _keep(self):
        while not self._stop.wait(self.ttl_ms / 3000) and not self._lost.is_set():
            self._extend(self.until)

    def _lose(self, why):
        self.lost_reason = why
        self._lost.set()

    def release(self):
        """Releases the lock; raises LockLost if it was not held any more."""
        self._stop.set()
        if self._thread:
            self._thread.join()
        try:
            status, res = self._request("DELETE", timeout=5, with_token=True)
        except OSError as e:
            status, res = None, {"detail": str(e)}
        if self._lost.is_set():
            raise LockLost(f"{self.resource}: {self.lost_reason}")
        if status == 409:
            raise LockLost(f"{self.resource}: not held at release ({res.get('lock_state')}): "
                           "the work may not have been exclusive")
        if status != 204:  # unknown: the lock expires at the end of its TTL anyway
            print(f"lock: could not confirm the release of {self.resource}: {status} {res.get('detail', '')}",
                  file=sys.stderr)

    # -- what the holder uses ----------------------------------------------

    def valid(self):
        """Whether the lock is still safely held (not lost, validity not over)."""
        return not self._lost.is_set() and time.monotonic() < self.until

    def check(self):
        """Raises LockLost unless the lock is still safely held."""
        if not self.valid():
            raise LockLost(f"{self.resource}: {self.lost_reason}")

    def __enter__(self):
        self.acquire()
        self._thread = threading.Thread(target=self._keep, name="redlockd-extend", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            self.release()
        except LockLost:
            if exc_type is None or exc_type is LockLost:
                raise
        return False


def main(argv=None):
    p = argparse.ArgumentParser(description="Demo: hold a redlockd lock while doing some work.")
    p.add_argument("resource")
    p.add_argument("--ttl-ms", type=int, default=30_000)
    p.add_argument("--wait-ms", type=int, default=0, help="how long to wait for the lock (default 0: fail at once)")
    p.add_argument("--work-ms", type=int, default=1_000, help="how long the work takes")
    p.add_argument("--journal", help="file to append 'enter ID FENCE' and 'exit ID' lines to")
    try:
        args = p.parse_args(argv)
    except SystemExit as e:  # argparse exits 2 on a usage error; 64 is the convention here
        return EXIT_USAGE if e.code == 2 else e.code
    me = f"python-{os.getpid()}"

    def journal(line):
        if args.journal:
            with open(args.journal, "a") as f:
                f.write(line + "\n")

    try:
        with Lock(args.resource, ttl_ms=args.ttl_ms, wait_ms=args.wait_ms, owner=f"{socket.gethostname()}:{me}") as lock:
            journal(f"enter {me} {lock.fence}")
            print(f"lock: holding {args.resource} with fencing token {lock.fence}", flush=True)
            end = time.monotonic() + args.work_ms / 1000
            while time.monotonic() < end:  # the work, in steps that each check the lock
                lock.check()
                time.sleep(min(0.05, max(end - time.monotonic(), 0)))
            lock.check()
            journal(f"exit {me}")
    except LockHeld as e:
        print(f"lock: {e}", file=sys.stderr)
        return EXIT_HELD
    except Unavailable as e:
        print(f"lock: {e}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    except Refused as e:
        print(f"lock: {e}", file=sys.stderr)
        return EXIT_USAGE
    except LockLost as e:
        print(f"lock: lost: {e}", file=sys.stderr)
        return EXIT_LOST
    print(f"lock: released {args.resource}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
