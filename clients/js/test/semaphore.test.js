// Semaphores against a live gateway: the four calls, typed errors with the
// request id (every permit held, another limit), idempotent acquires and
// withPermit letting at most limit holders in at once.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  LockHeldError, LimitMismatchError, ConfigError, NotOwnerError, newToken,
} from '../src/index.js';
import { resource, client } from './helpers.js';

test('acquirePermit, inspectSemaphore, extendPermit, releasePermit', async () => {
  const c = client(), name = resource('sem');
  const before = performance.now();
  const p0 = await c.acquirePermit(name, { limit: 2, ttlMs: 30_000, owner: 'js-sem' });
  assert.deepEqual([p0.resource, p0.limit], [name, 2]);
  assert.ok(p0.permit >= 0 && p0.permit < 2 && p0.fencing_token > 0, p0);
  assert.ok(p0.startedAt >= before && p0.validUntil === p0.startedAt + p0.validity_ms && p0.validity_ms > 0);
  assert.match(p0.requestId, /^[A-Za-z0-9._-]{1,64}$/);
  const p1 = await c.acquirePermit(name, { limit: 2, ttlMs: 30_000 });
  assert.notEqual(p1.permit, p0.permit);
  assert.notEqual(p1.fencing_token, p0.fencing_token);

  const info = await c.inspectSemaphore(name);
  assert.deepEqual([info.name, info.limit, info.held], [name, 2, 2]);
  assert.deepEqual(info.permits.map((p) => p.fencing_token).toSorted(), [p0.fencing_token, p1.fencing_token].toSorted());
  assert.ok(info.requestId && !JSON.stringify(info).includes(p0.token), 'inspect reveals a token');

  const full = await c.acquirePermit(name, { limit: 2, ttlMs: 30_000 }).then(() => assert.fail('a third holder got in'), (e) => e);
  assert.ok(full instanceof LockHeldError && full.status === 409 && full.retryAfterMs > 0 && full.requestId, full);
  const other = await c.acquirePermit(name, { limit: 3, ttlMs: 30_000 }).then(() => assert.fail('another limit accepted'), (e) => e);
  assert.ok(other instanceof LimitMismatchError && other instanceof ConfigError, other);
  assert.deepEqual([other.status, other.type, other.limit], [409, 'urn:redlockd:problem:limit-mismatch', 2]);
  assert.ok(other.requestId);

  const ext = await c.extendPermit(name, p0.token, { ttlMs: 45_000 });
  assert.deepEqual([ext.permit, ext.fencing_token, ext.ttl_ms], [p0.permit, p0.fencing_token, 45_000]);
  await c.releasePermit(name, p0.token);
  await c.releasePermit(name, p1.token);
  assert.equal((await c.inspectSemaphore(name)).held, 0);
  const gone = await c.extendPermit(name, p0.token).then(() => assert.fail('extended a released permit'), (e) => e);
  assert.ok(gone instanceof NotOwnerError && gone.lockState === 'expired' && gone.requestId, gone);
  assert.ok(!gone.message.includes(p0.token));
  const none = await c.acquirePermit(name, { ttlMs: 30_000 }).then(() => assert.fail('acquired without a limit'), (e) => e);
  assert.ok(none instanceof ConfigError && none.status === 400, none);
});

test('a client-chosen token makes acquirePermit idempotent', async () => {
  const c = client(), name = resource('sem-idem'), token = newToken();
  const first = await c.acquirePermit(name, { limit: 3, ttlMs: 30_000, token });
  const again = await c.acquirePermit(name, { limit: 3, ttlMs: 30_000, token });
  assert.deepEqual([again.permit, again.fencing_token], [first.permit, first.fencing_token]);
  assert.equal((await c.inspectSemaphore(name)).held, 1);
  await c.releasePermit(name, token);
});

test('withPermit: at most limit holders at once, each with its permit, all released', async () => {
  const c = client(), name = resource('sem-with');
  let inside = 0, most = 0;
  const seen = [];
  const work = async ({ name: n, permit, limit, fencingToken, signal }) => {
    assert.deepEqual([n, limit], [name, 2]);
    most = Math.max(most, ++inside);
    assert.ok(inside <= 2, `${inside} holders of 2 permits`);
    seen.push([permit, fencingToken]);
    await sleep(300, undefined, { signal });
    inside--;
    return fencingToken;
  };
  const fences = await Promise.all([0, 1, 2, 3].map(() => c.withPermit(name, work, { limit: 2, ttlMs: 30_000, waitMs: 10_000 })));
  assert.equal(new Set(fences).size, 4, `fences ${fences}`);
  assert.ok(seen.every(([p]) => p === 0 || p === 1), JSON.stringify(seen));
  assert.equal(most, 2);
  assert.equal((await c.inspectSemaphore(name)).held, 0, 'not released');

  const held = await c.acquirePermit(name, { limit: 1, ttlMs: 30_000 });
  const busy = await c.withPermit(name, () => assert.fail('ran without a permit'), { limit: 1 }).catch((e) => e);
  assert.ok(busy instanceof LockHeldError && busy.requestId, busy);
  const mismatch = await c.withPermit(name, () => assert.fail('ran with another limit'), { limit: 2, waitMs: 2_000 }).catch((e) => e);
  assert.ok(mismatch instanceof LimitMismatchError && mismatch.limit === 1, mismatch);
  await c.releasePermit(name, held.token);
});
