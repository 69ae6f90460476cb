// The hold helpers when answers go missing: every kind keeps its fence when
// an acquire whose answer was lost is retried; a proxy's 502/504 and a
// gateway that refuses connections cost no failed hold. (faults.test.js has
// the fault run; the two files run at once.)

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Client, UnavailableError } from '../src/index.js';
import { resource, client, startProxy, closedURL } from './helpers.js';

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
    const [after] = await run(client(), r, { ttlMs: 30_000 }); // released: held again at once
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
      .withLocks([resource('list-a'), resource('list-b')], ({ fencingTokens }) => fencingTokens, { ttlMs: 30_000 });
    assert.equal(fences.length, 2);

    let failed = 0;
    proxy.fail = (req) => (req.method === 'POST' && failed < 2 ? [502, 504][failed++] : 0);
    const held = await new Client({ url: proxy.url })
      .withLocks([resource('bad-a'), resource('bad-b')], ({ fencingTokens }) => fencingTokens, { ttlMs: 30_000, waitMs: 10_000 });
    assert.equal(held.length, 2);
    assert.equal(failed, 2);
  } finally {
    await proxy.close();
  }
});
