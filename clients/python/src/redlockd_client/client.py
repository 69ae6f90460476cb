"""Client: the gateway's operations, one HTTP request each, with typed results
and errors. Durations are seconds (floats), as elsewhere in Python; the
gateway's ``*_ms`` fields keep their names and units."""

from __future__ import annotations

import http.client
import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Callable, Dict, Iterator, Optional, Sequence, Tuple, TypeVar, Union, overload

from .errors import (ConfigError, LimitMismatchError, LockHeldError, NotOwnerError, RedlockdError,
                     UnavailableError)
from .held import HeldLock, HeldLocks, HeldPermit
from .results import (ListedLock, Lock, LockInfo, LockPage, MultiLock, Permit, SemaphoreInfo, decode_lock,
                      decode_multi, decode_permit, decode_semaphore, known)

T = TypeVar("T")

# The rules of a multi-resource lock's resources (openapi.yaml, POST /locks).
MAX_RESOURCES = 16
_NAME = re.compile(r"[A-Za-z0-9._:-]{1,200}")


def _ms(seconds: float) -> int:
    return int(round(seconds * 1000))


class Client:
    """A redlockd gateway at ``url`` (e.g. ``http://127.0.0.1:8080``), or
    several gateways over the same Redis nodes, given as a list of URLs.
    ``api_key`` is sent as ``Authorization: Bearer``; ``timeout`` (seconds)
    bounds each request, plus the wait of an acquire.

    With several URLs, each call goes to the current gateway; a refused
    connection (nothing was sent) is tried on the next one at once, and a
    call that got no answer or a 5xx makes the next one current for the
    calls after it, so the retries of the hold helpers (``lock()``,
    ``permit()``) go round the list."""

    def __init__(self, url: Union[str, Sequence[str]], api_key: Optional[str] = None, timeout: float = 10.0) -> None:
        urls = [url] if isinstance(url, str) else list(url)
        if not urls:
            raise ConfigError("Client: no gateway URL")
        self.urls: Tuple[str, ...] = tuple(u.rstrip("/") for u in urls)
        self._current = 0
        self._api_key = api_key
        self.timeout = timeout

    @property
    def url(self) -> str:
        """The gateway the next call goes to."""
        return self.urls[self._current]

    def __repr__(self) -> str:
        return f"Client({self.url!r})" if len(self.urls) == 1 else f"Client({list(self.urls)!r})"

    def _request(self, method: str, path: str, body: Optional[Dict[str, Any]] = None, *,
                 token: Optional[str] = None, timeout: Optional[float] = None,
                 what: str = "") -> Tuple[int, Dict[str, Any]]:
        """Sends one request; returns (status, JSON body) of a 2xx answer and
        raises the typed error of anything else."""
        headers = {}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if token is not None:
            headers["Lock-Token"] = token  # the token travels in a header, never in the URL
        if self._api_key:
            headers["Authorization"] = "Bearer " + self._api_key
        first = self._current
        for i in range(len(self.urls)):
            n = (first + i) % len(self.urls)
            base = self.urls[n]
            url = urllib.parse.urlsplit(base)
            if url.scheme not in ("http", "https") or not url.netloc:
                raise ConfigError(f"{what}: the gateway URL {base} is not http(s)://host[:port]")
            req = urllib.request.Request(base + path, data=data, headers=headers, method=method)
            try:
                with urllib.request.urlopen(req, timeout=self.timeout if timeout is None else timeout) as res:
                    return res.status, _json(res.read())
            except urllib.error.HTTPError as e:  # 4xx and 5xx answers
                try:
                    raw = e.read()
                except (OSError, http.client.HTTPException):
                    raw = b""
                err = _problem(what, e.code, e.headers.get("X-Request-Id"), _json(raw))
                if isinstance(err, UnavailableError):
                    self._failed(n)
                raise err from None
            except (OSError, http.client.HTTPException) as e:  # refused, unreachable, timed out, cut
                self._failed(n)
                if _refused(e) and i + 1 < len(self.urls):
                    continue  # nothing was sent: the next gateway at once
                raise UnavailableError(f"{what}: no answer from the gateway at {base}: {e}",
                                       type="network", detail=str(e)) from e
            except ValueError:  # its text may quote a header, i.e. the token or the key
                raise ConfigError(f"{what}: cannot send the request to {base}: "
                                  "a malformed URL, or a token or API key with characters a header cannot hold") from None
        raise AssertionError("unreachable")  # the last URL's error was raised

    def _failed(self, n: int) -> None:
        """The gateway urls[n] gave no answer or a 5xx: the next one becomes current."""
        if self._current == n:
            self._current = (n + 1) % len(self.urls)

    def _decode(self, what: str, build: Callable[[], T]) -> T:
        """build()'s value; a ConfigError when the answer lacks what it needs."""
        try:
            return build()
        except (KeyError, TypeError, AttributeError):
            raise ConfigError(f"{what}: the answer of {self.url} is not redlockd's: a wrong URL?",
                              type="unexpected-answer") from None

    def _path(self, resource: str) -> str:
        return "/locks/" + urllib.parse.quote(resource, safe="")

    def acquire(self, resource: str, ttl: float = 30.0, wait: float = 0.0, token: Optional[str] = None,
                owner: Optional[str] = None, mode: Optional[str] = None) -> Lock:
        """Takes the lock for ``ttl`` seconds, waiting up to ``wait`` seconds
        for it. With a client-chosen ``token`` (22-128 of [A-Za-z0-9_-]) the
        call is idempotent: retrying it after an unknown outcome is safe.
        ``mode`` "read" shares the lock with other readers (its fencing token
        is the last writer's); "write", the default, is exclusive."""
        body = _acquire_body(ttl, wait, token=token, owner=owner, mode=mode)
        start = time.monotonic()  # rule 1: validity counts from before the request
        what = f"acquire {resource}"
        _, res = self._request("POST", self._path(resource), body, timeout=self.timeout + wait, what=what)
        return self._decode(what, lambda: decode_lock(res, start))

    def extend(self, resource: str, token: str, ttl: float = 30.0, timeout: Optional[float] = None) -> Lock:
        """Resets the lock's TTL to ``ttl`` seconds from now; NotOwnerError
        when ``token`` does not hold it any more."""
        start = time.monotonic()
        what = f"extend {resource}"
        _, res = self._request("PATCH", self._path(resource), {"ttl_ms": _ms(ttl)}, token=token,
                               timeout=timeout, what=what)
        return self._decode(what, lambda: decode_lock(res, start))

    def release(self, resource: str, token: str, timeout: Optional[float] = None) -> None:
        """Releases the lock; NotOwnerError when ``token`` did not hold it
        (expired or taken): the work may not have been exclusive."""
        self._request("DELETE", self._path(resource), token=token, timeout=timeout, what=f"release {resource}")

    def acquire_multi(self, resources: Sequence[str], ttl: float = 30.0, wait: float = 0.0,
                      token: Optional[str] = None, owner: Optional[str] = None) -> MultiLock:
        """Takes the write locks of every resource in ``resources``, or none:
        the gateway's nodes grant all or nothing, so taking ["a", "b"] and
        ["b", "a"] at once never deadlocks. Arguments and errors are
        acquire's; bad ``resources`` raise ConfigError before any request."""
        what = "acquire " + " ".join(check_resources("acquire", resources))
        body = _acquire_body(ttl, wait, resources=list(resources), token=token, owner=owner)
        start = time.monotonic()
        _, res = self._request("POST", "/locks", body, timeout=self.timeout + wait, what=what)
        return self._decode(what, lambda: decode_multi(res, start))

    def extend_multi(self, resources: Sequence[str], token: str, ttl: float = 30.0,
                     timeout: Optional[float] = None) -> MultiLock:
        """Resets the TTL of the locks ``token`` holds on ``resources``, only
        if it holds every one of them; NotOwnerError otherwise."""
        what = "extend " + " ".join(check_resources("extend", resources))
        start = time.monotonic()
        _, res = self._request("PATCH", _multi_path(resources), {"ttl_ms": _ms(ttl)}, token=token,
                               timeout=timeout, what=what)
        return self._decode(what, lambda: decode_multi(res, start))

    def release_multi(self, resources: Sequence[str], token: str, timeout: Optional[float] = None) -> None:
        """Releases the locks ``token`` holds on ``resources``; NotOwnerError
        when it did not hold them (expired or taken)."""
        what = "release " + " ".join(check_resources("release", resources))
        self._request("DELETE", _multi_path(resources), token=token, timeout=timeout, what=what)

    def inspect(self, resource: str) -> LockInfo:
        """Who holds the lock (never its token); ``held`` False when free."""
        what = f"inspect {resource}"
        _, res = self._request("GET", self._path(resource), what=what)
        return self._decode(what, lambda: LockInfo(**known(LockInfo, res)))

    def list(self, prefix: str = "", limit: Optional[int] = None, cursor: Optional[str] = None) -> LockPage:
        """One page of the locks held in the API key's namespace whose
        resource starts with ``prefix``."""
        q = {k: v for k, v in (("prefix", prefix), ("limit", limit), ("cursor", cursor)) if v}
        path = "/locks" + ("?" + urllib.parse.urlencode(q) if q else "")
        _, res = self._request("GET", path, what="list locks")
        return self._decode("list locks", lambda: LockPage(
            [ListedLock(**known(ListedLock, x)) for x in res["locks"]], res.get("next_cursor")))

    def list_all(self, prefix: str = "") -> Iterator[ListedLock]:
        """Every lock held whose resource starts with ``prefix``, page after page."""
        cursor: Optional[str] = None
        while True:
            page = self.list(prefix, cursor=cursor)
            yield from page.locks
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    def _semaphore(self, name: str) -> str:
        return "/semaphores/" + urllib.parse.quote(name, safe="")

    def acquire_permit(self, name: str, limit: int, ttl: float = 30.0, wait: float = 0.0,
                       token: Optional[str] = None, owner: Optional[str] = None) -> Permit:
        """Takes one of the ``limit`` permits of the semaphore ``name`` for
        ``ttl`` seconds, waiting up to ``wait`` seconds for one. Every holder
        must give the same ``limit`` (LimitMismatchError otherwise);
        LockHeldError when every permit stayed held. With a client-chosen
        ``token`` the call is idempotent (the same permit and fencing token)."""
        body = _acquire_body(ttl, wait, limit=limit, token=token, owner=owner)
        start = time.monotonic()
        what = f"acquire a permit of {name}"
        _, res = self._request("POST", self._semaphore(name), body, timeout=self.timeout + wait, what=what)
        return self._decode(what, lambda: decode_permit(res, start))

    def extend_permit(self, name: str, token: str, ttl: float = 30.0, timeout: Optional[float] = None) -> Permit:
        """Resets the permit's TTL to ``ttl`` seconds from now; NotOwnerError
        (``lock_state`` "expired") when ``token`` holds no permit any more."""
        start = time.monotonic()
        what = f"extend a permit of {name}"
        _, res = self._request("PATCH", self._semaphore(name), {"ttl_ms": _ms(ttl)}, token=token,
                               timeout=timeout, what=what)
        return self._decode(what, lambda: decode_permit(res, start))

    def release_permit(self, name: str, token: str, timeout: Optional[float] = None) -> None:
        """Releases the permit ``token`` holds (idempotent); NotOwnerError
        when it held none (expired)."""
        self._request("DELETE", self._semaphore(name), token=token, timeout=timeout,
                      what=f"release a permit of {name}")

    def inspect_semaphore(self, name: str) -> SemaphoreInfo:
        """The permits of the semaphore held now (never their tokens)."""
        what = f"inspect semaphore {name}"
        _, res = self._request("GET", self._semaphore(name), what=what)
        return self._decode(what, lambda: decode_semaphore(res))

    @overload
    def lock(self, resource: str, ttl: float = ..., wait: float = ..., owner: Optional[str] = ...,
             token: Optional[str] = ..., mode: Optional[str] = ...) -> HeldLock: ...

    @overload
    def lock(self, *, resources: Sequence[str], ttl: float = ..., wait: float = ..., owner: Optional[str] = ...,
             token: Optional[str] = ...) -> HeldLocks: ...

    def lock(self, resource: Optional[str] = None, ttl: float = 30.0, wait: float = 0.0,
             owner: Optional[str] = None, token: Optional[str] = None, mode: Optional[str] = None, *,
             resources: Optional[Sequence[str]] = None) -> Union[HeldLock, HeldLocks]:
        """A context manager that holds a lock while its block runs:
        ``with client.lock("report", ttl=30, wait=10) as held:`` (a HeldLock;
        ``mode="read"`` a read lock), or the write locks of several resources,
        all or none: ``with client.lock(resources=["a", "b"]) as held:`` (a
        HeldLocks). See Hold for the rules they apply."""
        if (resource is None) == (resources is None):
            raise TypeError("lock() takes either a resource or resources=[...]")
        if resources is not None:
            if mode not in (None, "write"):
                raise ConfigError("lock: the locks of several resources are write locks",
                                  type="urn:redlockd:problem:invalid-request")
            return HeldLocks(self, check_resources("lock", resources), ttl=ttl, wait=wait, owner=owner, token=token)
        assert resource is not None
        return HeldLock(self, resource, ttl=ttl, wait=wait, owner=owner, token=token, mode=mode)

    def permit(self, name: str, limit: int, ttl: float = 30.0, wait: float = 0.0, owner: Optional[str] = None,
               token: Optional[str] = None) -> HeldPermit:
        """A context manager that holds one of the ``limit`` permits of the
        semaphore ``name`` while its block runs:
        ``with client.permit("partner-api", limit=3, wait=10) as held:``.
        See Hold for the rules it applies."""
        return HeldPermit(self, name, limit, ttl=ttl, wait=wait, owner=owner, token=token)


