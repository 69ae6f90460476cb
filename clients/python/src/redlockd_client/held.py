"""HeldLock: ``with client.lock(...) as held:``, the four rules of
docs/clients.md applied once."""

from __future__ import annotations

import secrets
import threading
import time
from typing import TYPE_CHECKING, Optional

from .errors import ConfigError, LockHeldError, LockLostError, NotOwnerError, RedlockdError, UnavailableError

if TYPE_CHECKING:
    from .client import Client, Lock

_RETRY_PAUSE = 0.2  # seconds between tries after a 503 or no answer


class HeldLock:
    """Holds a lock while a ``with`` block runs.

    Entering acquires it (waiting up to ``wait`` seconds; a 503 or no answer
    is tried again while the wait lasts, with one token chosen up front so
    that a retried acquire is idempotent), and extends it at once when the
    wait ate into its validity. A background thread then extends it every
    ttl/3, trying again after a 503 or no answer while the validity lasts.
    The lock is lost on a 409 ``not-owner`` (or another 4xx, e.g. a revoked
    key) or when the validity ends without a successful extension: ``lost``
    is set and ``check()`` raises. Python cannot stop the block from outside:
    call ``check()`` before each step that needs the lock, and pass
    ``fencing_token`` to the storage (rule 2).

    Leaving the block releases the lock, also when the block raised. When the
    block did not raise, a lock that was lost raises LockLostError, and a 409
    on release raises NotOwnerError: the work may not have been exclusive.
    A release that got no answer is kept in ``release_error`` and not
    raised (the lock expires at the end of its TTL).
    """

    def __init__(self, client: Client, resource: str, *, ttl: float = 30.0, wait: float = 0.0,
                 owner: Optional[str] = None, token: Optional[str] = None, mode: Optional[str] = None) -> None:
        self.resource = resource
        self.ttl, self.wait, self.owner, self.mode = ttl, wait, owner, mode
        self.token = token or secrets.token_urlsafe(32)
        self.lock: Optional[Lock] = None
        self.lost = threading.Event()
        self.lost_error: Optional[LockLostError] = None
        self.release_error: Optional[RedlockdError] = None
        self._client = client
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def __repr__(self) -> str:
        return f"HeldLock({self.resource!r}, fencing_token={self.fencing_token}, lost={self.lost.is_set()})"

    @property
    def fencing_token(self) -> Optional[int]:
        return self.lock.fencing_token if self.lock else None

    def valid(self) -> bool:
        """Whether the lock is still safely held: not lost, validity not over."""
        return not self.lost.is_set() and self.lock is not None and time.monotonic() < self.lock.until

    def check(self) -> None:
        """Raises LockLostError (NotOwnerError after a 409) unless the lock is still safely held."""
        if not self.valid():
            self._lose(LockLostError(f"{self.resource}: the lock's validity ended without a successful extension",
                                     type="lost"), stopping=True)
            assert self.lost_error is not None
            raise self.lost_error

    def __enter__(self) -> HeldLock:
        try:
            self.lock = self._acquire()
        except (LockHeldError, ConfigError):
            raise
        except BaseException:
            self._release_quietly()  # the outcome is unknown (no answer, interrupted): the lock may be ours
            raise
        # Rule 1: a wait ate into the validity, maybe all of it. Extending
        # tells how much is left; it may be tried past the validity, as the
        # work has not started.
        if self.lock.remaining() < self.ttl * 2 / 3 and not self._extend(
                max(self.lock.until, time.monotonic() + self.ttl / 3)):
            self._release_quietly()
            assert self.lost_error is not None
            raise self.lost_error
        self._thread = threading.Thread(target=self._keep, name=f"redlockd extend {self.resource}", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> bool:
        # An extension in flight finishes in the background; its outcome is ignored.
        self._stop.set()
        if self.lock is not None and time.monotonic() >= self.lock.until:
            self._lose(LockLostError(f"{self.resource}: the lock's validity ended before the block did",
                                     type="lost"), stopping=True)
        try:
            self._client.release(self.resource, self.token)
        except NotOwnerError as e:
            self._lose(e, stopping=True)
        except RedlockdError as e:
            self.release_error = e
        if exc_type is None and self.lost_error is not None:
            raise self.lost_error
        return False

    def _acquire(self) -> Lock:
        deadline = time.monotonic() + self.wait
        while True:
            try:
                return self._client.acquire(self.resource, self.ttl, max(0.0, deadline - time.monotonic()),
                                            self.token, self.owner, self.mode)
            except UnavailableError:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise
                time.sleep(min(left, _RETRY_PAUSE))

    def _release_quietly(self) -> None:
        try:
            self._client.release(self.resource, self.token, timeout=min(self._client.timeout, self.ttl))
        except RedlockdError:
            pass

    def _keep(self) -> None:
        while not self._stop.wait(self.ttl / 3) and self.lock is not None and self._extend(self.lock.until):
            pass

    def _extend(self, deadline: float) -> bool:
        """Extends the lock, trying again after a 503 or no answer until
        deadline (the end of its validity); False (and lost) when that failed."""
        while not self._stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return self._lose(LockLostError(
                    f"{self.resource}: no extension succeeded before the lock's validity ended", type="lost"))
            try:
                lock = self._client.extend(self.resource, self.token, self.ttl,
                                           timeout=min(left, self._client.timeout))
            except UnavailableError:
                self._stop.wait(min(_RETRY_PAUSE, max(deadline - time.monotonic(), 0)))
                continue
            except NotOwnerError as e:
                return self._lose(e)
            except ConfigError as e:  # e.g. the key was revoked: no extension can succeed
                return self._lose(LockLostError(f"{self.resource}: the gateway refused the extension: {e}",
                                                status=e.status, type=e.type, detail=e.detail,
                                                request_id=e.request_id))
            if not self._stop.is_set():
                self.lock = lock
            return True
        return True

    def _lose(self, err: LockLostError, stopping: bool = False) -> bool:
        """Marks the lock lost with err (the first cause wins); ignored once
        the block ended unless stopping (the exit itself found it)."""
        if (stopping or not self._stop.is_set()) and self.lost_error is None:
            self.lost_error = err
            self.lost.set()
        return False
