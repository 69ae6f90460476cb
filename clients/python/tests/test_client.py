"""Client: one call per operation, typed results and errors, against a live gateway."""

from __future__ import annotations

import time
import unittest
from typing import Callable, Dict

from support import API_KEY, AUTH_URL, URL, closed_url, needs_gateway, resource

from redlockd_client import (Client, ConfigError, LockHeldError, NotOwnerError, RedlockdError,
                             UnavailableError)


@needs_gateway
class ClientTest(unittest.TestCase):
    def setUp(self) -> None:
        self.client = Client(URL)
        self.res = resource(self)

    def test_acquire_extend_inspect_release(self) -> None:
        start = time.monotonic()
        lock = self.client.acquire(self.res, ttl=30, owner="py-test")
        self.assertEqual(lock.resource, self.res)
        self.assertRegex(lock.token, r"^[A-Za-z0-9_-]{22,128}$")
        self.assertNotIn(lock.token, repr(lock))
        self.assertEqual(lock.ttl_ms, 30000)
        # Rule 1: the validity counts from before the request.
        self.assertLessEqual(lock.until, start + 30)
        self.assertGreater(lock.remaining(), 25)  # a margin of 5 s for a starved process

        info = self.client.inspect(self.res)
        self.assertTrue(info.held)
        self.assertEqual((info.owner, info.fencing_token), ("py-test", lock.fencing_token))

        listed = [(x.resource, x.owner, x.fencing_token) for x in self.client.list_all(prefix=self.res)]
        self.assertEqual(listed, [(self.res, "py-test", lock.fencing_token)])

        extended = self.client.extend(self.res, lock.token, ttl=45)
        self.assertEqual((extended.fencing_token, extended.ttl_ms), (lock.fencing_token, 45000))
        self.assertGreater(extended.until, lock.until)

        with self.assertRaises(LockHeldError) as held:
            self.client.acquire(self.res, ttl=1)
        self.assertEqual(held.exception.status, 409)
        self.assertGreater(held.exception.retry_after_ms or 0, 0)
        self.assertTrue(held.exception.request_id)

        self.client.release(self.res, lock.token)
        self.assertFalse(self.client.inspect(self.res).held)
        self.assertEqual(list(self.client.list_all(prefix=self.res)), [])

        # Release is idempotent; an extension finds the token holds nothing.
        self.client.release(self.res, lock.token)
        with self.assertRaises(NotOwnerError) as lost:
            self.client.extend(self.res, lock.token, ttl=1)
        self.assertEqual((lost.exception.status, lost.exception.lock_state), (409, "expired"))
        self.assertNotIn(lock.token, str(lost.exception) + repr(lost.exception))

        # The next holder gets a higher fencing token.
        again = self.client.acquire(self.res, ttl=30)
        self.assertGreater(again.fencing_token, lock.fencing_token)
        self.client.release(self.res, again.token)

    def test_idempotent_token(self) -> None:
        token = "py-client-chosen-token-0123456789"
        first = self.client.acquire(self.res, ttl=30, token=token)
        second = self.client.acquire(self.res, ttl=30, token=token)
        self.assertEqual((second.token, second.fencing_token), (token, first.fencing_token))
        self.client.release(self.res, token)

    def test_readers(self) -> None:
        writer = self.client.acquire(self.res, ttl=30)
        self.assertEqual(writer.mode, "write")
        self.client.release(self.res, writer.token)
        first = self.client.acquire(self.res, ttl=30, mode="read", owner="reader")
        with self.client.lock(self.res, ttl=30, mode="read") as second:
            self.assertEqual((first.mode, first.fencing_token, second.fencing_token),
                             ("read", writer.fencing_token, writer.fencing_token))
            info = self.client.inspect(self.res)
            self.assertEqual((info.mode, info.readers, info.fencing_token), ("read", 2, writer.fencing_token))
            with self.assertRaises(LockHeldError):
                self.client.acquire(self.res, ttl=1, mode="write")
        self.client.release(self.res, first.token)
        with self.assertRaises(ConfigError) as e:
            self.client.acquire(self.res, ttl=1, mode="READ")
        self.assertEqual(e.exception.status, 400)

    def test_not_owner(self) -> None:
        lock = self.client.acquire(self.res, ttl=30)
        with self.assertRaises(NotOwnerError) as e:
            self.client.extend(self.res, "someone-elses-token-0123456789", ttl=30)
        self.assertEqual(e.exception.lock_state, "held-by-other")
        self.client.release(self.res, lock.token)

    def test_config_errors(self) -> None:
        calls: Dict[str, Callable[[], object]] = {
            "bad resource": lambda: self.client.acquire("bad resource!", ttl=1),
            "ttl too small": lambda: self.client.acquire(self.res, ttl=0.01),
            "bad token": lambda: self.client.release(self.res, "short"),
        }
        for name, call in calls.items():
            with self.subTest(name), self.assertRaises(ConfigError) as e:
                call()
            self.assertEqual(e.exception.status, 400)
            self.assertEqual(e.exception.type, "urn:redlockd:problem:invalid-request")
            self.assertTrue(e.exception.request_id)
            self.assertIn(e.exception.request_id, str(e.exception))
        with self.assertRaises(ConfigError) as e:
            Client(URL + "/wrong-prefix").acquire(self.res, ttl=1)
        self.assertEqual(e.exception.status, 404)
        # A URL that is not http(s)://host is a configuration error, not "no answer: retry".
        for url in ("localhost:8080", "127.0.0.1:8080", "ftp://" + URL.split("://", 1)[1], "http://"):
            with self.subTest(url=url), self.assertRaises(ConfigError) as e:
                Client(url).acquire(self.res, ttl=1)
            self.assertIsNone(e.exception.status)
        self.assertFalse(self.client.inspect(self.res).held)

    @unittest.skipUnless(AUTH_URL and API_KEY, "REDLOCKD_TESTS_AUTH_URL and REDLOCKD_API_KEY name no gateway with API keys")
    def test_api_key(self) -> None:
        lock = Client(AUTH_URL, api_key=API_KEY).acquire(self.res, ttl=1)
        Client(AUTH_URL, api_key=API_KEY).release(self.res, lock.token)
        for key in (None, "not-a-key-0123456789abcdefghijkl"):
            with self.subTest(key=key), self.assertRaises(ConfigError) as e:
                Client(AUTH_URL, api_key=key).acquire(self.res, ttl=1)
            self.assertEqual(e.exception.status, 401)
            self.assertEqual(e.exception.type, "urn:redlockd:problem:unauthorized")
            self.assertTrue(e.exception.request_id)
            if key:
                self.assertNotIn(key, str(e.exception) + repr(Client(AUTH_URL, api_key=key)))

    def test_unreachable(self) -> None:
        with self.assertRaises(UnavailableError) as e:
            Client(closed_url(), timeout=2).acquire(self.res, ttl=1)
        self.assertIsNone(e.exception.status)
        self.assertEqual(e.exception.type, "network")
        self.assertIsInstance(e.exception, RedlockdError)


if __name__ == "__main__":
    unittest.main()
