#!/usr/bin/env node
// Hold a redlockd lock from Node with nothing but the built-in fetch (Node 20.3+).
//
//   import { withLock } from './lock.mjs';
//
//   await withLock('nightly-report', { waitMs: 10_000 }, async (lock) => {
//     for (const row of rows) {
//       lock.signal.throwIfAborted();              // aborted once the lock is lost
//       await db.write(row, { fence: lock.fence }); // the storage rejects stale fences
//     }
//   });
//
// The lock is extended every ttl/3 while the function runs and released when
// it returns or throws. JavaScript cannot stop your code from outside: check
// lock.signal (or lock.valid()) before each step that needs the lock, pass it
// to the calls that accept an AbortSignal, and pass lock.fence to the storage.
//
// Run as a program it is a small demo (node lock.mjs --help); it sends
// $REDLOCKD_API_KEY as a bearer key and, like `redlockd run`, exits 75 when the
// lock is held by another owner, 69 when the gateway or a quorum is
// unavailable, 76 when the lock was lost during the work, 64 when the gateway
// refused the request or the API key (a configuration error: trying again
// cannot help).

import { hostname } from 'node:os';
import { appendFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';

export const EXIT_USAGE = 64, EXIT_UNAVAILABLE = 69, EXIT_HELD = 75, EXIT_LOST = 76;

export class LockHeldError extends Error { name = 'LockHeldError'; }
export class LockLostError extends Error { name = 'LockLostError'; }
// UnavailableError: no answer, or a 5xx: the outcome is unknown, try again later.
export class UnavailableError extends Error { name = 'UnavailableError'; }
// RefusedError: a 4xx other than 409 (400 a bad value, 401 a missing or wrong
// API key, 404 a wrong URL, 413): a configuration error that no retry fixes.
export class RefusedError extends Error { name = 'RefusedError'; }

const refused = (status) => status >= 400 && status < 500 && status !== 409;

const defaultURL = () => (process.env.REDLOCKD_URL || 'http://127.0.0.1:8080').replace(/\/+$/, '');

// request sends one request to /locks/{resource}; it returns {status, body}
// or throws UnavailableError when no answer came.
async function request(opts, method, { body, token, timeoutMs, signal }) {
  const headers = {};
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (token) headers['Lock-Token'] = token; // the token travels in a header, never in the URL
  if (opts.apiKey) headers.Authorization = `Bearer ${opts.apiKey}`;
  let res;
  try {
    res = await fetch(`${opts.url}/locks/${encodeURIComponent(opts.resource)}`, {
      method, headers, body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.any([AbortSignal.timeout(Math.max(1, Math.ceil(timeoutMs))), signal ?? new AbortController().signal]),
    });
  } catch (err) {
    throw new UnavailableError(`cannot reach the gateway at ${opts.url}: ${err.cause?.code ?? err.cause?.message ?? err.message}`);
  }
  const text = await res.text();
  let json = {};
  try { json = text ? JSON.parse(text) : {}; } catch { /* not JSON: keep {} */ }
  return { status: res.status, body: json };
}

export class Lock {
  #opts; #until = 0; #abort = new AbortController(); #stop = new AbortController(); #timer = null; #keeping = null;

  constructor(opts, res, start) {
    this.#opts = opts;
    this.resource = opts.resource;
    this.token = res.token;
    this.fence = res.fencing_token;
    // Validity counts from before the request was sent: our round trip is subtracted.
    this.#until = start + res.validity_ms;
  }

  // Lock.acquire takes the lock. opts: url (default $REDLOCKD_URL), ttlMs
  // (30000), waitMs (0), token (client-chosen, makes acquire idempotent),
  // owner, apiKey (default $REDLOCKD_API_KEY). Throws LockHeldError,
  // UnavailableError or RefusedError.
  static async acquire(resource, opts = {}) {
    const o = { url: defaultURL(), apiKey: process.env.REDLOCKD_API_KEY, ttlMs: 30_000, waitMs: 0, ...opts, resource };
    const body = { ttl_ms: o.ttlMs, wait_ms: o.waitMs };
    if (o.token) body.token = o.token;
    if (o.owner) body.owner = o.owner;
    const start = performance.now();
    const { status, body: res } = await request(o, 'POST', { body, timeoutMs: o.waitMs + 10_000 });
    if (status === 409) throw new LockHeldError(`${resource} is held by another owner (retry in ${res.retry_after_ms} ms)`);
    if (refused(status)) throw new RefusedError(`the gateway refused to acquire ${resource}: HTTP ${status}: ${res.detail ?? ''}`);
    if (status !== 201) throw new UnavailableError(`acquire ${resource}: HTTP ${status}: ${res.detail ?? ''}`);
    const lock = new Lock(o, res, start);
    if (lock.#until - performance.now() < o.ttlMs * 2 / 3) {
      // The validity counts from before the request, so a wait ate into it:
      // extend at once (an extension never waits) to know the window.
      await lock.#extend(Math.max(lock.#until, performance.now() + o.ttlMs / 3));
      if (lock.signal.aborted) {
        throw new LockLostError(`${resource}: lost right after it was acquired: ${lock.signal.reason.message}`);
      }
    }
    lock.#schedule();
    return lock;
  }

  // signal is aborted, with a LockLostError, once the lock is lost.
  get signal() { return this.#abort.signal; }

  // valid tells whether the lock is still safely held.
  valid() { return !this.#abort.signal.aborted && performance.now() < this.#until; }

  // check throws LockLostError unless the lock is still safely held.
  check() {
    this.#abort.signal.throwIfAborted();
    if (!this.valid()) throw new LockLostError(`${this.resource}: the lock's validity ended`);
  }

  #lose(why) { this.#abort.abort(new LockLostError(`${this.resource}: ${why}`)); }

  #schedule() {
    this.#timer = setTimeout(() => {
      this.#keeping = this.#extend(this.#until).then((ok) => { if (ok && !this.#stop.signal.aborted) this.#schedule(); });
    }, this.#opts.ttlMs / 3);
  }

  // #extend extends the lock, trying again after a 503 or no answer, until
  // deadline. On a 409 (the lock is not ours any more), another 4xx (e.g. the
  // API key was revoked: no extension can succeed) or at deadline the lock is
  // lost. It returns whether the lock was extended.
  async #extend(deadline) {
    while (!this.#stop.signal.aborted) {
      const start = performance.now();
      const left = deadline - start;
      if (left <= 0) {
        this.#lose('no extension succeeded before the lock\'s validity ended');
        return false;
      }
      let status, res;
      try {
        ({ status, body: res } = await request(this.#opts, 'PATCH', {
          body: { ttl_ms: this.#opts.ttlMs }, token: this.token,
          timeoutMs: Math.min(left, this.#opts.ttlMs / 3), signal: this.#stop.signal,
        }));
      } catch { status = 0; }
      if (this.#stop.signal.aborted) return false;
      if (status === 200) {
        this.#until = start + res.validity_ms;
        return true;
      }
      if (status === 409) {
        this.#lose(`the gateway says the lock is not ours any more (${res.lock_state})`);
        return false;
      }
      if (refused(status)) {
        this.#lose(`the gateway refused the extension: HTTP ${status}: ${res.detail ?? ''}`);
        return false;
      }
      // 503 or no answer: try again while valid.
      await sleep(Math.min(200, Math.max(left, 0)), undefined, { signal: this.#stop.signal }).catch(() => {});
    }
    return false;
  }

  // release stops the extensions and releases the lock. Throws
  // LockLostError if the lock was lost or not held any more.
  async release() {
    this.#stop.abort();
    clearTimeout(this.#timer);
    await this.#keeping;
    let status = 0, res = {};
    try {
      ({ status, body: res } = await request(this.#opts, 'DELETE', { token: this.token, timeoutMs: 5_000 }));
    } catch (err) { res = { detail: err.message }; }
    this.#abort.signal.throwIfAborted();
    if (status === 409) {
      throw new LockLostError(`${this.resource}: not held at release (${res.lock_state}): the work may not have been exclusive`);
    }
    if (status !== 204) { // unknown: the lock expires at the end of its TTL anyway
      console.error(`lock: could not confirm the release of ${this.resource}: ${status} ${res.detail ?? ''}`);
    }
  }
}

// withLock runs fn(lock) holding the lock on resource and releases it after.
export async function withLock(resource, opts, fn) {
  const lock = await Lock.acquire(resource, opts);
  let result;
  try {
    result = await fn(lock);
  } catch (err) {
    await lock.release().catch(() => {}); // fn's error is the one to report
    throw err;
  }
  await lock.release();
  return result;
}

// The demo: node lock.mjs RESOURCE [--ttl-ms N] [--wait-ms N] [--work-ms N] [--journal FILE]
async function main(argv) {
  const args = { ttlMs: 30_000, waitMs: 0, workMs: 1_000, journal: '' };
  const names = { '--ttl-ms': 'ttlMs', '--wait-ms': 'waitMs', '--work-ms': 'workMs', '--journal': 'journal' };
  let resource;
  for (let i = 0; i < argv.length; i++) {
    const name = names[argv[i]];
    if (argv[i] === '--help' || argv[i] === '-h') {
      console.log('usage: node lock.mjs RESOURCE [--ttl-ms N] [--wait-ms N] [--work-ms N] [--journal FILE]');
      return 0;
    } else if (name) {
      args[name] = name === 'journal' ? argv[++i] : Number(argv[++i]);
    } else if (!resource) {
      resource = argv[i];
    } else {
      console.error(`lock: unexpected argument ${argv[i]}`);
      return EXIT_USAGE;
    }
  }
  if (!resource) { console.error('lock: RESOURCE is required'); return EXIT_USAGE; }
  const me = `node-${process.pid}`;
  const journal = (line) => { if (args.journal) appendFileSync(args.journal, line + '\n'); };

  try {
    await withLock(resource, { ttlMs: args.ttlMs, waitMs: args.waitMs, owner: `${hostname()}:${me}` }, async (lock) => {
      journal(`enter ${me} ${lock.fence}`);
      console.log(`lock: holding ${resource} with fencing token ${lock.fence}`);
      const end = performance.now() + args.workMs;
      while (performance.now() < end) { // the work, in steps that each check the lock
        lock.check();
        await sleep(Math.min(50, Math.max(end - performance.now(), 0)));
      }
      lock.check();
      journal(`exit ${me}`);
    });
  } catch (err) {
    console.error(`lock: ${err instanceof LockLostError ? 'lost: ' : ''}${err.message}`);
    if (err instanceof LockHeldError) return EXIT_HELD;
    if (err instanceof UnavailableError) return EXIT_UNAVAILABLE;
    if (err instanceof LockLostError) return EXIT_LOST;
    if (err instanceof RefusedError) return EXIT_USAGE;
    throw err;
  }
  console.log(`lock: released ${resource}`);
  return 0;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  process.exitCode = await main(process.argv.slice(2));
}
