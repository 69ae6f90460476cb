"""``with client.lock(...) as held:`` against a live gateway: contention,
waiting, a lock lost during the work (gateway silent, lock taken over),
release on exit."""

from __future__ import annotations

import time
import unittest
from typing import List, Tuple

from support import REDIS, URL, Proxy, closed_url, eventually, flush_nodes, in_threads, needs_gateway, resource

from redlockd_client import Client, LockHeldError, LockLostError, NotOwnerError, UnavailableError


@needs_gateway
class LockTest(unittest.TestCase):
    def setUp(self) -> None:
        self.client = Client(URL)
        self.res = resource(self)

    def proxy(self) -> Proxy:
        p = Proxy(URL)
        self.addCleanup(p.close)
        return p

    def test_holds_extends_releases(self) -> None:
        proxy = self.proxy()
        with Client(proxy.url).lock(self.res, ttl=3, owner="py-test") as held:
            self.assertEqual(proxy.counts["PATCH"], 0)  # no wait: no extension at once
            self.assertNotIn(held.token, repr(held))
            info = self.client.inspect(self.res)
            self.assertEqual((info.owner, info.fencing_token), ("py-test", held.fencing_token))
            # Rule 3: the lock outlives its TTL while extended every ttl/3.
            end = time.monotonic() + 3.6  # past the 3 s TTL
            while time.monotonic() < end:
                held.check()
                time.sleep(0.05)
            self.assertGreaterEqual(proxy.counts["PATCH"], 1)  # extended (through the proxy) to outlive its TTL
            self.assertTrue(self.client.inspect(self.res).held)
        self.assertFalse(held.lost.is_set())
        self.assertFalse(self.client.inspect(self.res).held)
        # The extender stops at once on exit.
        assert held._thread is not None
        held._thread.join(1)
        self.assertFalse(held._thread.is_alive())

    def test_releases_on_exception(self) -> None:
        with self.assertRaises(ZeroDivisionError):
            with self.client.lock(self.res, ttl=30):
                1 / 0
        self.assertFalse(self.client.inspect(self.res).held)

    def test_contention(self) -> None:
        # Two holders in threads, each working past an extension (ttl/2): one waits
        # for the other; never both inside; the second's fence is higher.
        inside: List[int] = []
        turns: List[Tuple[int, float, float]] = []

        def work() -> None:
            with self.client.lock(self.res, ttl=3, wait=30) as held:
                inside.append(1)
                self.assertEqual(len(inside), 1, "two holders at once")
                start = time.monotonic()
                while time.monotonic() < start + 1.5:
                    held.check()
                    time.sleep(0.05)
                inside.pop()
                assert held.fencing_token is not None
                turns.append((held.fencing_token, start, time.monotonic()))

        self.assertEqual(in_threads(2, work), [])
        self.assertEqual(len(turns), 2)
        (f1, _, end1), (f2, start2, _) = turns
        self.assertGreater(f2, f1)
        self.assertGreaterEqual(start2, end1)

    def test_wait_extends_at_once(self) -> None:
        # Rule 1: an acquire that waited for an expiry used up part of its
        # validity: it is extended before the block starts. The wait eats more
        # than ttl/3 of the hold's 3 s, with 1.5 s to spare for a starved process.
        first = self.client.acquire(self.res, ttl=2.5)
        proxy = self.proxy()
        with Client(proxy.url).lock(self.res, ttl=3, wait=10) as held:
            self.assertGreaterEqual(proxy.counts["PATCH"], 1)
            assert held.lock is not None and held.fencing_token is not None
            self.assertGreater(held.lock.remaining(), 1)
            self.assertGreater(held.fencing_token, first.fencing_token)

    def test_held(self) -> None:
        other = self.client.acquire(self.res, ttl=30)
        with self.assertRaises(LockHeldError):
            with self.client.lock(self.res, ttl=1, wait=0.2):
                self.fail("entered a lock held by another owner")
        self.assertEqual(self.client.inspect(self.res).fencing_token, other.fencing_token)
        self.client.release(self.res, other.token)

    def test_lost_gateway_silent(self) -> None:
        # The gateway stops answering extensions: the lock is lost when its
        # validity ends, before the lock expires on the nodes; once it has,
        # another client takes it. The block that did not stop hears of it on exit.
        proxy = self.proxy()
        with self.assertRaises(LockLostError) as e:
            with Client(proxy.url).lock(self.res, ttl=1) as held:
                proxy.hold.add("PATCH")
                assert held.lock is not None
                self.assertTrue(held.lost.wait(held.lock.remaining() + 1), "not lost when the validity ended")
                self.assertGreaterEqual(time.monotonic(), held.lock.until)
                self.assertFalse(held.valid())
                with self.assertRaises(LockLostError):
                    held.check()
                eventually(self, "the lock expires", lambda: not self.client.inspect(self.res).held)
                taken = self.client.acquire(self.res, ttl=5)
        self.assertNotIsInstance(e.exception, NotOwnerError)
        self.assertEqual(e.exception.type, "lost")
        self.assertEqual(self.client.inspect(self.res).fencing_token, taken.fencing_token)

    def test_lost_taken_over(self) -> None:
        # The lock is released behind the holder's back and taken by another:
        # the next extension gets 409 held-by-other, long before the validity ends.
        with self.assertRaises(NotOwnerError) as e:
            with self.client.lock(self.res, ttl=5) as held:
                self.client.release(self.res, held.token)
                taken = self.client.acquire(self.res, ttl=30)
                self.assertTrue(held.lost.wait(4), "an extension did not find the lock taken")
                assert held.lock is not None
                self.assertGreater(held.lock.remaining(), 0)
                held.check()
        self.assertEqual(e.exception.lock_state, "held-by-other")
        self.assertGreater(taken.fencing_token, held.fencing_token or 0)
        self.client.release(self.res, taken.token)

    @unittest.skipUnless(REDIS, "REDLOCKD_REDIS names no Redis nodes")
    def test_release_reports_not_owner(self) -> None:
        # Rule 4: the lock vanishes from the nodes and the block ends before
        # an extension noticed: the release's 409 is raised, as the work may
        # not have been exclusive.
        with self.assertRaises(NotOwnerError) as e:
            with self.client.lock(self.res, ttl=10) as held:
                flush_nodes()
        self.assertEqual(e.exception.lock_state, "expired")
        self.assertTrue(held.lost.is_set())

    def test_unreachable(self) -> None:
        # No answer is tried again while the wait lasts, then reported.
        start = time.monotonic()
        with self.assertRaises(UnavailableError):
            with Client(closed_url()).lock(self.res, ttl=1, wait=0.6):
                self.fail("entered without a gateway")
        self.assertGreaterEqual(time.monotonic() - start, 0.6)


if __name__ == "__main__":
    unittest.main()