def _acquire_body(ttl: float, wait: float, **members: Any) -> Dict[str, Any]:
    """The body of an acquire: the TTL, the wait and the members given (not None)."""
    body = {"ttl_ms": _ms(ttl), "wait_ms": _ms(wait)}
    body.update((k, v) for k, v in members.items() if v is not None)
    return body


def _json(raw: bytes) -> Dict[str, Any]:
    try:
        v = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return v if isinstance(v, dict) else {}


def _refused(e: BaseException) -> bool:
    """Whether e is a refused connection: the request was not sent."""
    return isinstance(e, ConnectionRefusedError) or (
        isinstance(e, urllib.error.URLError) and isinstance(e.reason, ConnectionRefusedError))


def check_resources(op: str, resources: Sequence[str]) -> Sequence[str]:
    """resources, checked as the gateway does: 1-16 valid names, none repeated."""
    if (isinstance(resources, str) or not 1 <= len(resources) <= MAX_RESOURCES
            or len(set(resources)) != len(resources)
            or not all(isinstance(r, str) and _NAME.fullmatch(r) and r not in (".", "..") for r in resources)):
        raise ConfigError(f"{op}: resources must be 1-{MAX_RESOURCES} names of [A-Za-z0-9._:-] "
                          "(1-200 characters, not . or ..), none repeated",
                          type="urn:redlockd:problem:invalid-request")
    return resources


def _multi_path(resources: Sequence[str]) -> str:
    return "/locks?" + urllib.parse.urlencode([("resource", r) for r in resources])


def _problem(what: str, status: int, request_id: Optional[str], body: Dict[str, Any]) -> RedlockdError:
    """The typed error of a 4xx or 5xx answer."""
    kind = str(body.get("type", ""))
    detail = str(body.get("detail", ""))
    msg = f"{what}: {status} {kind.rsplit(':', 1)[-1] or 'error'}: {detail} (request id {request_id})"
    kw: Dict[str, Any] = {"status": status, "type": kind, "detail": detail, "request_id": request_id}
    if status == 409 and kind.endswith(":not-owner"):
        return NotOwnerError(msg, lock_state=body.get("lock_state"), **kw)
    if status == 409 and kind.endswith(":limit-mismatch"):
        return LimitMismatchError(msg, limit=body.get("limit"), **kw)
    if status == 409:
        return LockHeldError(msg, retry_after_ms=body.get("retry_after_ms"), **kw)
    if 400 <= status < 500:
        return ConfigError(msg, **kw)
    return UnavailableError(msg, **kw)
