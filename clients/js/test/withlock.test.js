// withLock against a live gateway: contention, waiting, an acquire retried
// with its token, a lock lost during the work (the gateway stops answering;
// the lock taken over) and release after loss.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  Client, LockHeldError, LockLostError, NotOwnerError, UnavailableError, ConfigError,
} from '../src/index.js';
import { authURL, resource, client, startProxy, closedURL } from './helpers.js';

// untilAborted resolves with performance.now() once signal aborts.
const untilAborted = (signal) => new Promise((resolve) => {
  if (signal.aborted) resolve(performance.now());
  signal.addEventListener('abort', () => resolve(performance.now()), { once: true });
});

test('contention: two withLock on one resource take turns, fences increase', async () => {
  const c = client(), res = resource('turns');
  // ttl 3 s: an extension (every ttl/3) has ttl/3 = 1 s to answer, which a
  // starved process meets; the work lasts ttl/2, past the first extension.
  const ttlMs = 3_000;
  let inside = 0;
  const fences = [];
  const work = async ({ fencingToken, signal }) => {
    assert.equal(++inside, 1, 'two holders at once');
    fences.push(fencingToken);
    await sleep(ttlMs / 2, undefined, { signal }); // longer than ttl/3: extended, and the other waits past an extension
    inside--;
    return fencingToken;
  };
  const results = await Promise.all([0, 1].map(() => c.withLock(res, work, { ttlMs, waitMs: 30_000 })));
  assert.deepEqual(results.toSorted(), fences);
  assert.ok(fences[1] > fences[0], `fences ${fences}`);
  assert.equal((await c.inspect(res)).held, false, 'not released');
});

test('waiting: held by another, withLock waits, then extends at once before the work', async () => {
  const c = client(), res = resource('wait');
  // The wait for other's TTL (2.5 s) must eat more than ttl/3 (1 s) of the
  // 3 s validity: a margin of 1.5 s for a starved process between the two
  // acquires; the extension then has at least ttl/3 to answer.
  const other = await c.acquire(res, { ttlMs: 2_500 });
  const proxy = await startProxy();
  try {
    const fence = await new Client({ url: proxy.url }).withLock(res, ({ fencingToken }) => {
      // The wait ate most of the validity: an extension came first (rule 1).
      assert.deepEqual(proxy.methods, ['POST', 'PATCH']);
      return fencingToken;
    }, { ttlMs: 3_000, waitMs: 30_000 });
    assert.ok(fence > other.fencing_token);
    assert.deepEqual(proxy.methods, ['POST', 'PATCH', 'DELETE']);
  } finally {
    await proxy.close();
  }

  // Without waiting: LockHeldError, fn never runs.
  const held = await c.acquire(res, { ttlMs: 30_000 });
  const err = await c.withLock(res, () => assert.fail('ran without the lock'), { ttlMs: 30_000 }).catch((e) => e);
  assert.ok(err instanceof LockHeldError && err.retryAfterMs > 0 && err.requestId, err);
  await c.release(res, held.token);
});

test('an acquire whose answer was lost is retried with the same token', async () => {
  const res = resource('retry');
  const proxy = await startProxy();
  let first = true;
  let lost; // the fencing token of the answer lost
  proxy.drop = (req, body) => { // the first POST takes the lock, its answer is lost
    const drop = first && req.method === 'POST';
    if (drop) {
      first = false;
      lost = JSON.parse(body).fencing_token;
    }
    return drop;
  };
  try {
    const c = new Client({ url: proxy.url });
    // Without the same token the retry would wait for the lock's TTL and fail.
    const fence = await c.withLock(res, ({ fencingToken }) => fencingToken, { ttlMs: 30_000, waitMs: 2_000 });
    assert.deepEqual(proxy.methods.slice(0, 2), ['POST', 'POST']);
    assert.equal(fence, lost, 'the retry took the lock anew');
  } finally {
    await proxy.close();
  }
  assert.equal((await client().inspect(res)).held, false, 'the retried acquire left a lock behind');
});

test('an acquire whose outcome stays unknown is released before the error is thrown', async () => {
  const res = resource('unknown');
  const proxy = await startProxy();
  proxy.drop = (req) => req.method === 'POST'; // every acquire takes the lock, its answer is lost
  try {
    const c = new Client({ url: proxy.url });
    const err = await c.withLock(res, () => assert.fail('ran without an answer'), { ttlMs: 30_000 }).catch((e) => e);
    assert.ok(err instanceof UnavailableError, err);
    assert.deepEqual(proxy.methods, ['POST', 'DELETE']);
  } finally {
    await proxy.close();
  }
  assert.equal((await client().inspect(res)).held, false, 'the lock the lost acquire took is left for its TTL');
});

test('a ttlMs or waitMs that is not a number of ms: ConfigError before any request, not endless retries', async () => {
  const c = new Client({ url: await closedURL(), timeoutMs: 1_000 });
  for (const options of [{ waitMs: NaN }, { waitMs: '10s' }, { waitMs: -1 }, { ttlMs: NaN }, { ttlMs: undefined, waitMs: Infinity }]) {
    for (const call of [() => c.withLock(resource('nan'), () => assert.fail('ran'), options), () => c.withLocks([resource('nan')], () => assert.fail('ran'), options)]) {
      const err = await call().then(() => assert.fail('held'), (e) => e);
      assert.ok(err instanceof ConfigError && err.status === 0, `${JSON.stringify(options)}: ${err}`);
    }
  }
});

