"""redlockd_client: a client of the redlockd lock gateway, standard library only.

    from redlockd_client import Client

    client = Client("http://127.0.0.1:8080", api_key=None)
    with client.lock("nightly-report", ttl=30, wait=10) as held:
        for row in rows:
            held.check()                                 # raises LockLostError once the lock is lost
            db.write(row, fence=held.fencing_token)      # the storage refuses stale fences

docs/clients.md explains the four rules this applies.
"""

from .client import Client, ListedLock, Lock, LockInfo, LockPage, MultiLock
from .errors import (ConfigError, LockHeldError, LockLostError, NotOwnerError, RedlockdError,
                     UnavailableError)
from .held import HeldLock

__all__ = [
    "Client", "ConfigError", "HeldLock", "ListedLock", "Lock", "LockHeldError", "LockInfo", "LockLostError",
    "LockPage", "MultiLock", "NotOwnerError", "RedlockdError", "UnavailableError",
]
