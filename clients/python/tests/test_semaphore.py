"""Semaphores against a live gateway: acquire_permit, extend_permit,
release_permit and inspect_semaphore, typed results and errors
(docs/semaphores.md)."""

from __future__ import annotations

import time
import unittest
from typing import Callable, Dict

from support import URL, needs_gateway, resource

from redlockd_client import (Client, ConfigError, LimitMismatchError, LockHeldError, NotOwnerError, Permit,
                             PermitInfo, SemaphoreInfo)


@needs_gateway
class SemaphoreTest(unittest.TestCase):
    def setUp(self) -> None:
        self.client = Client(URL)
        self.name = resource(self)

    def test_acquire_extend_inspect_release(self) -> None:
        start = time.monotonic()
        first = self.client.acquire_permit(self.name, limit=2, ttl=30, owner="py-first")
        self.assertIsInstance(first, Permit)
        self.assertEqual((first.resource, first.limit, first.ttl_ms), (self.name, 2, 30000))
        self.assertIn(first.permit, (0, 1))
        self.assertRegex(first.token, r"^[A-Za-z0-9_-]{22,128}$")
        self.assertNotIn(first.token, repr(first))
        self.assertLessEqual(first.until, start + 30)  # rule 1: counted from before the request
        self.assertGreater(first.remaining(), 25)  # a margin of 5 s for a starved process

        second = self.client.acquire_permit(self.name, limit=2, ttl=30, owner="py-second")
        self.assertEqual({first.permit, second.permit}, {0, 1})
        self.assertGreater(second.fencing_token, first.fencing_token)  # requested after first's 201

        info = self.client.inspect_semaphore(self.name)
        self.assertIsInstance(info, SemaphoreInfo)
        self.assertEqual((info.name, info.limit, info.held), (self.name, 2, 2))
        self.assertTrue(all(isinstance(p, PermitInfo) for p in info.permits))
        self.assertEqual(sorted((p.permit, p.owner, p.fencing_token) for p in info.permits),
                         sorted([(first.permit, "py-first", first.fencing_token),
                                 (second.permit, "py-second", second.fencing_token)]))

        with self.assertRaises(LockHeldError) as held:  # every permit is held
            self.client.acquire_permit(self.name, limit=2, ttl=1)
        self.assertEqual(held.exception.status, 409)
        self.assertGreater(held.exception.retry_after_ms or 0, 0)
        self.assertTrue(held.exception.request_id)

        extended = self.client.extend_permit(self.name, first.token, ttl=45)
        self.assertEqual((extended.permit, extended.fencing_token, extended.ttl_ms),
                         (first.permit, first.fencing_token, 45000))
        self.assertGreater(extended.until, first.until)

        self.client.release_permit(self.name, first.token)
        self.client.release_permit(self.name, first.token)  # idempotent
        self.assertEqual(self.client.inspect_semaphore(self.name).held, 1)
        with self.assertRaises(NotOwnerError) as lost:
            self.client.extend_permit(self.name, first.token, ttl=1)
        self.assertEqual((lost.exception.status, lost.exception.lock_state), (409, "expired"))
        self.assertTrue(lost.exception.request_id)
        self.assertNotIn(first.token, str(lost.exception) + repr(lost.exception))

        self.client.release_permit(self.name, second.token)
        free = self.client.inspect_semaphore(self.name)
        self.assertEqual((free.limit, free.held, free.permits), (0, 0, []))

    def test_idempotent_token(self) -> None:
        token = "py-client-chosen-permit-0123456789"
        first = self.client.acquire_permit(self.name, limit=3, ttl=30, token=token)
        again = self.client.acquire_permit(self.name, limit=3, ttl=30, token=token)
        self.assertEqual((again.token, again.permit, again.fencing_token), (token, first.permit, first.fencing_token))
        self.assertEqual(self.client.inspect_semaphore(self.name).held, 1)
        self.client.release_permit(self.name, token)

    def test_limit_mismatch(self) -> None:
        permit = self.client.acquire_permit(self.name, limit=2, ttl=30)
        with self.assertRaises(LimitMismatchError) as e:
            self.client.acquire_permit(self.name, limit=3, ttl=30)
        self.assertIsInstance(e.exception, ConfigError)  # no retry fixes it
        self.assertEqual((e.exception.status, e.exception.limit), (409, 2))
        self.assertEqual(e.exception.type, "urn:redlockd:problem:limit-mismatch")
        self.assertTrue(e.exception.request_id)
        self.assertIn(e.exception.request_id, str(e.exception))
        self.assertEqual(self.client.inspect_semaphore(self.name).held, 1)
        self.client.release_permit(self.name, permit.token)

    def test_bad_values(self) -> None:
        calls: Dict[str, Callable[[], object]] = {
            "limit 0": lambda: self.client.acquire_permit(self.name, limit=0, ttl=1),
            "bad name": lambda: self.client.acquire_permit("bad name!", limit=1, ttl=1),
            "bad token": lambda: self.client.release_permit(self.name, "short"),
        }
        for name, call in calls.items():
            with self.subTest(name), self.assertRaises(ConfigError) as e:
                call()
            self.assertEqual((e.exception.status, e.exception.type), (400, "urn:redlockd:problem:invalid-request"))
            self.assertTrue(e.exception.request_id)


if __name__ == "__main__":
    unittest.main()
