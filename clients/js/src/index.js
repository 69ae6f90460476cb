// @redlockd/client: a redlockd client over fetch, with no dependencies and no
// Node-only API (Node >= 20, Deno, Bun, edge runtimes). Client has one
// method per operation of openapi.yaml; the hold helpers (withLock for a
// lock or a read lock, withLocks for several resources, withPermit for a
// semaphore's permit) apply the four rules of docs/clients.md: validity
// counted from before the request, the fencing token handed to the work,
// extensions every ttl/3 with an AbortSignal that fires when the hold is
// lost, release at the end with a 409 reported.

const TOKEN_ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
// The rules of a multi-resource lock's resources (openapi.yaml, POST /locks).
const MAX_RESOURCES = 16;
const NAME = /^[A-Za-z0-9._:-]{1,200}$/;

// RedlockdError is the base of every error: status (0 when no answer came),
// the problem type and detail, and the X-Request-Id of the answer. Messages
// never hold the lock token or the API key.
export class RedlockdError extends Error {
  constructor(message, fields = {}, cause) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = new.target.name;
    Object.assign(this, { status: 0, type: '', detail: '', requestId: '' }, fields);
  }
}
// LockHeldError: 409 lock-held, another owner holds the lock; retryAfterMs.
export class LockHeldError extends RedlockdError {}
// NotOwnerError: 409 not-owner on extend or release; lockState is
// "expired" or "held-by-other".
export class NotOwnerError extends RedlockdError {}
// UnavailableError: a 5xx, no answer or a timeout: the outcome is unknown,
// try again later (retryAfterMs when the gateway gave it).
export class UnavailableError extends RedlockdError {}
// ConfigError: any other 4xx (400 a bad value, 401 a missing or wrong API
// key, 404 a wrong URL, 413): no retry fixes it.
export class ConfigError extends RedlockdError {}
// LimitMismatchError: 409 limit-mismatch on acquirePermit: the permits held
// have another limit (limit), a configuration error.
export class LimitMismatchError extends ConfigError {}
// LockLostError: a hold helper lost the hold during the work (a 409 on
// extend, or the validity ended without a successful extension) or found it
// not held at release: the work may not have been exclusive. cause is the
// gateway's answer, if one came.
export class LockLostError extends RedlockdError {}

// newToken is a random lock token: 24 characters of [A-Za-z0-9_-] (144 bits).
export function newToken() {
  return Array.from(crypto.getRandomValues(new Uint8Array(24)), (b) => TOKEN_ALPHABET[b & 63]).join('');
}

// defined is o without its undefined members: a request body.
function defined(o) {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined));
}

// sleep resolves true after ms, or false at once when signal aborts.
function sleep(ms, signal) {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve(false);
    const done = (ok) => { clearTimeout(timer); signal?.removeEventListener('abort', onAbort); resolve(ok); };
    const onAbort = () => done(false);
    const timer = setTimeout(() => done(true), Math.max(0, ms));
    signal?.addEventListener('abort', onAbort);
  });
}

export class Client {
  #urls; #at = 0; #apiKey; #timeoutMs; #fetch;

  // url: the gateway's base URL, or a list of them (gateways of one
  // deployment) tried in turn: a request that gets no answer or a 5xx moves
  // the client to the next one; apiKey: sent as Authorization: Bearer;
  // timeoutMs (30000): bound of one request, plus its wait_ms; fetch: a
  // fetch implementation (default the global one).
  constructor({ url, apiKey, timeoutMs = 30_000, fetch: fetchImpl } = {}) {
    const urls = (Array.isArray(url) ? url : [url]).filter(Boolean);
    if (urls.length === 0) throw new TypeError('Client: url is required');
    this.#urls = urls.map((u) => String(u).replace(/\/+$/, ''));
    this.#apiKey = apiKey || undefined;
    this.#timeoutMs = timeoutMs;
    this.#fetch = fetchImpl ?? ((...args) => fetch(...args));
  }

  // #call sends one request to the current gateway URL and returns
  // [response, parsed JSON body]; a status other than ok throws the matching
  // RedlockdError. An UnavailableError moves the client to the next URL.
  async #call(op, resource, method, path, ok, options = {}) {
    const at = this.#at;
    try {
      return await this.#send(this.#urls[at], op, resource, method, path, ok, options);
    } catch (err) {
      if (err instanceof UnavailableError && this.#at === at) this.#at = (at + 1) % this.#urls.length;
      throw err;
    }
  }

