#!/usr/bin/env node
// A serverless-style handler that holds a redlockd lock while it works.
//
// Platforms retry: an invocation that timed out or crashed after it took the
// lock is run again with the same event. The handler derives its lock token
// from the event's id, so the retry's acquire is idempotent: it gets the lock
// that the first try still holds at once, with the same fencing token,
// instead of waiting for that lock's TTL to run out. Any other event waits
// (wait_ms) for the lock as usual.
//
// The token is an HMAC of the event id under LOCK_TOKEN_SECRET: event ids
// appear in logs, and whoever knows a token can release the lock.
//
// Run as a program it invokes the handler once with the event given as JSON
// in its first argument and prints the result on its last line (exit 75 when
// the lock stayed held by another owner, 69 when the gateway or a quorum is
// unavailable, 76 when the lock was lost during the work):
//
//   REDLOCKD_URL=http://127.0.0.1:8080 node handler.mjs '{"id":"evt-1","account":"42"}'

import { createHmac } from 'node:crypto';
import { appendFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  withLock, LockHeldError, UnavailableError, LockLostError, EXIT_HELD, EXIT_UNAVAILABLE, EXIT_LOST,
} from '../node/lock.mjs';

const secret = process.env.LOCK_TOKEN_SECRET ?? '';
if (!secret) console.error('handler: LOCK_TOKEN_SECRET is not set: anyone who knows an event id can derive its lock token');

// tokenFor derives the lock token of one event: 43 characters of
// [A-Za-z0-9_-], the same for every retry of the event.
export function tokenFor(resource, eventId) {
  return createHmac('sha256', secret).update(`${resource}\n${eventId}`).digest('base64url');
}

// handler processes one event under the lock of its account. event.id must
// be the id the platform keeps across retries (AWS Lambda: the request id of
// an asynchronous invocation, an SQS message id, a CloudEvents id, ...).
export async function handler(event) {
  const resource = `account-${event.account}`;
  const opts = {
    token: tokenFor(resource, event.id),
    owner: `handler:${event.id}`,
    ttlMs: event.ttl_ms ?? 30_000, // longer than the work, which must end before it
    waitMs: event.wait_ms ?? 10_000, // within the platform's own timeout
  };
  try {
    return await withLock(resource, opts, async (lock) => {
      // The work: everything it writes carries lock.fence, and the storage
      // rejects a write whose fence is below one it has seen.
      console.log(`lock: holding ${resource} with fencing token ${lock.fence}`);
      if (event.journal) appendFileSync(event.journal, `enter ${event.id} ${lock.fence}\n`);
      await sleep(event.work_ms ?? 100, undefined, { signal: lock.signal }).catch(() => lock.check());
      lock.check();
      if (event.journal) appendFileSync(event.journal, `exit ${event.id}\n`);
      return { statusCode: 200, body: JSON.stringify({ id: event.id, fencing_token: lock.fence }) };
    });
  } catch (err) {
    // Busy or unavailable: fail, so that the platform retries later with the same event.
    if (err instanceof LockHeldError) return { statusCode: 409, body: JSON.stringify({ error: err.message }) };
    if (err instanceof UnavailableError) return { statusCode: 503, body: JSON.stringify({ error: err.message }) };
    if (err instanceof LockLostError) return { statusCode: 500, body: JSON.stringify({ error: `lock lost: ${err.message}` }) };
    throw err;
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const result = await handler(JSON.parse(process.argv[2] ?? '{}'));
  console.log(JSON.stringify(result));
  const exit = { 200: 0, 409: EXIT_HELD, 503: EXIT_UNAVAILABLE, 500: EXIT_LOST };
  if (result.statusCode !== 200) console.error(`handler: ${JSON.parse(result.body).error}`);
  process.exitCode = exit[result.statusCode] ?? 1;
}