test('the gateway stops answering: the signal fires before the validity ends', async () => {
  const res = resource('silent');
  const proxy = await startProxy();
  try {
    const c = new Client({ url: proxy.url, timeoutMs: 1_000 });
    const ttlMs = 1_500;
    // The validity ends at the latest ttlMs after the last request that won
    // or extended the lock began: before fn begins (on a loaded machine a
    // slow acquire is extended at once, so not within ttlMs of withLock's
    // call), as the proxy stalls every later one. A timer for ttlMs set as
    // fn begins, in the same turn of the event loop as the hold's own and
    // due after it, runs after it even when a starved event loop runs both
    // late: the signal must have fired by then.
    let start, lostAt, firedByTTL, checked;
    const ttlChecked = new Promise((resolve) => { checked = resolve; });
    const err = await c.withLock(res, async ({ signal }) => {
      start = performance.now();
      setTimeout(() => { firedByTTL = signal.aborted; checked(); }, ttlMs);
      proxy.stall = () => true;
      lostAt = await untilAborted(signal);
      proxy.stall = () => false;
      assert.ok(signal.reason instanceof LockLostError, signal.reason);
      signal.throwIfAborted();
    }, { ttlMs }).catch((e) => e);
    assert.ok(err instanceof LockLostError, err);
    await ttlChecked; // the timer's check, awaited: a wait of its own could end first
    assert.ok(firedByTTL, `lost ${lostAt - start} ms after the work began, after the TTL's timer`);
    assert.ok(proxy.methods.filter((m) => m === 'PATCH').length >= 1, 'no extension was tried');
  } finally {
    await proxy.close();
  }
});

test('the lock taken over: the extension 409s, the signal fires, release reports it', async () => {
  const c = client(), res = resource('taken');
  let other;
  const err = await c.withLock(res, async ({ signal, token }) => {
    await c.release(res, token); // e.g. an operator, or a paused holder's lock expiring
    other = await c.acquire(res, { ttlMs: 30_000 });
    await untilAborted(signal); // at the next extension, ttl/3
    return 'done';
  }, { ttlMs: 3_000 }).catch((e) => e); // 3 s: the release and acquire above fit before the validity ends
  assert.ok(err instanceof LockLostError, err);
  assert.ok(err.cause instanceof NotOwnerError && err.cause.lockState === 'held-by-other', err.cause);
  assert.ok(err.requestId);
  assert.equal((await c.inspect(res)).fencing_token, other.fencing_token, 'the new holder lost the lock');
  await c.release(res, other.token);
});

test('the lock expires through a silent gateway and is taken: release reports NotOwner', async () => {
  const c = client(), res = resource('expired');
  const proxy = await startProxy();
  let other;
  try {
    const err = await new Client({ url: proxy.url, timeoutMs: 1_000 }).withLock(res, async ({ signal }) => {
      proxy.stall = (req) => req.method === 'PATCH';
      await untilAborted(signal);
      // A holder that goes on regardless: another client takes the lock.
      other = await c.acquire(res, { ttlMs: 30_000, waitMs: 30_000 });
      return 'done';
    }, { ttlMs: 1_000 }).catch((e) => e);
    assert.ok(err instanceof LockLostError, err);
    // held-by-other when a quorum of the release's answers show the new
    // holder; expired when one of them is a node the new holder's write had
    // not reached yet (a round is decided at the quorum).
    assert.match(err.message, /not held at release \((held-by-other|expired)\)/);
    assert.ok(err.cause instanceof NotOwnerError);
  } finally {
    await proxy.close();
  }
  await c.release(res, other.token);
});

test('fn throws: the lock is released and fn\'s error is thrown', async () => {
  const c = client(), res = resource('throws');
  const boom = new Error('boom');
  await assert.rejects(c.withLock(res, () => { throw boom; }, { ttlMs: 30_000 }), (e) => e === boom);
  assert.equal((await c.inspect(res)).held, false);
});

test('withLock errors: unavailable and config', async () => {
  const down = new Client({ url: await closedURL(), timeoutMs: 1_000 });
  await assert.rejects(down.withLock(resource('down'), () => assert.fail('ran'), { ttlMs: 30_000 }), UnavailableError);
  await assert.rejects(client().withLock('a/b', () => assert.fail('ran'), { ttlMs: 30_000 }), ConfigError);
  if (authURL) {
    const wrong = new Client({ url: authURL, apiKey: 'not-a-key-0123456789abcdefghijkl' });
    await assert.rejects(wrong.withLock(resource('key'), () => assert.fail('ran')), (e) => e instanceof ConfigError && e.status === 401 && e.requestId !== '');
  }
});

test('the caller\'s signal cancels a wait', async () => {
  const c = client(), res = resource('cancel');
  const held = await c.acquire(res, { ttlMs: 30_000 });
  const ac = new AbortController();
  setTimeout(() => ac.abort(new Error('cancelled')), 200);
  await assert.rejects(c.withLock(res, () => assert.fail('ran'), { waitMs: 30_000, signal: ac.signal }), /cancelled/);
  await c.release(res, held.token);
});
