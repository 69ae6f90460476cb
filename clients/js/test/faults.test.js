// The hold helpers under faults: every kind keeps its fence when an acquire
// whose answer was lost is retried; a proxy's 502/504 and a gateway that
// refuses connections cost no failed hold; and, with the hold of several
// resources, a gateway restart during holds (two gateways in the client's
// list of URLs) costs no failed operation within the wait, and a majority of
// nodes paused for longer than the validity makes the hold report its loss.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { Client, LockLostError, UnavailableError } from '../src/index.js';
import { resource, client, startProxy, closedURL, faultURLs, fault } from './helpers.js';

const noFaults = !faultURLs && 'REDLOCKD_TESTS_FAULT_URLS is not set';

// Each kind of hold: run(c, name, opts) holds it and returns the fences fn
// saw and how many holders inspect counted during fn; fences(body) are the
// fences of an acquire's answer.
const kinds = {
  lock: {
    run: (c, r, o) => c.withLock(r, async ({ fencingToken }) => [[fencingToken], (await c.inspect(r)).held ? 1 : 0], o),
    fences: (body) => [body.fencing_token],
  },
  read: {
    run: (c, r, o) => c.withLock(r, async ({ fencingToken }) => [[fencingToken], (await c.inspect(r)).readers], { ...o, mode: 'read' }),
    fences: (body) => [body.fencing_token],
  },
  several: {
    run: (c, r, o) => c.withLocks([`${r}-a`, `${r}-b`], async ({ fencingTokens }) => [fencingTokens, (await c.list({ prefix: r })).locks.length / 2], o),
    fences: (body) => body.resources.map((x) => x.fencing_token),
  },
  permit: {
    run: (c, r, o) => c.withPermit(r, async ({ fencingToken }) => [[fencingToken], (await c.inspectSemaphore(r)).held], { ...o, limit: 2 }),
    fences: (body) => [body.fencing_token],
  },
};

for (const [kind, { run, fences }] of Object.entries(kinds)) {
  test(`${kind}: an acquire whose answer was lost is retried with the same token and keeps the fence`, async () => {
    const r = resource(`lost-${kind}`);
    const proxy = await startProxy();
    let lost; // the fences of the answer lost
    proxy.drop = (req, body) => { // the first POST takes the hold, its answer is lost
      const drop = lost === undefined && req.method === 'POST';
      if (drop) lost = fences(JSON.parse(body));
      return drop;
    };
    try {
      const [seen, holders] = await run(new Client({ url: proxy.url }), r, { ttlMs: 30_000, waitMs: 5_000 });
      assert.deepEqual(proxy.methods.slice(0, 2), ['POST', 'POST']);
      assert.deepEqual(seen, lost, 'the retry took a new hold');
      assert.equal(holders, 1, 'the retry took a second hold');
    } finally {
      await proxy.close();
    }
    const [after] = await run(client(), r, { ttlMs: 2_000 }); // released: held again at once
    assert.equal(after.length, lost.length);
  });
}

test('a list of URLs: a gateway that refuses connections, then a proxy\'s 502 and 504, cost no failed hold', async () => {
  const refused = await closedURL(), proxy = await startProxy();
  try {
    const c = new Client({ url: [refused, proxy.url] });
    // A single call reports the outcome, and moves the client to the next URL.
    const err = await c.inspect(resource('list')).then(() => assert.fail('a closed port answered'), (e) => e);
    assert.ok(err instanceof UnavailableError && err.status === 0, err);
    assert.ok((await c.inspect(resource('list'))).requestId);
    // A hold tries every URL once even without a wait.
    const fences = await new Client({ url: [refused, proxy.url] })
      .withLocks([resource('list-a'), resource('list-b')], ({ fencingTokens }) => fencingTokens, { ttlMs: 2_000 });
    assert.equal(fences.length, 2);

    let failed = 0;
    proxy.fail = (req) => (req.method === 'POST' && failed < 2 ? [502, 504][failed++] : 0);
    const held = await new Client({ url: proxy.url })
      .withLocks([resource('bad-a'), resource('bad-b')], ({ fencingTokens }) => fencingTokens, { ttlMs: 2_000, waitMs: 10_000 });
    assert.equal(held.length, 2);
    assert.equal(failed, 2);
  } finally {
    await proxy.close();
  }
});

// Each gateway stays down for longer than the TTL, and every hold lasts
// longer than the TTL: their extensions and releases, and the acquires, go
// on through the other one.
test('several resources: a restart of each gateway during holds costs no failed operation within the wait', { skip: noFaults }, async () => {
  const c = new Client({ url: faultURLs, timeoutMs: 5_000 });
  const pool = [0, 1, 2].map((i) => resource(`restart-${i}`));
  const inside = new Set(), last = new Map(), failures = [];
  let ops = 0, running = true;
  const hold = async (rs) => c.withLocks(rs, async ({ fencingTokens, signal }) => {
    rs.forEach((r, i) => {
      assert.ok(!inside.has(r), `${r}: two holders at once`);
      assert.ok(fencingTokens[i] > (last.get(r) ?? 0), `${r}: fence ${fencingTokens[i]} after ${last.get(r)}`);
      last.set(r, fencingTokens[i]);
    });
    try {
      await sleep(2_000 + Math.random() * 1_000, undefined, { signal });
    } finally {
    }
  }, { ttlMs: 1_500, waitMs: 30_000 });
  const worker = async () => {
    while (running) {
      const [x, y] = pool.toSorted(() => Math.random() - 0.5);
      try {
        await hold([x, y]);
        ops++;
      } catch (err) {
        failures.push(err);
      }
    }
  };
  // progress resolves once n more operations succeeded (or any failed).
  const progress = async (n) => {
    const want = ops + n;
    while (ops < want && failures.length === 0) await sleep(50);
  };
  const workers = [0, 1, 2, 3].map(worker);
  try {
    await progress(3);
    await fault('restart', { gateway: 0, down_ms: 4_000 });
    await progress(3);
    await fault('restart', { gateway: 1, down_ms: 4_000 });
    await progress(3);
  } finally {
    running = false;
    await Promise.all(workers);
  }
  assert.deepEqual(failures.map(String), []);
  assert.ok(ops >= 9, `${ops} operations`);
  for (const r of pool) assert.equal((await c.inspect(r)).held, false, `${r} left held: a release failed`);
});

test('several resources: a majority of nodes paused past the validity makes the hold report its loss', { skip: noFaults }, async () => {
  const c = new Client({ url: faultURLs, timeoutMs: 5_000 });
  const rs = [resource('paused-a'), resource('paused-b')];
  let reason;
  const err = await c.withLocks(rs, async ({ signal }) => {
    await fault('pause', { nodes: 2 });
    try {
      // Bounded, so that a hold that never reports its loss fails the test.
      await Promise.race([
        new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true })),
        sleep(60_000).then(() => assert.fail('no loss reported within 60 s of the pause')),
      ]);
      reason = signal.reason;
    } finally {
      await fault('resume');
    }
    signal.throwIfAborted();
  }, { ttlMs: 2_000 }).catch((e) => e);
  assert.ok(reason instanceof LockLostError, reason);
  assert.ok(err instanceof LockLostError, err);
  // Resumed, the nodes grant the resources again.
  const fences = await c.withLocks(rs, ({ fencingTokens }) => fencingTokens, { ttlMs: 2_000, waitMs: 30_000 });
  assert.equal(fences.length, 2);
});
