"""Locks on several resources against a live gateway: all or none, one token
for extend and release, resources checked before any request."""

from __future__ import annotations

import unittest

from support import URL, needs_gateway, resource

from redlockd_client import Client, ConfigError, LockHeldError, MultiLock, NotOwnerError


@needs_gateway
class MultiTest(unittest.TestCase):
    def setUp(self) -> None:
        self.client = Client(URL)
        self.a, self.b = resource(self) + "-a", resource(self) + "-b"

    def test_all_or_none(self) -> None:
        a, b = self.a, self.b
        other = self.client.acquire(b, ttl=30)
        with self.assertRaises(LockHeldError) as held:
            self.client.acquire_multi([a, b], ttl=30)
        self.assertEqual(held.exception.status, 409)
        self.assertTrue(held.exception.request_id)
        self.assertFalse(self.client.inspect(a).held, "a was taken without b")
        self.client.release(b, other.token)

        lock = self.client.acquire_multi([b, a], ttl=30, owner="py-multi")
        self.assertIsInstance(lock, MultiLock)
        self.assertEqual(lock.resources, (b, a))
        self.assertGreater(lock.fencing_tokens[0], other.fencing_token)
        self.assertNotIn(lock.token, repr(lock))
        self.assertGreater(lock.remaining(), 25)  # a margin of 5 s for a starved process
        info = self.client.inspect(a)
        self.assertEqual((info.held, info.owner, info.fencing_token), (True, "py-multi", lock.fencing_tokens[1]))
        with self.assertRaises(LockHeldError):
            self.client.acquire(a, ttl=1)

        extended = self.client.extend_multi([a, b], lock.token, ttl=45)
        self.assertEqual((extended.ttl_ms, extended.fencing_tokens), (45000, lock.fencing_tokens[::-1]))
        self.client.release_multi([a, b], lock.token)
        self.assertEqual((self.client.inspect(a).held, self.client.inspect(b).held), (False, False))
        with self.assertRaises(NotOwnerError) as lost:
            self.client.extend_multi([a, b], lock.token, ttl=1)
        self.assertEqual(lost.exception.lock_state, "expired")
        self.assertNotIn(lock.token, str(lost.exception))

    def test_bad_resources(self) -> None:
        a = self.a
        for bad in ([], [a, a], [a, "a/b"], [f"{a}-{i}" for i in range(17)], a):
            with self.subTest(bad=bad):
                with self.assertRaises(ConfigError) as e:
                    self.client.acquire_multi(bad, ttl=1)  # type: ignore[arg-type]
                self.assertEqual((e.exception.status, e.exception.request_id), (None, None))
                with self.assertRaises(ConfigError):
                    self.client.release_multi(bad, "py-client-chosen-token-0123456789")  # type: ignore[arg-type]
        self.assertFalse(self.client.inspect(a).held)


if __name__ == "__main__":
    unittest.main()
