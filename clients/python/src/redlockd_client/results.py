"""The results of redlockd_client's calls: frozen dataclasses, one per answer
of the gateway (openapi.yaml's schemas), and their decoding. Tokens are never
shown by repr."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple


class _Grant:
    """What Lock, MultiLock and Permit share: the end of their validity."""

    until: float

    def remaining(self) -> float:
        """Seconds of validity left (negative once it ended)."""
        return self.until - time.monotonic()


@dataclass(frozen=True)
class Lock(_Grant):
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


@dataclass(frozen=True)
class MultiLock(_Grant):
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


@dataclass(frozen=True)
class Permit(_Grant):
    """A permit of a semaphore (``resource`` is its name) as acquired or
    extended: permit number ``permit`` of ``limit``. The other fields are a
    Lock's. Fencing tokens are unique across the semaphore's permits and
    ordered in time, but up to ``limit`` holders are inside at once: fence
    per permit number (docs/semaphores.md)."""

    resource: str
    limit: int
    permit: int
    token: str = field(repr=False)
    fencing_token: int
    ttl_ms: int
    validity_ms: int
    expires_at: str
    until: float
    nodes: int = 0
    quorum: int = 0
    locked_nodes: int = 0


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


@dataclass(frozen=True)
class PermitInfo:
    """One permit held, as inspect_semaphore tells it (never its token)."""

    permit: int
    owner: str
    fencing_token: int
    remaining_ms: int
    held_nodes: int


@dataclass(frozen=True)
class SemaphoreInfo:
    """A semaphore's state: ``held`` permits of ``limit`` (0 when none is
    held), each in ``permits``, by permit number."""

    name: str
    limit: int
    held: int
    permits: List[PermitInfo]


def known(cls: type, d: Dict[str, Any]) -> Dict[str, Any]:
    """The members of d that are fields of the dataclass cls (the gateway may add more)."""
    return {k: v for k, v in d.items() if k in cls.__dataclass_fields__}  # type: ignore[attr-defined]


def decode_lock(res: Dict[str, Any], start: float) -> Lock:
    return Lock(**known(Lock, res), until=start + res["validity_ms"] / 1000)


def decode_multi(res: Dict[str, Any], start: float) -> MultiLock:
    fields = known(MultiLock, res)
    fenced = fields.pop("resources")
    return MultiLock(**fields, resources=tuple(r["resource"] for r in fenced),
                     fencing_tokens=tuple(r["fencing_token"] for r in fenced), until=start + res["validity_ms"] / 1000)


def decode_permit(res: Dict[str, Any], start: float) -> Permit:
    return Permit(**known(Permit, res), until=start + res["validity_ms"] / 1000)


def decode_semaphore(res: Dict[str, Any]) -> SemaphoreInfo:
    fields = known(SemaphoreInfo, res)
    fields["permits"] = [PermitInfo(**known(PermitInfo, p)) for p in res["permits"]]
    return SemaphoreInfo(**fields)