  async #send(url, op, resource, method, path, ok, { body, token, timeoutMs, signal } = {}) {
    signal?.throwIfAborted();
    if (!/^https?:\/\/[^/?#]/i.test(url)) {
      throw new ConfigError(`${op} ${resource}: the gateway URL ${url} is not http(s)://host[:port]`);
    }
    const headers = {};
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    if (token !== undefined) headers['Lock-Token'] = token; // never in the URL
    if (this.#apiKey) headers.Authorization = `Bearer ${this.#apiKey}`;
    try {
      new Headers(headers); // fetch's own error would quote the token or the key, and read as no answer
    } catch {
      throw new ConfigError(`${op} ${resource}: a token or API key with characters that an HTTP header cannot hold`);
    }
    const abort = new AbortController();
    const onAbort = () => abort.abort(signal.reason);
    signal?.addEventListener('abort', onAbort);
    const timer = setTimeout(() => abort.abort(), timeoutMs ?? this.#timeoutMs);
    let res, text;
    try {
      res = await this.#fetch(url + path, {
        method, headers, body: body === undefined ? undefined : JSON.stringify(body), signal: abort.signal,
      });
      text = await res.text();
    } catch (err) {
      signal?.throwIfAborted();
      const why = abort.signal.aborted ? 'no answer in time' : (err.cause?.code ?? err.cause?.message ?? err.message);
      throw new UnavailableError(`${op} ${resource}: cannot reach the gateway at ${url}: ${why}`, {}, err);
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
    }
    let json = {};
    try { json = text ? JSON.parse(text) : {}; } catch { /* not JSON (e.g. a proxy's page) */ }
    if (res.status === ok) return [res, json];
    const fields = {
      status: res.status, type: typeof json.type === 'string' ? json.type : '',
      detail: typeof json.detail === 'string' ? json.detail : '', requestId: res.headers.get('X-Request-Id') ?? '',
    };
    const retryAfter = Number(res.headers.get('Retry-After'));
    const retryAfterMs = json.retry_after_ms ?? (retryAfter > 0 ? retryAfter * 1000 : undefined);
    const kind = fields.type.replace('urn:redlockd:problem:', '');
    const message = `${op} ${resource}: HTTP ${res.status}${kind ? ` ${kind}` : ''}${fields.detail ? `: ${fields.detail}` : ''}`;
    if (res.status === 409 && kind === 'limit-mismatch') throw new LimitMismatchError(message, { ...fields, limit: json.limit });
    if (res.status === 409 && op === 'acquire') throw new LockHeldError(message, { ...fields, retryAfterMs });
    if (res.status === 409) throw new NotOwnerError(message, { ...fields, lockState: json.lock_state });
    if (res.status >= 400 && res.status < 500) throw new ConfigError(message, fields);
    throw new UnavailableError(message, { ...fields, retryAfterMs });
  }

  static #path(resource) { return `/locks/${encodeURIComponent(resource)}`; }
  static #semaphore(name) { return `/semaphores/${encodeURIComponent(name)}`; }

