"""The hold helper for several resources under faults, with the gateways and
nodes of tests/clients_py_test.go: (a) gateways restarted or stopped for
longer than the validity (and nodes paused, killed and restarted) under
holds, behind a client-side list of two URLs, cost no failed operation
within the wait; (b) a majority of nodes paused for
longer than the validity makes the hold report its loss; (c) an acquire
retried after its answer was lost keeps the fence, for every kind."""

from __future__ import annotations

import json
import random
import threading
import time
import unittest
import urllib.request
from typing import Callable, Dict, List, Set, Union

from support import GATEWAYS, URL, Proxy, eventually, fault, needs_faults, resource

from redlockd_client import Client, HeldLock, HeldLocks, HeldPermit, LockLostError, NotOwnerError, RedlockdError


class CountingClient(Client):
    """A Client that counts the times a gateway gave no answer or a 5xx."""

    failovers = 0

    def _failed(self, n: int) -> None:
        self.failovers += 1
        super()._failed(n)


@needs_faults
class FaultTest(unittest.TestCase):
    def setUp(self) -> None:
        self.res = resource(self)

    def test_a_gateway_restarts_cost_nothing(self) -> None:
        client = CountingClient(GATEWAYS, timeout=5)
        accounts = [f"{self.res}-{i}" for i in range(4)]
        inside: Set[str] = set()
        mu = threading.Lock()
        done = threading.Event()
        ops: List[int] = [0]
        failures: List[str] = []
        fences: Dict[str, List[int]] = {a: [] for a in accounts}

        def transfers(seed: int) -> None:
            rnd = random.Random(seed)
            while not done.is_set():
                pair = rnd.sample(accounts, 2)
                try:
                    # TTL 3 s: an extension's timeout is a third of it, which a
                    # process starved on a busy machine still meets.
                    with client.lock(resources=pair, ttl=3, wait=30, owner="py-transfer") as held:
                        with mu:
                            if inside & set(pair):
                                failures.append(f"{pair} entered while {inside & set(pair)} were held")
                            inside.update(pair)
                            for r, f in zip(pair, held.fencing_tokens):
                                fences[r].append(f)
                        time.sleep(1.5)  # the transfer, through an extension (every ttl/3)
                        held.check()
                        with mu:
                            inside.difference_update(pair)
                    if held.release_error is not None:
                        failures.append(f"release: {held.release_error!r}")
                except RedlockdError as e:
                    with mu:
                        inside.difference_update(pair)
                    failures.append(repr(e))
                with mu:
                    ops[0] += 1

        def progress(what: str, n: int = 5) -> None:
            """Waits for n more transfers (each worker keeps going)."""
            start = ops[0]
            eventually(self, f"{n} transfers after {what}", lambda: ops[0] >= start + n, within=60)

        workers = [threading.Thread(target=transfers, args=(i,), daemon=True) for i in range(3)]
        for w in workers:
            w.start()
        try:
            progress("the start")
            # Each step waits for transfers after it: while a gateway is
            # stopped, longer than the validity, they go through the other.
            for step, n in (("restart", 0), ("restart", 1), ("stop", 0), ("start", 0), ("stop", 1), ("start", 1),
                            ("pause", 1), ("resume", 0), ("kill", 2), ("revive", 2)):
                fault(step, n)
                progress(f"{step} {n}", 6)
        finally:
            fault("resume")
            for i in range(len(GATEWAYS)):  # a gateway a failed step left stopped
                try:
                    urllib.request.urlopen(GATEWAYS[i] + "/healthz", timeout=5).close()
                except OSError:
                    fault("start", i)
            done.set()
            for w in workers:
                w.join(60)
        self.assertEqual(failures, [])
        self.assertGreaterEqual(client.failovers, 2, "no request met a restarting gateway")
        for a, fs in fences.items():
            self.assertEqual(fs, sorted(set(fs)), f"{a}: fences not strictly increasing")
        print(f"\nfault run: {ops[0]} transfers, 2 gateways restarted and stopped, nodes paused, killed and restarted, "
              f"{client.failovers} answers lost or 5xx, {len(failures)} failed operations", flush=True)

    def test_b_majority_paused_reports_loss(self) -> None:
        resources = [self.res + "-a", self.res + "-b"]
        client = Client(URL, timeout=5)
        with self.assertRaises(LockLostError) as e:
            with client.lock(resources=resources, ttl=2) as held:
                fault("pause", 2)
                try:
                    assert held.lock is not None
                    self.assertTrue(held.lost.wait(held.lock.remaining() + 30), "no loss reported")
                    self.assertGreaterEqual(time.monotonic(), held.lock.until)
                    with self.assertRaises(LockLostError) as checked:
                        held.check()
                    self.assertIs(checked.exception, held.lost_error)
                finally:
                    fault("resume")
        self.assertNotIsInstance(e.exception, NotOwnerError)
        self.assertEqual(e.exception.type, "lost")
        # Once the nodes answer again the locks are free (expired), and taken at once.
        with client.lock(resources=resources, ttl=30, wait=30) as again:
            again.check()

    def test_c_retried_acquire_keeps_fence(self) -> None:
        proxy = Proxy(URL)
        self.addCleanup(proxy.close)
        client = Client(proxy.url)
        name = self.res
        kinds: Dict[str, Callable[[], Union[HeldLock, HeldLocks, HeldPermit]]] = {
            "several": lambda: client.lock(resources=[name + "-a", name + "-b"], ttl=30, wait=10),
            "lock": lambda: client.lock(name + "-c", ttl=30, wait=10),
            "read": lambda: client.lock(name + "-d", ttl=30, wait=10, mode="read"),
            "permit": lambda: client.permit(name + "-e", limit=2, ttl=30, wait=10),
        }
        for kind, hold in kinds.items():
            with self.subTest(kind):
                proxy.drop["POST"] = 1  # the first acquire takes the lock, its answer is lost
                proxy.dropped.clear()
                posts = proxy.counts["POST"]
                with hold() as held:
                    self.assertEqual(proxy.counts["POST"], posts + 2)
                    lost = json.loads(proxy.dropped[0])
                    if isinstance(held, HeldLocks):
                        self.assertEqual(list(held.fencing_tokens), [r["fencing_token"] for r in lost["resources"]])
                        self.assertEqual(Client(URL).inspect(name + "-b").fencing_token, held.fencing_tokens[1])
                    else:
                        assert isinstance(held, (HeldLock, HeldPermit))
                        self.assertEqual(held.fencing_token, lost["fencing_token"])
                    if isinstance(held, HeldPermit):
                        self.assertEqual((held.permit, Client(URL).inspect_semaphore(name + "-e").held),
                                         (lost["permit"], 1))
                    self.assertEqual(lost["token"], held.token)


if __name__ == "__main__":
    unittest.main()
