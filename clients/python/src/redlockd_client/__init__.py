"""redlockd_client: a client of the redlockd lock gateway, standard library only.

    from redlockd_client import Client

    client = Client("http://127.0.0.1:8080", api_key=None)
    with client.lock("nightly-report", ttl=30, wait=10) as held:
        for row in rows:
            held.check()                                 # raises LockLostError once the lock is lost
            db.write(row, fence=held.fencing_token)      # the storage refuses stale fences

``client.lock(resources=["a", "b"])`` holds the locks of several resources and
``client.permit("partner-api", limit=3)`` a semaphore's permit, the same way.
docs/clients.md explains the four rules they apply.
"""

from .client import Client
from .errors import (ConfigError, LimitMismatchError, LockHeldError, LockLostError, NotOwnerError, RedlockdError,
                     UnavailableError)
from .held import HeldLock, HeldLocks, HeldPermit, Hold
from .results import (ListedLock, Lock, LockInfo, LockPage, MultiLock, Permit, PermitInfo, SemaphoreInfo)

__all__ = [
    "Client", "ConfigError", "HeldLock", "HeldLocks", "HeldPermit", "Hold", "LimitMismatchError", "ListedLock",
    "Lock", "LockHeldError", "LockInfo", "LockLostError", "LockPage", "MultiLock", "NotOwnerError", "Permit",
    "PermitInfo", "RedlockdError", "SemaphoreInfo", "UnavailableError",
]
