// The calls one by one against a live gateway: typed results, typed errors
// with the request id, no token in any message.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  Client, LockHeldError, NotOwnerError, UnavailableError, ConfigError, newToken,
} from '../src/index.js';
import { url, authURL, apiKey, resource, client, closedURL } from './helpers.js';

test('acquire, inspect, list, extend, release', async () => {
  const c = client(), res = resource('basic');
  const before = performance.now();
  const lock = await c.acquire(res, { ttlMs: 30_000, owner: 'js-test' });
  assert.equal(lock.resource, res);
  assert.match(lock.token, /^[A-Za-z0-9_-]{22,128}$/);
  assert.ok(lock.fencing_token > 0);
  assert.ok(lock.startedAt >= before && lock.validUntil === lock.startedAt + lock.validity_ms);
  assert.ok(lock.validity_ms > 0 && lock.validity_ms <= 30_000);
  assert.match(lock.requestId, /^[A-Za-z0-9._-]{1,64}$/);

  const info = await c.inspect(res);
  assert.deepEqual([info.held, info.owner, info.fencing_token], [true, 'js-test', lock.fencing_token]);
  assert.ok(!JSON.stringify(info).includes(lock.token), 'inspect reveals the token');
  const page = await c.list({ prefix: res });
  assert.deepEqual(page.locks.map((l) => [l.resource, l.fencing_token]), [[res, lock.fencing_token]]);

  const ext = await c.extend(res, lock.token, { ttlMs: 30_000 });
  assert.equal(ext.fencing_token, lock.fencing_token);
  assert.ok(ext.startedAt > lock.startedAt);

  const held = await c.acquire(res, { ttlMs: 30_000 }).then(() => assert.fail('acquired a held lock'), (e) => e);
  assert.ok(held instanceof LockHeldError, held);
  assert.equal(held.status, 409);
  assert.equal(held.type, 'urn:redlockd:problem:lock-held');
  assert.ok(held.retryAfterMs > 0 && held.requestId);

  await c.release(res, lock.token);
  assert.equal((await c.inspect(res)).held, false);
  const gone = await c.extend(res, lock.token).then(() => assert.fail('extended a released lock'), (e) => e);
  assert.ok(gone instanceof NotOwnerError, gone);
  assert.equal(gone.lockState, 'expired');
  assert.ok(gone.requestId);
  assert.ok(!gone.message.includes(lock.token) && !JSON.stringify(gone).includes(lock.token), 'the error holds the token');
});

test('a client-chosen token makes acquire idempotent', async () => {
  const c = client(), res = resource('idem'), token = newToken();
  const first = await c.acquire(res, { ttlMs: 30_000, token });
  const again = await c.acquire(res, { ttlMs: 30_000, token });
  assert.equal(again.fencing_token, first.fencing_token);
  await c.release(res, token);
});

test('readers share the lock with the last writer\'s fencing token; a writer is refused meanwhile', async () => {
  const c = client(), res = resource('readers');
  const writer = await c.acquire(res, { ttlMs: 30_000 });
  assert.equal(writer.mode, 'write');
  await c.release(res, writer.token);
  const r1 = await c.acquire(res, { ttlMs: 30_000, mode: 'read' });
  const r2 = await c.withLock(res, async ({ fencingToken }) => {
    const info = await c.inspect(res);
    assert.deepEqual([info.mode, info.readers, info.fencing_token], ['read', 2, writer.fencing_token]);
    return fencingToken;
  }, { ttlMs: 30_000, mode: 'read' });
  assert.deepEqual([r1.mode, r1.fencing_token, r2], ['read', writer.fencing_token, writer.fencing_token]);
  const held = await c.acquire(res, { ttlMs: 30_000, mode: 'write' }).then(() => assert.fail('a writer got in'), (e) => e);
  assert.ok(held instanceof LockHeldError, held);
  await c.release(res, r1.token);
  const bad = await c.acquire(res, { mode: 'READ' }).then(() => assert.fail('mode READ accepted'), (e) => e);
  assert.ok(bad instanceof ConfigError && bad.status === 400, bad);
});

test('config errors: ConfigError with status and request id', async () => {
  const bad = await client().acquire('a/b').then(() => assert.fail('acquired a/b'), (e) => e);
  assert.ok(bad instanceof ConfigError, bad);
  assert.equal(bad.status, 400);
  assert.equal(bad.type, 'urn:redlockd:problem:invalid-request');
  assert.ok(bad.requestId && bad.detail);

  const ttl = await client().acquire(resource('ttl'), { ttlMs: 1 }).then(() => assert.fail('ttl 1 accepted'), (e) => e);
  assert.ok(ttl instanceof ConfigError && ttl.status === 400, ttl);

  const wrongURL = await new Client({ url: `${url}/nope` }).inspect('x').then(() => assert.fail('wrong URL answered'), (e) => e);
  assert.ok(wrongURL instanceof ConfigError && wrongURL.status === 404, wrongURL);

  // A URL that is not http(s)://host is a configuration error, not "no answer: retry".
  for (const bad of ['localhost:8080', '127.0.0.1:8080', url.replace(/^http:/, 'ftp:'), 'http://']) {
    const err = await new Client({ url: bad }).inspect('x').then(() => assert.fail(`${bad} answered`), (e) => e);
    assert.ok(err instanceof ConfigError && err.status === 0, err);
  }
});

test('API keys: the right key works, a wrong one is a ConfigError 401', { skip: !authURL && 'REDLOCKD_TESTS_AUTH_URL is not set' }, async () => {
  const res = resource('auth');
  const good = new Client({ url: authURL, apiKey });
  const lock = await good.acquire(res, { ttlMs: 30_000 });
  await good.release(res, lock.token);

  const wrongKey = 'not-a-key-0123456789abcdefghijkl';
  for (const c of [new Client({ url: authURL, apiKey: wrongKey }), new Client({ url: authURL })]) {
    const err = await c.acquire(res).then(() => assert.fail('acquired with a wrong key'), (e) => e);
    assert.ok(err instanceof ConfigError, err);
    assert.equal(err.status, 401);
    assert.equal(err.type, 'urn:redlockd:problem:unauthorized');
    assert.ok(err.requestId);
    assert.ok(!err.message.includes(wrongKey));
  }
});

test('a key or token that a header cannot hold: ConfigError that quotes neither, before any request', async () => {
  const key = 'SECRET-KEY-0123456789\nabcdef', token = 'SECRET-TOKEN-0123456789\u0100';
  for (const call of [() => client({ apiKey: key }).acquire(resource('hdr')), () => client().release(resource('hdr'), token)]) {
    const err = await call().then(() => assert.fail('sent'), (e) => e);
    assert.ok(err instanceof ConfigError, err);
    assert.equal(err.status, 0);
    for (const text of [err.message, String(err.cause?.message ?? '')]) assert.ok(!text.includes('SECRET'), text);
  }
});

test('no answer: UnavailableError with status 0', async () => {
  const c = new Client({ url: await closedURL(), timeoutMs: 2_000 });
  const err = await c.acquire(resource('down')).then(() => assert.fail('acquired'), (e) => e);
  assert.ok(err instanceof UnavailableError, err);
  assert.equal(err.status, 0);
  assert.equal(err.requestId, '');
});
