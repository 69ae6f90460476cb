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
// That only works if event.id is the id that the platform keeps across
// retries of one event and that no other event has (e.g. an SQS messageId,
// an EventBridge or CloudEvents id; see docs/clients.md). An event without an id
// is refused: two such events would derive one token, and the second would
// "re-acquire" the lock that the first holds, with the same fencing token.
//
// The token is an HMAC of the event id under LOCK_TOKEN_SECRET: event ids
// appear in logs, and whoever knows a token can release the lock. The API key
// of the gateway, if it has one, comes from REDLOCKD_API_KEY.
//
// The result is {statusCode, body}; on failure the body is {error, retry}:
// retry is true when trying the same event again later can succeed (409 the
// lock is held, 503 the gateway or a quorum is unavailable, 500 the lock was
// lost during the work) and false when it cannot (400 an event without an id,
// 500 the gateway refused the request or the API key: a configuration error).
// Fail the invocation (throw) only when retry is true; send the others to a
// dead-letter queue.
//
// Run as a program it invokes the handler once with the event given as JSON
// in its first argument and prints the result on its last line (exit 75 when
// the lock stayed held by another owner, 69 when the gateway or a quorum is
// unavailable, 76 when the lock was lost during the work, 64 when the event or
// the configuration is wrong):
//
//   REDLOCKD_URL=http://127.0.0.1:8080 node handler.mjs '{"id":"evt-1","account":"42"}'

import { createHmac } from 'node:crypto';
import { appendFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { Client, LockHeldError, UnavailableError, LockLostError, ConfigError } from '../../clients/js/src/index.js';

const locks = new Client({ url: process.env.REDLOCKD_URL || 'http://127.0.0.1:8080', apiKey: process.env.REDLOCKD_API_KEY });

const secret = process.env.LOCK_TOKEN_SECRET ?? '';
if (!secret) console.error('handler: LOCK_TOKEN_SECRET is not set: anyone who knows an event id can derive its lock token');

// tokenFor derives the lock token of one event: 43 characters of
// [A-Za-z0-9_-] (a base64url HMAC-SHA256), the same for every retry of the
// event and different for every other event id.
export function tokenFor(resource, eventId) {
  return createHmac('sha256', secret).update(`${resource}\n${eventId}`).digest('base64url');
}

// failure is the handler's result for an error; kind names it for the exit
// status of the program.
function failure(statusCode, kind, retry, error) {
  return { statusCode, body: JSON.stringify({ error, kind, retry }) };
}

// handler processes one event under the lock of its account.
export async function handler(event) {
  const id = event?.id;
  if (typeof id !== 'string' || id === '') {
    return failure(400, 'bad-event', false, 'the event has no id: the lock token is derived from the id that the platform keeps across retries of one event');
  }
  if (event.account == null || event.account === '') {
    return failure(400, 'bad-event', false, 'the event has no account');
  }
  const resource = `account-${event.account}`;
  const opts = {
    token: tokenFor(resource, id),
    owner: `handler:${id}`,
    ttlMs: event.ttl_ms ?? 30_000, // longer than the work, which must end before it
    waitMs: event.wait_ms ?? 10_000, // within the platform's own timeout
  };
  try {
    return await locks.withLock(resource, async ({ fencingToken, signal }) => {
      // The work: everything it writes carries fencingToken, and the storage
      // rejects a write whose fence is below one it has seen. It stops as
      // soon as signal says the lock is lost.
      console.log(`lock: holding ${resource} with fencing token ${fencingToken}`);
      if (event.journal) appendFileSync(event.journal, `enter ${id} ${fencingToken}\n`);
      await sleep(event.work_ms ?? 100, undefined, { signal }).catch(() => signal.throwIfAborted());
      if (event.journal) appendFileSync(event.journal, `exit ${id}\n`);
      return { statusCode: 200, body: JSON.stringify({ id, fencing_token: fencingToken }) };
    }, opts);
  } catch (err) {
    // Busy, unavailable or lost: retry the event later. Refused: no retry helps.
    if (err instanceof LockHeldError) return failure(409, 'held', true, err.message);
    if (err instanceof UnavailableError) return failure(503, 'unavailable', true, err.message);
    if (err instanceof LockLostError) return failure(500, 'lost', true, err.message);
    if (err instanceof ConfigError) return failure(500, 'refused', false, err.message);
    throw err;
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  let event;
  try {
    event = JSON.parse(process.argv[2] ?? '{}');
  } catch (err) {
    console.error(`handler: the event is not JSON: ${err.message}`);
    process.exit(64);
  }
  const result = await handler(event);
  console.log(JSON.stringify(result));
  if (result.statusCode !== 200) {
    const { error, kind } = JSON.parse(result.body);
    console.error(`handler: ${error}`);
    // The exit statuses of `redlockd run`.
    const exit = { held: 75, unavailable: 69, lost: 76, refused: 64, 'bad-event': 64 };
    process.exitCode = exit[kind] ?? 1;
  }
}
