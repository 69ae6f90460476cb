"""The hold helper for every kind but the one-resource write lock (test_lock.py):
``client.lock(resource, mode="read")``, ``client.lock(resources=[...])`` and
``client.permit(name, limit=...)`` against a live gateway: held past the TTL
by extensions, extended at once after a wait, lost (``lost`` set, ``check()``
raises) on a 409 or a silent gateway, released on exit, the acquire retried
after a 503 or a refused connection while the wait lasts."""

from __future__ import annotations

import threading
import time
import unittest
from typing import List, Union

from support import URL, Proxy, closed_url, eventually, in_threads, needs_gateway, resource

from redlockd_client import (Client, ConfigError, HeldLock, HeldLocks, HeldPermit, LimitMismatchError,
                             LockHeldError, LockLostError, NotOwnerError, UnavailableError)

AnyHold = Union[HeldLock, HeldLocks, HeldPermit]


def hold_past_ttl(test: unittest.TestCase, held: AnyHold, seconds: float) -> None:
    """Works for seconds (longer than the TTL, or than ttl/3), checking the hold all along."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        held.check()
        time.sleep(0.05)
    test.assertFalse(held.lost.is_set())


@needs_gateway
class HoldTest(unittest.TestCase):
    def setUp(self) -> None:
        self.client = Client(URL)
        self.res = resource(self)
        self.a, self.b = self.res + "-a", self.res + "-b"

    def proxy(self) -> Proxy:
        p = Proxy(URL)
        self.addCleanup(p.close)
        return p

    def test_read(self) -> None:
        proxy = self.proxy()
        via = Client(proxy.url)
        with via.lock(self.res, ttl=3, mode="read", owner="reader-1") as r1, \
                via.lock(self.res, ttl=3, mode="read", owner="reader-2") as r2:
            self.assertIsInstance(r1, HeldLock)
            assert r1.lock is not None and r2.lock is not None
            self.assertEqual((r1.lock.mode, r2.lock.mode), ("read", "read"))
            hold_past_ttl(self, r2, 3.6)  # past the 3 s TTL
            self.assertGreaterEqual(proxy.counts["PATCH"], 2)  # each extended (through the proxy) to outlive its TTL
            info = self.client.inspect(self.res)
            self.assertEqual((info.mode, info.readers), ("read", 2))
            with self.assertRaises(LockHeldError):
                self.client.acquire(self.res, ttl=1)
        self.assertFalse(self.client.inspect(self.res).held)

    def test_read_lost_gateway_silent(self) -> None:
        proxy = self.proxy()
        with self.assertRaises(LockLostError) as e:
            with Client(proxy.url).lock(self.res, ttl=1, mode="read") as held:
                proxy.hold.add("PATCH")
                assert held.lock is not None
                self.assertTrue(held.lost.wait(held.lock.remaining() + 5), "not lost when the validity ended")
                self.assertGreaterEqual(time.monotonic(), held.lock.until)
                with self.assertRaises(LockLostError):
                    held.check()
        self.assertEqual(e.exception.type, "lost")

    def test_several(self) -> None:
        proxy = self.proxy()
        with Client(proxy.url).lock(resources=[self.a, self.b], ttl=3, owner="py-several") as held:
            self.assertIsInstance(held, HeldLocks)
            self.assertEqual(proxy.counts["PATCH"], 0)  # no wait: no extension at once
            self.assertEqual(held.resources, (self.a, self.b))
            self.assertNotIn(held.token, repr(held))
            hold_past_ttl(self, held, 3.6)  # past the 3 s TTL
            self.assertGreaterEqual(proxy.counts["PATCH"], 1)  # extended (through the proxy) to outlive its TTL
            for r, fence in zip(held.resources, held.fencing_tokens):
                info = self.client.inspect(r)
                self.assertEqual((info.held, info.owner, info.fencing_token), (True, "py-several", fence))
            with self.assertRaises(LockHeldError):
                self.client.acquire(self.b, ttl=1)
        self.assertFalse(held.lost.is_set())
        self.assertEqual((self.client.inspect(self.a).held, self.client.inspect(self.b).held), (False, False))

    def test_several_wait_extends_at_once(self) -> None:
        # The hold waits for it to expire: more than ttl/3 of the hold's 3 s,
        # with 1.5 s to spare for a starved process.
        first = self.client.acquire(self.b, ttl=2.5)
        proxy = self.proxy()
        with Client(proxy.url).lock(resources=[self.a, self.b], ttl=3, wait=10) as held:
            self.assertGreaterEqual(proxy.counts["PATCH"], 1)
            assert held.lock is not None
            self.assertGreater(held.lock.remaining(), 1)
            self.assertGreater(held.fencing_tokens[1], first.fencing_token)

    def test_several_lost_taken_over(self) -> None:
        with self.assertRaises(NotOwnerError) as e:
            with self.client.lock(resources=[self.a, self.b], ttl=3) as held:
                self.client.release_multi([self.a, self.b], held.token)
                taken = self.client.acquire(self.a, ttl=30)
                self.assertTrue(held.lost.wait(5), "an extension did not find the locks taken")
                with self.assertRaises(NotOwnerError):
                    held.check()
        self.assertIs(e.exception, held.lost_error)
        self.client.release(self.a, taken.token)

    def test_several_retries_503(self) -> None:
        # The hold's acquire_multi gets 503 twice, then the locks: no error.
        proxy = self.proxy()
        proxy.fail["POST"] = 2
        with Client(proxy.url).lock(resources=[self.a, self.b], ttl=30, wait=10) as held:
            self.assertEqual(proxy.counts["POST"], 3)
            self.assertEqual(self.client.inspect(self.a).fencing_token, held.fencing_tokens[0])
        # Without a wait there is one try: the 503 is raised.
        proxy.fail["POST"] = 1
        with self.assertRaises(UnavailableError) as e:
            with Client(proxy.url).lock(resources=[self.a, self.b], ttl=30):
                self.fail("entered after a 503")
        self.assertEqual((e.exception.status, e.exception.request_id), (503, "py-proxy-503"))

    def test_several_gateway_list(self) -> None:
        # A refused connection is tried on the next URL at once, by the hold
        # and by a single call; a gateway that answers 503 makes the next one
        # current, and the hold's retry goes there.
        with Client([closed_url(), URL]).lock(resources=[self.a, self.b], ttl=30) as held:
            held.check()
        lock = Client([closed_url(), closed_url(), URL]).acquire_multi([self.a, self.b], ttl=30)
        self.client.release_multi([self.a, self.b], lock.token)
        proxy = self.proxy()
        proxy.fail["POST"] = 1
        client = Client([proxy.url, URL])
        with client.lock(resources=[self.a, self.b], ttl=30, wait=10) as held:
            self.assertEqual(client.url, URL)
            self.assertEqual(self.client.inspect(self.b).fencing_token, held.fencing_tokens[1])
        self.assertEqual(proxy.counts["POST"], 1)

    def test_permit(self) -> None:
        proxy = self.proxy()
        via = Client(proxy.url)
        with via.permit(self.res, limit=2, ttl=3, owner="p1") as p1, via.permit(self.res, limit=2, ttl=3) as p2:
            self.assertIsInstance(p1, HeldPermit)
            self.assertEqual({p1.permit, p2.permit}, {0, 1})
            self.assertNotEqual(p1.fencing_token, p2.fencing_token)
            with self.assertRaises(LockHeldError):
                with self.client.permit(self.res, limit=2, ttl=1, wait=0.3):
                    self.fail("a third holder entered a semaphore of 2")
            hold_past_ttl(self, p1, 3.6)  # past the 3 s TTL
            self.assertGreaterEqual(proxy.counts["PATCH"], 2)  # each extended (through the proxy) to outlive its TTL
            info = self.client.inspect_semaphore(self.res)
            self.assertEqual((info.limit, info.held), (2, 2))
            self.assertIn(("p1", p1.fencing_token), [(p.owner, p.fencing_token) for p in info.permits])
        self.assertEqual(self.client.inspect_semaphore(self.res).held, 0)

    def test_permit_waits_then_extends(self) -> None:
        # Expires while the hold waits: more than ttl/3 of the hold's 3 s,
        # with 1.5 s to spare for a starved process.
        first = self.client.acquire_permit(self.res, limit=1, ttl=2.5)
        proxy = self.proxy()
        with Client(proxy.url).permit(self.res, limit=1, ttl=3, wait=10) as held:
            self.assertGreaterEqual(proxy.counts["PATCH"], 1)
            assert held.lock is not None and held.fencing_token is not None
            self.assertGreater(held.lock.remaining(), 1)
            self.assertGreater(held.fencing_token, first.fencing_token)

    def test_permit_lost(self) -> None:
        with self.assertRaises(NotOwnerError) as e:
            with self.client.permit(self.res, limit=2, ttl=3) as held:
                self.client.release_permit(self.res, held.token)
                self.assertTrue(held.lost.wait(5), "an extension did not find the permit gone")
                self.assertFalse(held.valid())
        self.assertEqual(e.exception.lock_state, "expired")
        self.assertTrue(e.exception.request_id)

    def test_permit_limit_mismatch(self) -> None:
        with self.client.permit(self.res, limit=2, ttl=30):
            with self.assertRaises(LimitMismatchError) as e:
                with self.client.permit(self.res, limit=3, ttl=30):
                    self.fail("entered with another limit")
            self.assertEqual(e.exception.limit, 2)
            self.assertEqual(self.client.inspect_semaphore(self.res).held, 1)

    def test_permit_contention(self) -> None:
        # Three holders of a semaphore of 2, each working past an extension
        # (ttl/2): never more than 2 inside; all get in within the wait.
        inside: List[int] = []
        most: List[int] = [0]
        mu = threading.Lock()

        def work() -> None:
            with self.client.permit(self.res, limit=2, ttl=3, wait=30) as held:
                with mu:
                    inside.append(1)
                    most[0] = max(most[0], len(inside))
                hold_past_ttl(self, held, 1.5)  # ttl/2, past the extension at ttl/3
                with mu:
                    inside.pop()

        self.assertEqual(in_threads(3, work), [])
        self.assertEqual(most[0], 2)

    def test_lock_arguments(self) -> None:
        with self.assertRaises(TypeError):
            self.client.lock()  # type: ignore[call-overload]
        with self.assertRaises(TypeError):
            self.client.lock(self.a, resources=[self.b])  # type: ignore[call-overload]
        bads: List[List[str]] = [[self.a, self.a], [], [self.a, "a/b"]]
        for bad in bads:
            with self.subTest(bad=bad), self.assertRaises(ConfigError) as e:
                self.client.lock(resources=bad)
            self.assertIsNone(e.exception.status)
        with self.assertRaises(ConfigError):
            self.client.lock(resources=[self.a], mode="read")  # type: ignore[call-overload]
        eventually(self, "nothing was taken", lambda: not self.client.inspect(self.a).held)


if __name__ == "__main__":
    unittest.main()
