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
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, TypeVar

from .errors import ConfigError, LockHeldError, NotOwnerError, RedlockdError, UnavailableError
from .held import HeldLock

T = TypeVar("T")

# The rules of a multi-resource lock's resources (openapi.yaml, POST /locks).
MAX_RESOURCES = 16
_NAME = re.compile(r"[A-Za-z0-9._:-]{1,200}")


@dataclass(frozen=True)
class Lock:
    """A lock as acquired or extended. ``token`` is its identity (never shown
    by repr); it is safe until ``until``, a time.monotonic() value counted
    from before the request was sent (rule 1), not ``expires_at``."""

    resource: str
    token: str = field(repr=False)
    fencing_token: int
    ttl_ms: int
    validity_ms: int
    expires_at: str
    until: float
    nodes: int = 0
    quorum: int = 0
    locked_nodes: int = 0
    mode: str = "write"  # "read" when shared with other readers

    def remaining(self) -> float:
        """Seconds of validity left (negative once it ended)."""
        return self.until - time.monotonic()


@dataclass(frozen=True)
class MultiLock:
    """The write locks of several resources, taken all together (all or none)
    by acquire_multi under one ``token`` (never shown by repr):
    ``fencing_tokens[i]`` is the fencing token of ``resources[i]``. The other
    fields are a Lock's, for every resource at once."""

    resources: Tuple[str, ...]
    fencing_tokens: Tuple[int, ...]
    token: str = field(repr=False)
    ttl_ms: int
    validity_ms: int
    expires_at: str
    until: float
    nodes: int = 0
    quorum: int = 0
    locked_nodes: int = 0

    def remaining(self) -> float:
        """Seconds of validity left (negative once it ended)."""
        return self.until - time.monotonic()


@dataclass(frozen=True)
class LockInfo:
    """A lock's state; the other fields are set only when ``held``. With
    ``mode`` "read", ``readers`` hold it; ``owner``, ``remaining_ms`` and
    ``held_nodes`` are those of the reader holding it longest."""

    resource: str
    held: bool
    owner: Optional[str] = None
    fencing_token: Optional[int] = None
    remaining_ms: Optional[int] = None
    held_nodes: Optional[int] = None
    mode: Optional[str] = None
    readers: Optional[int] = None


@dataclass(frozen=True)
class ListedLock:
    resource: str
    owner: str
    fencing_token: int
    remaining_ms: int
    held_nodes: int
    mode: str = "write"
    readers: int = 0


@dataclass(frozen=True)
class LockPage:
    """One page of GET /locks: pass ``next_cursor`` back until it is None."""

    locks: List[ListedLock]
    next_cursor: Optional[str] = None


def _ms(seconds: float) -> int:
    return int(round(seconds * 1000))


