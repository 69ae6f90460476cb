"""The errors of redlockd_client, one class per decision a caller makes.

Every error carries the gateway's answer: ``status`` (None when there was
none), the problem ``type`` (``urn:redlockd:problem:<kind>``, or ``network``
and ``lost`` for what the client itself saw), ``detail`` and ``request_id``
(the ``X-Request-Id`` the gateway logged the request under). No message
contains a lock token or an API key.
"""

from __future__ import annotations

from typing import Optional


class RedlockdError(Exception):
    """Base class of every error of this package."""

    def __init__(self, message: str, *, status: Optional[int] = None, type: str = "",
                 detail: str = "", request_id: Optional[str] = None) -> None:
        super().__init__(message)
        self.status = status
        self.type = type
        self.detail = detail
        self.request_id = request_id

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({str(self)!r})"


class LockHeldError(RedlockdError):
    """409 ``lock-held``: another owner holds the lock (not acquired within the
    wait). ``retry_after_ms`` is the gateway's hint for when to try again."""

    def __init__(self, message: str, *, retry_after_ms: Optional[int] = None, **kw: object) -> None:
        super().__init__(message, **kw)  # type: ignore[arg-type]
        self.retry_after_ms = retry_after_ms


class LockLostError(RedlockdError):
    """The lock was lost while held: no extension succeeded before its
    validity ended (or the gateway said it is not ours, see NotOwnerError).
    The work done under it may not have been exclusive: stop it."""


class NotOwnerError(LockLostError):
    """409 ``not-owner``: the token does not hold the lock. ``lock_state`` is
    ``expired`` (nobody holds it) or ``held-by-other``."""

    def __init__(self, message: str, *, lock_state: Optional[str] = None, **kw: object) -> None:
        super().__init__(message, **kw)  # type: ignore[arg-type]
        self.lock_state = lock_state


class UnavailableError(RedlockdError):
    """No answer (refused, unreachable, timed out) or a 5xx (a quorum of Redis
    nodes unavailable, the gateway shutting down): the outcome is unknown, try
    again later."""


class ConfigError(RedlockdError):
    """A 4xx other than 409 (400 a bad value, 401 a missing or wrong API key,
    404 a wrong URL, 413): a configuration error that no retry fixes."""


class LimitMismatchError(ConfigError):
    """409 ``limit-mismatch``: the semaphore's permits held now have another
    limit, ``limit``; every holder must ask for the same one. Nothing changed."""

    def __init__(self, message: str, *, limit: Optional[int] = None, **kw: object) -> None:
        super().__init__(message, **kw)  # type: ignore[arg-type]
        self.limit = limit