  // #held is a LockResponse with requestId, startedAt (performance.now()
  // just before the request) and validUntil = startedAt + validity_ms: the
  // validity counts from before the request, so the round trip is subtracted.
  static #held(res, json, startedAt) {
    return { ...json, requestId: res.headers.get('X-Request-Id') ?? '', startedAt, validUntil: startedAt + json.validity_ms };
  }

  // #acquire is an acquire (POST path with body) whose request may wait waitMs.
  async #acquire(label, path, body, { timeoutMs, signal }) {
    const startedAt = performance.now();
    const [res, json] = await this.#call('acquire', label, 'POST', path, 201,
      { body, signal, timeoutMs: (timeoutMs ?? this.#timeoutMs) + (body.wait_ms ?? 0) });
    return Client.#held(res, json, startedAt);
  }

  // #extend is an extension (PATCH path) of what token holds.
  async #extend(label, path, token, { ttlMs, timeoutMs, signal }) {
    const startedAt = performance.now();
    const [res, json] = await this.#call('extend', label, 'PATCH', path, 200,
      { body: defined({ ttl_ms: ttlMs }), token, timeoutMs, signal });
    return Client.#held(res, json, startedAt);
  }

  // #inspect is a GET of path with the answer's requestId.
  async #inspect(op, label, path, { timeoutMs, signal }) {
    const [res, json] = await this.#call(op, label, 'GET', path, 200, { timeoutMs, signal });
    return { ...json, requestId: res.headers.get('X-Request-Id') ?? '' };
  }

  // acquire takes the lock (POST), waiting up to waitMs; mode 'read' shares
  // it with other readers ('write', the default, is exclusive). With a token
  // of your choosing the call is idempotent: retry it when the outcome is unknown.
  async acquire(resource, { ttlMs, waitMs, token, owner, mode, timeoutMs, signal } = {}) {
    return this.#acquire(resource, Client.#path(resource),
      defined({ ttl_ms: ttlMs, wait_ms: waitMs, token, owner, mode }), { timeoutMs, signal });
  }

  // extend makes the lock held with token valid for ttlMs from now (PATCH).
  async extend(resource, token, { ttlMs, timeoutMs, signal } = {}) {
    return this.#extend(resource, Client.#path(resource), token, { ttlMs, timeoutMs, signal });
  }

  // release releases the lock held with token (DELETE); NotOwnerError when
  // it was not held any more.
  async release(resource, token, { timeoutMs, signal } = {}) {
    await this.#call('release', resource, 'DELETE', Client.#path(resource), 204, { token, timeoutMs, signal });
  }

  // #multi checks the resources of a multi-resource lock as the gateway does
  // (1-16 names of [A-Za-z0-9._:-], none repeated) and returns the URL
  // naming them, /locks?resource=a&resource=b.
  static #multi(op, resources) {
    const name = (r) => typeof r === 'string' && NAME.test(r) && r !== '.' && r !== '..';
    if (!Array.isArray(resources) || resources.length < 1 || resources.length > MAX_RESOURCES
      || new Set(resources).size !== resources.length || !resources.every(name)) {
      throw new ConfigError(`${op} ${resources}: resources must be 1-${MAX_RESOURCES} names of [A-Za-z0-9._:-]`
        + ' (1-200 characters, not . or ..), none repeated', { type: 'urn:redlockd:problem:invalid-request' });
    }
    return `/locks?${new URLSearchParams(resources.map((r) => ['resource', r]))}`;
  }

  // acquireMulti takes the write locks of every resource in resources, or
  // none (POST /locks): the gateway's nodes grant all or nothing, so taking
  // [a, b] and [b, a] at once never deadlocks. The answer lists each
  // resource's fencing token; options and errors are acquire's, but they are
  // write locks: a mode other than 'write' is a ConfigError.
  async acquireMulti(resources, { ttlMs, waitMs, token, owner, mode, timeoutMs, signal } = {}) {
    Client.#multi('acquire', resources);
    if (mode !== undefined && mode !== 'write') {
      throw new ConfigError(`acquire ${resources.join(' ')}: the locks of several resources are write locks, not ${mode}`);
    }
    return this.#acquire(resources.join(' '), '/locks',
      defined({ resources, ttl_ms: ttlMs, wait_ms: waitMs, token, owner }), { timeoutMs, signal });
  }

  // extendMulti makes the locks that token holds on resources valid for
  // ttlMs from now (PATCH), only if it holds every one of them.
  async extendMulti(resources, token, { ttlMs, timeoutMs, signal } = {}) {
    return this.#extend(resources.join(' '), Client.#multi('extend', resources), token, { ttlMs, timeoutMs, signal });
  }

  // releaseMulti releases the locks that token holds on resources (DELETE);
  // NotOwnerError when they were not held any more.
  async releaseMulti(resources, token, { timeoutMs, signal } = {}) {
    const path = Client.#multi('release', resources);
    await this.#call('release', resources.join(' '), 'DELETE', path, 204, { token, timeoutMs, signal });
  }

  // inspect tells whether the lock is held, and by whom (never the token).
  async inspect(resource, { timeoutMs, signal } = {}) {
    return this.#inspect('inspect', resource, Client.#path(resource), { timeoutMs, signal });
  }

  // list returns one page of the locks held (GET /locks); pass next_cursor
  // back as cursor until a page has none.
  async list({ prefix, limit, cursor, timeoutMs, signal } = {}) {
    const q = new URLSearchParams();
    if (prefix) q.set('prefix', prefix);
    if (limit !== undefined) q.set('limit', String(limit));
    if (cursor) q.set('cursor', cursor);
    return this.#inspect('list', prefix ?? '', `/locks${String(q) ? `?${q}` : ''}`, { timeoutMs, signal });
  }

  // acquirePermit takes one of the limit permits of the semaphore name
  // (POST /semaphores/{name}), waiting up to waitMs; the answer adds limit
  // and permit (0..limit-1) to an acquire's. LockHeldError when every
  // permit stayed held, LimitMismatchError when they are held with another
  // limit; a token of your choosing makes it idempotent.
  async acquirePermit(name, { limit, ttlMs, waitMs, token, owner, timeoutMs, signal } = {}) {
    return this.#acquire(name, Client.#semaphore(name),
      defined({ limit, ttl_ms: ttlMs, wait_ms: waitMs, token, owner }), { timeoutMs, signal });
  }

  // extendPermit makes the permit held with token valid for ttlMs from now.
  async extendPermit(name, token, { ttlMs, timeoutMs, signal } = {}) {
    return this.#extend(name, Client.#semaphore(name), token, { ttlMs, timeoutMs, signal });
  }

  // releasePermit releases the permit held with token; NotOwnerError when
  // it was not held any more.
  async releasePermit(name, token, { timeoutMs, signal } = {}) {
    await this.#call('release', name, 'DELETE', Client.#semaphore(name), 204, { token, timeoutMs, signal });
  }

  // inspectSemaphore tells the limit and the permits held, with their
  // owners and fencing tokens (never a token).
  async inspectSemaphore(name, { timeoutMs, signal } = {}) {
    return this.#inspect('inspect', name, Client.#semaphore(name), { timeoutMs, signal });
  }

  // withLock runs fn({fencingToken, signal, token, resource}) holding the
  // lock (mode 'read': a read lock) and returns its result; see
  // docs/clients.md and index.d.ts.
  async withLock(resource, fn, { mode, ...options } = {}) {
    return this.#hold(resource, {
      acquire: (o) => this.acquire(resource, { ...o, mode }),
      extend: (token, o) => this.extend(resource, token, o),
      release: (token, o) => this.release(resource, token, o),
      work: (lock, signal) => fn({ fencingToken: lock.fencing_token, signal, token: lock.token, resource }),
    }, options);
  }

  // withLocks is withLock for the locks of several resources, taken all or
  // none: fn({fencingTokens, signal, token, resources}), the fencing tokens
  // in the order of resources.
  async withLocks(resources, fn, { mode, ...options } = {}) {
    return this.#hold(String(resources), {
      acquire: (o) => this.acquireMulti(resources, { ...o, mode }),
      extend: (token, o) => this.extendMulti(resources, token, o),
      release: (token, o) => this.releaseMulti(resources, token, o),
      work: (lock, signal) => fn({
        fencingTokens: lock.resources.map((r) => r.fencing_token), signal, token: lock.token, resources,
      }),
    }, options);
  }

  // withPermit is withLock for one of the limit permits of the semaphore
  // name: fn({fencingToken, permit, limit, signal, token, name}).
  async withPermit(name, fn, { limit, ...options } = {}) {
    return this.#hold(name, {
      acquire: (o) => this.acquirePermit(name, { ...o, limit }),
      extend: (token, o) => this.extendPermit(name, token, o),
      release: (token, o) => this.releasePermit(name, token, o),
      work: (held, signal) => fn({
        fencingToken: held.fencing_token, permit: held.permit, limit: held.limit, signal, token: held.token, name,
      }),
    }, options);
  }

  // #hold applies the four rules to what ops acquire, extend and release,
  // named label in errors; ops.work runs fn.
  async #hold(label, ops, { ttlMs = 30_000, waitMs = 0, owner, token = newToken(), signal } = {}) {
    // Every deadline below is computed from them: NaN or Infinity would retry forever.
    if (![ttlMs, waitMs].every((ms) => typeof ms === 'number' && Number.isFinite(ms) && ms >= 0)) {
      throw new ConfigError(`${label}: ttlMs and waitMs must be finite numbers of milliseconds, 0 or more`);
    }
    const lock = await this.#take(ops, { ttlMs, waitMs, owner, token, signal });

    let until = lock.validUntil, lost, expiry;
    const stop = new AbortController(); // ends the extensions
    const work = new AbortController(); // fn's signal: the hold is lost, or the caller aborted
    const lose = (why, cause) => {
      lost ??= new LockLostError(`${label}: lock lost: ${why}`, { status: cause?.status ?? 0, requestId: cause?.requestId ?? '' }, cause);
      stop.abort();
      work.abort(lost);
    };
    const arm = () => {
      clearTimeout(expiry);
      expiry = setTimeout(() => lose('no extension succeeded before its validity ended'), until - performance.now());
    };
    // extend tries until deadline (the validity's end): a 5xx or no answer
    // is no verdict; the next try goes to the next gateway URL.
    const extend = async (deadline = until) => {
      while (!stop.signal.aborted) {
        const left = deadline - performance.now();
        if (left <= 0) return lose('no extension succeeded before its validity ended'), false;
        try {
          until = (await ops.extend(lock.token, { ttlMs, timeoutMs: Math.min(left, ttlMs / 3), signal: stop.signal })).validUntil;
          arm();
          return true;
        } catch (err) {
          if (stop.signal.aborted) return false;
          if (!(err instanceof UnavailableError)) return lose(err.message, err), false;
          await sleep(Math.min(200, left), stop.signal);
        }
      }
      return false;
    };
    const onAbort = () => work.abort(signal.reason);
    signal?.addEventListener('abort', onAbort);
    // A wait or a slow round ate into the validity, maybe all of it: extend
    // at once (an extension never waits) before the work starts; the
    // gateway's answer tells whether the lock is still ours.
    if (until - performance.now() < ttlMs * 2 / 3) await extend(Math.max(until, performance.now() + ttlMs / 3));
    if (!lost) arm();
    const keeping = (async () => { while (await sleep(ttlMs / 3, stop.signal) && await extend()); })();

    let result, failure;
    try {
      work.signal.throwIfAborted();
      result = await ops.work(lock, work.signal);
      if (!lost && performance.now() >= until) lose('its validity ended during the work');
    } catch (err) {
      failure = { err };
    }
    stop.abort();
    clearTimeout(expiry);
    signal?.removeEventListener('abort', onAbort);
    await keeping;
    const notHeld = await this.#drop(ops, lock.token, until);
    if (notHeld) {
      lost = new LockLostError(`${label}: lock lost: not held at release (${notHeld.lockState}): the work may not have been exclusive`,
        { status: notHeld.status, requestId: notHeld.requestId }, notHeld);
    }
    if (failure) throw failure.err;
    if (lost) throw lost;
    return result;
  }

  // #take acquires with one token throughout, so that an acquire retried
  // after a 5xx or no answer gets the hold the lost attempt may have taken.
  // It retries while waitMs lasts, and tries each gateway URL once whatever
  // the wait. If the outcome stays unknown it releases with that token.
  async #take(ops, { ttlMs, waitMs, owner, token, signal }) {
    const waitEnd = performance.now() + waitMs;
    try {
      for (let tries = 1; ; tries++) {
        try {
          return await ops.acquire({ ttlMs, waitMs: Math.max(0, Math.floor(waitEnd - performance.now())), token, owner, signal });
        } catch (err) {
          if (!(err instanceof UnavailableError)) throw err;
          if (tries % this.#urls.length === 0) { // every URL tried: pause
            const pause = Math.min(err.retryAfterMs ?? 250, 1_000);
            if (performance.now() + pause >= waitEnd) throw err;
            if (!(await sleep(pause, signal))) signal.throwIfAborted();
          } else if (tries >= this.#urls.length && performance.now() >= waitEnd) {
            throw err;
          }
        }
      }
    } catch (err) {
      // The outcome is unknown (no answer, a 5xx, the caller aborted): the
      // hold may be ours, so release it rather than leave it for its TTL.
      if (!(err instanceof LockHeldError || err instanceof ConfigError)) {
        await ops.release(token, { timeoutMs: Math.min(this.#timeoutMs, ttlMs) }).catch(() => {});
      }
      throw err;
    }
  }

  // #drop releases with token, trying again (the next gateway URL) after a
  // 5xx or no answer until the validity ends (then the hold expires anyway).
  // It returns the NotOwnerError of a 409: the hold was not held any more.
  async #drop(ops, token, until) {
    for (;;) {
      try {
        await ops.release(token);
        return undefined;
      } catch (err) {
        if (err instanceof NotOwnerError) return err;
        if (!(err instanceof UnavailableError) || performance.now() + 200 >= until) return undefined;
        await sleep(200);
      }
    }
  }
}