class Client:
    """A redlockd gateway at ``url`` (e.g. ``http://127.0.0.1:8080``).
    ``api_key`` is sent as ``Authorization: Bearer``; ``timeout`` (seconds)
    bounds each request, plus the wait of an acquire."""

    def __init__(self, url: str, api_key: Optional[str] = None, timeout: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self._api_key = api_key
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"Client({self.url!r})"

    def _request(self, method: str, path: str, body: Optional[Dict[str, Any]] = None, *,
                 token: Optional[str] = None, timeout: Optional[float] = None,
                 what: str = "") -> Tuple[int, Dict[str, Any]]:
        """Sends one request; returns (status, JSON body) of a 2xx answer and
        raises the typed error of anything else."""
        url = urllib.parse.urlsplit(self.url)
        if url.scheme not in ("http", "https") or not url.netloc:
            raise ConfigError(f"{what}: the gateway URL {self.url} is not http(s)://host[:port]")
        headers = {}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if token is not None:
            headers["Lock-Token"] = token  # the token travels in a header, never in the URL
        if self._api_key:
            headers["Authorization"] = "Bearer " + self._api_key
        req = urllib.request.Request(self.url + path, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout if timeout is None else timeout) as res:
                return res.status, _json(res.read())
        except urllib.error.HTTPError as e:  # 4xx and 5xx answers
            try:
                raw = e.read()
            except (OSError, http.client.HTTPException):
                raw = b""
            raise _problem(what, e.code, e.headers.get("X-Request-Id"), _json(raw)) from None
        except (OSError, http.client.HTTPException) as e:  # refused, unreachable, timed out, cut
            raise UnavailableError(f"{what}: no answer from the gateway at {self.url}: {e}",
                                   type="network", detail=str(e)) from e
        except ValueError:  # its text may quote a header, i.e. the token or the key
            raise ConfigError(f"{what}: cannot send the request to {self.url}: "
                              "a malformed URL, or a token or API key with characters a header cannot hold") from None

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
        body: Dict[str, Any] = {"ttl_ms": _ms(ttl), "wait_ms": _ms(wait)}
        if token is not None:
            body["token"] = token
        if owner is not None:
            body["owner"] = owner
        if mode is not None:
            body["mode"] = mode
        start = time.monotonic()  # rule 1: validity counts from before the request
        what = f"acquire {resource}"
        _, res = self._request("POST", self._path(resource), body, timeout=self.timeout + wait, what=what)
        return self._decode(what, lambda: _lock(res, start))

    def extend(self, resource: str, token: str, ttl: float = 30.0, timeout: Optional[float] = None) -> Lock:
        """Resets the lock's TTL to ``ttl`` seconds from now; NotOwnerError
        when ``token`` does not hold it any more."""
        start = time.monotonic()
        what = f"extend {resource}"
        _, res = self._request("PATCH", self._path(resource), {"ttl_ms": _ms(ttl)}, token=token,
                               timeout=timeout, what=what)
        return self._decode(what, lambda: _lock(res, start))

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
        what = "acquire " + " ".join(_check_resources("acquire", resources))
        body: Dict[str, Any] = {"resources": list(resources), "ttl_ms": _ms(ttl), "wait_ms": _ms(wait)}
        if token is not None:
            body["token"] = token
        if owner is not None:
            body["owner"] = owner
        start = time.monotonic()
        _, res = self._request("POST", "/locks", body, timeout=self.timeout + wait, what=what)
        return self._decode(what, lambda: _multi(res, start))

    def extend_multi(self, resources: Sequence[str], token: str, ttl: float = 30.0,
                     timeout: Optional[float] = None) -> MultiLock:
        """Resets the TTL of the locks ``token`` holds on ``resources``, only
        if it holds every one of them; NotOwnerError otherwise."""
        what = "extend " + " ".join(_check_resources("extend", resources))
        start = time.monotonic()
        _, res = self._request("PATCH", _multi_path(resources), {"ttl_ms": _ms(ttl)}, token=token,
                               timeout=timeout, what=what)
        return self._decode(what, lambda: _multi(res, start))

    def release_multi(self, resources: Sequence[str], token: str, timeout: Optional[float] = None) -> None:
        """Releases the locks ``token`` holds on ``resources``; NotOwnerError
        when it did not hold them (expired or taken)."""
        what = "release " + " ".join(_check_resources("release", resources))
        self._request("DELETE", _multi_path(resources), token=token, timeout=timeout, what=what)

    def inspect(self, resource: str) -> LockInfo:
        """Who holds the lock (never its token); ``held`` False when free."""
        what = f"inspect {resource}"
        _, res = self._request("GET", self._path(resource), what=what)
        return self._decode(what, lambda: LockInfo(**_known(LockInfo, res)))

    def list(self, prefix: str = "", limit: Optional[int] = None, cursor: Optional[str] = None) -> LockPage:
        """One page of the locks held in the API key's namespace whose
        resource starts with ``prefix``."""
        q = {k: v for k, v in (("prefix", prefix), ("limit", limit), ("cursor", cursor)) if v}
        path = "/locks" + ("?" + urllib.parse.urlencode(q) if q else "")
        _, res = self._request("GET", path, what="list locks")
        return self._decode("list locks", lambda: LockPage(
            [ListedLock(**_known(ListedLock, x)) for x in res["locks"]], res.get("next_cursor")))

    def list_all(self, prefix: str = "") -> Iterator[ListedLock]:
        """Every lock held whose resource starts with ``prefix``, page after page."""
        cursor: Optional[str] = None
        while True:
            page = self.list(prefix, cursor=cursor)
            yield from page.locks
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    def lock(self, resource: str, ttl: float = 30.0, wait: float = 0.0, owner: Optional[str] = None,
             token: Optional[str] = None, mode: Optional[str] = None) -> HeldLock:
        """A context manager that holds the lock while its block runs:
        ``with client.lock("report", ttl=30, wait=10) as held:``. See HeldLock."""
        return HeldLock(self, resource, ttl=ttl, wait=wait, owner=owner, token=token, mode=mode)


def _json(raw: bytes) -> Dict[str, Any]:
    try:
        v = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return v if isinstance(v, dict) else {}


def _known(cls: type, d: Dict[str, Any]) -> Dict[str, Any]:
    """The members of d that are fields of the dataclass cls (the gateway may add more)."""
    return {k: v for k, v in d.items() if k in cls.__dataclass_fields__}  # type: ignore[attr-defined]


def _lock(res: Dict[str, Any], start: float) -> Lock:
    fields = _known(Lock, res)
    return Lock(**fields, until=start + res["validity_ms"] / 1000)


def _check_resources(op: str, resources: Sequence[str]) -> Sequence[str]:
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


def _multi(res: Dict[str, Any], start: float) -> MultiLock:
    fields = _known(MultiLock, res)
    fenced = fields.pop("resources")
    return MultiLock(**fields, resources=tuple(r["resource"] for r in fenced),
                     fencing_tokens=tuple(r["fencing_token"] for r in fenced), until=start + res["validity_ms"] / 1000)


def _problem(what: str, status: int, request_id: Optional[str], body: Dict[str, Any]) -> RedlockdError:
    """The typed error of a 4xx or 5xx answer."""
    kind = str(body.get("type", ""))
    detail = str(body.get("detail", ""))
    msg = f"{what}: {status} {kind.rsplit(':', 1)[-1] or 'error'}: {detail} (request id {request_id})"
    kw: Dict[str, Any] = {"status": status, "type": kind, "detail": detail, "request_id": request_id}
    if status == 409 and kind.endswith(":not-owner"):
        return NotOwnerError(msg, lock_state=body.get("lock_state"), **kw)
    if status == 409:
        return LockHeldError(msg, retry_after_ms=body.get("retry_after_ms"), **kw)
    if 400 <= status < 500:
        return ConfigError(msg, **kw)
    return UnavailableError(msg, **kw)
