// Locks on several resources against a live gateway: all or none, one
// token for extend and release, client-side checks, and withLocks.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { LockHeldError, NotOwnerError, ConfigError } from '../src/index.js';
import { resource, client } from './helpers.js';

test('acquireMulti takes all or none; one token extends and releases both', async () => {
  const c = client(), a = resource('multi-a'), b = resource('multi-b');
  const other = await c.acquire(b, { ttlMs: 30_000 });
  const held = await c.acquireMulti([a, b], { ttlMs: 30_000 }).then(() => assert.fail('acquired a held resource'), (e) => e);
  assert.ok(held instanceof LockHeldError && held.status === 409 && held.retryAfterMs > 0 && held.requestId, held);
  assert.equal((await c.inspect(a)).held, false, 'a was taken without b');
  await c.release(b, other.token);

  const before = performance.now();
  const lock = await c.acquireMulti([b, a], { ttlMs: 30_000, owner: 'js-multi' });
  assert.deepEqual(lock.resources.map((r) => r.resource), [b, a]);
  assert.ok(lock.resources[0].fencing_token > other.fencing_token, 'b\'s fence did not increase');
  assert.ok(lock.startedAt >= before && lock.validUntil === lock.startedAt + lock.validity_ms && lock.validity_ms > 0);
  const info = await c.inspect(a);
  assert.deepEqual([info.held, info.owner, info.fencing_token], [true, 'js-multi', lock.resources[1].fencing_token]);
  const single = await c.acquire(a, { ttlMs: 30_000 }).then(() => assert.fail('a single lock got in'), (e) => e);
  assert.ok(single instanceof LockHeldError, single);

  const ext = await c.extendMulti([a, b], lock.token, { ttlMs: 45_000 });
  assert.deepEqual([ext.ttl_ms, ext.token], [45_000, lock.token]);
  await c.releaseMulti([a, b], lock.token);
  assert.deepEqual([(await c.inspect(a)).held, (await c.inspect(b)).held], [false, false]);
  const gone = await c.extendMulti([a, b], lock.token).then(() => assert.fail('extended released locks'), (e) => e);
  assert.ok(gone instanceof NotOwnerError && gone.lockState === 'expired', gone);
  assert.ok(!gone.message.includes(lock.token));

  // Checked before any request: no request id.
  for (const bad of [[], [a, a], [a, 'a/b'], Array.from({ length: 17 }, (_, i) => `${a}-${i}`)]) {
    const err = await c.acquireMulti(bad).then(() => assert.fail(`acquired ${bad}`), (e) => e);
    assert.ok(err instanceof ConfigError && err.status === 0 && err.requestId === '', err);
    await assert.rejects(c.releaseMulti(bad, lock.token), ConfigError);
  }
  // The locks of several resources are write locks: a read mode is refused, not ignored.
  for (const call of [() => c.acquireMulti([a, b], { mode: 'read' }), () => c.withLocks([a, b], () => 'ran', { mode: 'read' })]) {
    const err = await call().then(() => assert.fail('took write locks for a read mode'), (e) => e);
    assert.ok(err instanceof ConfigError && err.status === 0, err);
  }
  assert.equal((await c.inspect(a)).held, false);
});

test('withLocks: [a, b] and [b, a] take turns without deadlock and release both', async () => {
  const c = client(), a = resource('with-a'), b = resource('with-b');
  let inside = 0;
  const work = async ({ fencingTokens, resources, signal }) => {
    assert.equal(++inside, 1, 'two holders at once');
    await sleep(300, undefined, { signal });
    inside--;
    return Object.fromEntries(resources.map((r, i) => [r, fencingTokens[i]]));
  };
  const [x, y] = await Promise.all([[a, b], [b, a]].map((rs) => c.withLocks(rs, work, { ttlMs: 30_000, waitMs: 10_000 })));
  assert.notEqual(x[a], y[a]);
  assert.equal(Math.sign(x[a] - y[a]), Math.sign(x[b] - y[b]), 'the fences of a and b disagree on the order');
  assert.deepEqual([(await c.inspect(a)).held, (await c.inspect(b)).held], [false, false]);
});
