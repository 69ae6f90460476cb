"""The hold helper: ``with client.lock(...) as held:`` (one resource, write or
read), ``with client.lock(resources=[...]) as held:`` (several resources) and
``with client.permit(...) as held:`` (a semaphore's permit), the four rules of
docs/clients.md applied once, in Hold, for every kind."""

from __future__ import annotations

import secrets
import threading
import time
from typing import TYPE_CHECKING, Generic, Optional, Sequence, Tuple, TypeVar

from .errors import ConfigError, LockHeldError, LockLostError, NotOwnerError, RedlockdError, UnavailableError
from .results import Lock, MultiLock, Permit

if TYPE_CHECKING:
    from .client import Client

_RETRY_PAUSE = 0.2  # seconds between tries after a 503 or no answer

G = TypeVar("G", Lock, MultiLock, Permit)  # what a kind's acquire and extend return
H = TypeVar("H", bound="Hold")  # type: ignore[type-arg]


class Hold(Generic[G]):
    """Holds a lock, the locks of several resources or a permit while a
    ``with`` block runs; HeldLock, HeldLocks and HeldPermit are its kinds.

    Entering acquires it with a token chosen up front (or ``token``), so that
    an acquire retried after a 503, a 502/504 of a proxy or no answer is
    idempotent; it is retried, round the client's gateway URLs, while
    ``wait`` lasts. When the acquire's answer leaves less than 2/3 of the TTL
    (it waited, or was slow) it is extended at once, before the block starts.
    A background thread then extends it every ttl/3, trying again after a
    503 or no answer while the validity (counted from before each request
    was sent) lasts. It is lost on a 409 ``not-owner`` (or another 4xx, e.g.
    a revoked key) or when the validity ends without a successful extension:
    ``lost`` (a threading.Event) is set and ``check()`` raises. Python cannot
    stop the block from outside: call ``check()`` before each step that needs
    the lock, and pass the fencing token to the storage (rule 2).

    Leaving the block releases it, also when the block raised (a 503 or no
    answer is tried again while the validity lasts). When the block did not
    raise, a hold that was lost raises LockLostError, and a 409 on release
    raises NotOwnerError: the work may not have been exclusive. A release
    that got no answer is kept in ``release_error`` and not raised (the lock
    expires at the end of its TTL).
    """

    lock: Optional[G]  # the grant, as last acquired or extended

    def __init__(self, client: Client, what: str, *, ttl: float, wait: float, owner: Optional[str],
                 token: Optional[str]) -> None:
        self.ttl, self.wait, self.owner = ttl, wait, owner
        self.token = token or secrets.token_urlsafe(32)
        self.lock = None
        self.lost = threading.Event()
        self.lost_error: Optional[LockLostError] = None
        self.release_error: Optional[RedlockdError] = None
        self._client = client
        self._what = what
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    # The three calls of a kind.
    def _acquire_once(self, wait: float) -> G:
        raise NotImplementedError

    def _extend_once(self, timeout: float) -> G:
        raise NotImplementedError

    def _release_once(self, timeout: float) -> None:
        raise NotImplementedError

    def valid(self) -> bool:
        """Whether it is still safely held: not lost, validity not over."""
        return not self.lost.is_set() and self.lock is not None and time.monotonic() < self.lock.until

    def check(self) -> None:
        """Raises LockLostError (NotOwnerError after a 409) unless it is still safely held."""
        if not self.valid():
            self._lose(LockLostError(f"{self._what}: the validity ended without a successful extension",
                                     type="lost"), stopping=True)
            assert self.lost_error is not None
            raise self.lost_error

    def __enter__(self: H) -> H:
        try:
            self.lock = self._acquire()
        except (LockHeldError, ConfigError):
            raise
        except BaseException:
            self._release_quietly()  # the outcome is unknown (no answer, interrupted): it may be ours
            raise
        # Rule 1: a wait ate into the validity, maybe all of it. Extending
        # tells how much is left; it may be tried past the validity, as the
        # work has not started.
        assert self.lock is not None
        if self.lock.remaining() < self.ttl * 2 / 3 and not self._extend(
                max(self.lock.until, time.monotonic() + self.ttl / 3)):
            self._release_quietly()
            assert self.lost_error is not None
            raise self.lost_error
        self._thread = threading.Thread(target=self._keep, name=f"redlockd extend {self._what}", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        # An extension in flight finishes in the background; its outcome is ignored.
        self._stop.set()
        until = self.lock.until if self.lock is not None else time.monotonic()
        if time.monotonic() >= until:
            self._lose(LockLostError(f"{self._what}: the validity ended before the block did", type="lost"),
                       stopping=True)
        try:
            self._release(until)
        except NotOwnerError as e:
            self._lose(e, stopping=True)
        except RedlockdError as e:
            self.release_error = e
        if exc_type is None and self.lost_error is not None:
            raise self.lost_error

    def _acquire(self) -> G:
        deadline = time.monotonic() + self.wait
        while True:
            try:
                return self._acquire_once(max(0.0, deadline - time.monotonic()))
            except UnavailableError:  # no answer, a 5xx: the client made the next gateway current
                left = deadline - time.monotonic()
                if left <= 0:
                    raise
                time.sleep(min(left, _RETRY_PAUSE))

    def _release(self, until: float) -> None:
        """Releases it, trying again after a 503 or no answer until until."""
        while True:
            try:
                return self._release_once(min(self._client.timeout, self.ttl))
            except UnavailableError:
                if time.monotonic() + _RETRY_PAUSE >= until:
                    raise
                time.sleep(_RETRY_PAUSE)

    def _release_quietly(self) -> None:
        try:
            self._release_once(min(self._client.timeout, self.ttl))
        except RedlockdError:
            pass

    def _keep(self) -> None:
        while not self._stop.wait(self.ttl / 3) and self.lock is not None and self._extend(self.lock.until):
            pass

    def _extend(self, deadline: float) -> bool:
        """Extends it, trying again after a 503 or no answer until deadline
        (the end of its validity); False (and lost) when that failed."""
        while not self._stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return self._lose(LockLostError(
                    f"{self._what}: no extension succeeded before the validity ended", type="lost"))
            try:
                grant = self._extend_once(min(left, self._client.timeout))
            except UnavailableError:
                self._stop.wait(min(_RETRY_PAUSE, max(deadline - time.monotonic(), 0)))
                continue
            except NotOwnerError as e:
                return self._lose(e)
            except ConfigError as e:  # e.g. the key was revoked: no extension can succeed
                return self._lose(LockLostError(f"{self._what}: the gateway refused the extension: {e}",
                                                status=e.status, type=e.type, detail=e.detail,
                                                request_id=e.request_id))
            if not self._stop.is_set():
                self.lock = grant
            return True
        return True

    def _lose(self, err: LockLostError, stopping: bool = False) -> bool:
        """Marks it lost with err (the first cause wins); ignored once the
        block ended unless stopping (the exit itself found it)."""
        if (stopping or not self._stop.is_set()) and self.lost_error is None:
            self.lost_error = err
            self.lost.set()
        return False


class HeldLock(Hold[Lock]):
    """``with client.lock(resource, ...) as held:``: the lock of one resource,
    ``mode`` "read" (shared with other readers) or "write" (the default).
    ``held.fencing_token`` is the lock's fence."""

    def __init__(self, client: Client, resource: str, *, ttl: float = 30.0, wait: float = 0.0,
                 owner: Optional[str] = None, token: Optional[str] = None, mode: Optional[str] = None) -> None:
        super().__init__(client, resource, ttl=ttl, wait=wait, owner=owner, token=token)
        self.resource = resource
        self.mode = mode

    def __repr__(self) -> str:
        return f"HeldLock({self.resource!r}, fencing_token={self.fencing_token}, lost={self.lost.is_set()})"

    @property
    def fencing_token(self) -> Optional[int]:
        return self.lock.fencing_token if self.lock else None

    def _acquire_once(self, wait: float) -> Lock:
        return self._client.acquire(self.resource, self.ttl, wait, self.token, self.owner, self.mode)

    def _extend_once(self, timeout: float) -> Lock:
        return self._client.extend(self.resource, self.token, self.ttl, timeout=timeout)

    def _release_once(self, timeout: float) -> None:
        self._client.release(self.resource, self.token, timeout=timeout)


class HeldLocks(Hold[MultiLock]):
    """``with client.lock(resources=[...], ...) as held:``: the write locks of
    several resources, taken all together (all or none) under one token.
    ``held.fencing_tokens[i]`` is the fence of ``held.resources[i]``."""

    def __init__(self, client: Client, resources: Sequence[str], *, ttl: float = 30.0, wait: float = 0.0,
                 owner: Optional[str] = None, token: Optional[str] = None) -> None:
        super().__init__(client, " ".join(resources), ttl=ttl, wait=wait, owner=owner, token=token)
        self.resources: Tuple[str, ...] = tuple(resources)

    def __repr__(self) -> str:
        return f"HeldLocks({list(self.resources)!r}, fencing_tokens={self.fencing_tokens}, lost={self.lost.is_set()})"

    @property
    def fencing_tokens(self) -> Tuple[int, ...]:
        return self.lock.fencing_tokens if self.lock else ()

    def _acquire_once(self, wait: float) -> MultiLock:
        return self._client.acquire_multi(self.resources, self.ttl, wait, self.token, self.owner)

    def _extend_once(self, timeout: float) -> MultiLock:
        return self._client.extend_multi(self.resources, self.token, self.ttl, timeout=timeout)

    def _release_once(self, timeout: float) -> None:
        self._client.release_multi(self.resources, self.token, timeout=timeout)


class HeldPermit(Hold[Permit]):
    """``with client.permit(name, limit=..., ...) as held:``: one of the
    ``limit`` permits of the semaphore ``name``. ``held.permit`` is its
    number and ``held.fencing_token`` its fence (fence per permit number:
    docs/semaphores.md)."""

    def __init__(self, client: Client, name: str, limit: int, *, ttl: float = 30.0, wait: float = 0.0,
                 owner: Optional[str] = None, token: Optional[str] = None) -> None:
        super().__init__(client, f"semaphore {name}", ttl=ttl, wait=wait, owner=owner, token=token)
        self.name = name
        self.limit = limit

    def __repr__(self) -> str:
        return (f"HeldPermit({self.name!r}, permit={self.permit}, fencing_token={self.fencing_token}, "
                f"lost={self.lost.is_set()})")

    @property
    def permit(self) -> Optional[int]:
        return self.lock.permit if self.lock else None

    @property
    def fencing_token(self) -> Optional[int]:
        return self.lock.fencing_token if self.lock else None

    def _acquire_once(self, wait: float) -> Permit:
        return self._client.acquire_permit(self.name, self.limit, self.ttl, wait, self.token, self.owner)

    def _extend_once(self, timeout: float) -> Permit:
        return self._client.extend_permit(self.name, self.token, self.ttl, timeout=timeout)

    def _release_once(self, timeout: float) -> None:
        self._client.release_permit(self.name, self.token, timeout=timeout)

