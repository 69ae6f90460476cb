// The hold of several resources under faults: gateways restarted and
// stopped, nodes paused, killed and restarted during holds (two gateways in
// the client's list of URLs) cost no failed operation within the wait, and a
// majority of nodes paused for longer than the validity makes the hold report
// its loss.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { Client, LockLostError } from '../src/index.js';
import { resource, faultURLs, fault } from './helpers.js';

const noFaults = !faultURLs && 'REDLOCKD_TESTS_FAULT_URLS is not set';

// The fault run: workers do transfers between two of four accounts, each
// under the hold of both, through an extension, while the schedule restarts
// each gateway, stops each for twice the TTL (the client's list of two
// URLs carries on through the other), pauses one node and resumes it, and
// kills one node and starts it again empty: never a majority down at once.
// After each step it awaits the end of the holds in flight at the step, then
// more transfers, so that no hold spans two node faults (a hold taken while
// a node was paused lives on the other two: killing one of them under it
// would leave it on one).
test('several resources: gateways restarted and stopped, nodes paused, killed and restarted during holds cost no failed operation within the wait', { skip: noFaults }, async () => {
  let answersLost = 0; // requests refused or cut (not by the client), and 5xx answers
  const counting = async (input, init) => {
    try {
      const res = await fetch(input, init);
      if (res.status >= 500) answersLost++;
      return res;
    } catch (err) {
      if (!init?.signal?.aborted) answersLost++;
      throw err;
    }
  };
  const c = new Client({ url: faultURLs, timeoutMs: 5_000, fetch: counting });
  const accounts = [0, 1, 2, 3].map((i) => resource(`account-${i}`));
  const inside = new Set(), fences = new Map(accounts.map((a) => [a, []])), failures = [], active = new Set();
  let transfers = 0, running = true;
  // TTL 3 s: an extension's timeout is a third of it, which a process
  // starved on a busy machine still meets.
  const ttlMs = 3_000;
  const transfer = (pair) => c.withLocks(pair, async ({ fencingTokens, signal }) => {
    pair.forEach((a, i) => {
      assert.ok(!inside.has(a), `${a}: two holders at once`);
      inside.add(a);
      fences.get(a).push(fencingTokens[i]);
    });
    try {
      await sleep(ttlMs * (0.4 + Math.random() * 0.2), undefined, { signal }); // the transfer, through an extension (every ttl/3)
    } finally {
      pair.forEach((a) => inside.delete(a));
    }
  }, { ttlMs, waitMs: 30_000, owner: 'js-transfer' });
  const worker = async () => {
    while (running) {
      const pair = accounts.toSorted(() => Math.random() - 0.5).slice(0, 2);
      const done = transfer(pair).then(() => { transfers++; }, (err) => {
        failures.push(`${pair}: ${err}${err.cause ? ` (${err.cause})` : ''}`);
      });
      active.add(done);
      await done;
      active.delete(done);
    }
  };
  // progress awaits the holds in flight, then n more transfers (or a failure).
  const progress = async (what, n = 3) => {
    await Promise.all([...active]);
    const want = transfers + n, deadline = performance.now() + 120_000;
    while (transfers < want && failures.length === 0) {
      if (performance.now() > deadline) assert.fail(`not ${n} transfers within 120 s after ${what}`);
      await sleep(50);
    }
  };
  const schedule = [
    ['restart', { gateway: 0 }], ['restart', { gateway: 1 }],
    ['stop', { gateway: 0 }], ['start', { gateway: 0 }], ['stop', { gateway: 1 }], ['start', { gateway: 1 }],
    ['pause', { nodes: 1 }], ['resume'], ['kill', { node: 2 }], ['revive', { node: 2 }],
  ];
  const workers = [0, 1, 2].map(worker);
  try {
    await progress('the start');
    for (const [action, params] of schedule) {
      if (failures.length) break; // reported below
      await fault(action, params);
      // A gateway stays stopped for twice the TTL: acquires, extensions and
      // releases go on through the other gateway.
      await Promise.all([progress(`${action} ${JSON.stringify(params ?? {})}`), action === 'stop' && sleep(2 * ttlMs)]);
    }
  } finally {
    running = false;
    try {
      await fault('heal');
    } finally {
      await Promise.all(workers);
    }
  }
  assert.deepEqual(failures, []);
  assert.ok(answersLost >= 2, `${answersLost} answers lost or 5xx: no request met a stopped gateway`);
  assert.ok(transfers >= 3 * (schedule.length + 1), `${transfers} transfers`);
  for (const [a, fs] of fences) {
    assert.ok(fs.every((f, i) => i === 0 || f > fs[i - 1]), `${a}: fences not strictly increasing: ${fs}`);
    assert.equal((await c.inspect(a)).held, false, `${a} left held: a release failed`);
  }
  console.log(`fault run: ${transfers} transfers, 2 gateways restarted and stopped, nodes paused, killed and restarted, `
    + `${answersLost} answers lost or 5xx, ${failures.length} failed operations`);
});

test('several resources: a majority of nodes paused past the validity makes the hold report its loss', { skip: noFaults }, async () => {
  const c = new Client({ url: faultURLs, timeoutMs: 5_000 });
  const rs = [resource('paused-a'), resource('paused-b')];
  let reason;
  const err = await c.withLocks(rs, async ({ signal }) => {
    await fault('pause', { nodes: 2 });
    try {
      // Bounded, so that a hold that never reports its loss fails the test;
      // AbortSignal.timeout's timer is unref'd, so it does not keep the
      // file's process alive after its last test.
      const either = AbortSignal.any([signal, AbortSignal.timeout(60_000)]);
      if (!either.aborted) await new Promise((resolve) => either.addEventListener('abort', resolve, { once: true }));
      assert.ok(signal.aborted, 'no loss reported within 60 s of the pause');
      reason = signal.reason;
    } finally {
      await fault('resume');
    }
    signal.throwIfAborted();
  }, { ttlMs: 2_000 }).catch((e) => e);
  assert.ok(reason instanceof LockLostError, reason);
  assert.ok(err instanceof LockLostError, err);
  // Resumed, the nodes grant the resources again.
  const fences = await c.withLocks(rs, ({ fencingTokens }) => fencingTokens, { ttlMs: 30_000, waitMs: 30_000 });
  assert.equal(fences.length, 2);
});
