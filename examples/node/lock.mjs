#!/usr/bin/env node
// Hold a redlockd lock from Node with the JavaScript client (clients/js, no
// dependencies; see docs/clients.md):
//
//   import { Client } from '@redlockd/client';
//
//   const locks = new Client({ url: process.env.REDLOCKD_URL, apiKey: process.env.REDLOCKD_API_KEY });
//   await locks.withLock('nightly-report', async ({ fencingToken, signal }) => {
//     for (const row of rows) {
//       signal.throwIfAborted();                    // aborted once the lock is lost
//       await db.write(row, { fence: fencingToken }); // the storage rejects stale fences
//     }
//   }, { waitMs: 10_000, ttlMs: 30_000 });
//
// This demo (node lock.mjs --help) holds RESOURCE while it "works" for
// --work-ms and, like `redlockd run`, exits 75 when the lock is held by
// another owner, 69 when the gateway or a quorum is unavailable, 76 when the
// lock was lost during the work, 64 when the gateway refused the request or
// the API key ($REDLOCKD_API_KEY): a configuration error that no retry fixes.

import { hostname } from 'node:os';
import { appendFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { Client, LockHeldError, UnavailableError, LockLostError, ConfigError } from '../../clients/js/src/index.js';

const EXIT_USAGE = 64, EXIT_UNAVAILABLE = 69, EXIT_HELD = 75, EXIT_LOST = 76;
const usage = 'usage: node lock.mjs RESOURCE [--ttl-ms N] [--wait-ms N] [--work-ms N] [--journal FILE]';

function parse(argv) {
  const args = { ttlMs: 30_000, waitMs: 0, workMs: 1_000, journal: '' };
  const names = { '--ttl-ms': 'ttlMs', '--wait-ms': 'waitMs', '--work-ms': 'workMs', '--journal': 'journal' };
  for (let i = 0; i < argv.length; i++) {
    const name = names[argv[i]];
    if (argv[i] === '--help' || argv[i] === '-h') return { help: true };
    if (name) {
      const value = argv[++i] ?? '';
      if (name !== 'journal' && !/^[0-9]+$/.test(value)) return { error: `${argv[i - 1]} wants whole milliseconds, not "${value}"` };
      args[name] = name === 'journal' ? value : Number(value);
    }
    else if (!args.resource) args.resource = argv[i];
    else return { error: `unexpected argument ${argv[i]}` };
  }
  return args.resource ? args : { error: 'RESOURCE is required' };
}

async function main(argv) {
  const args = parse(argv);
  if (args.help) { console.log(usage); return 0; }
  if (args.error) { console.error(`lock: ${args.error}\n${usage}`); return EXIT_USAGE; }
  const { resource } = args, me = `node-${process.pid}`;
  const journal = (line) => { if (args.journal) appendFileSync(args.journal, line + '\n'); };
  const locks = new Client({ url: process.env.REDLOCKD_URL || 'http://127.0.0.1:8080', apiKey: process.env.REDLOCKD_API_KEY });
  try {
    await locks.withLock(resource, async ({ fencingToken, signal }) => {
      journal(`enter ${me} ${fencingToken}`);
      console.log(`lock: holding ${resource} with fencing token ${fencingToken}`);
      // The work: it stops as soon as the lock is lost.
      await sleep(args.workMs, undefined, { signal }).catch(() => signal.throwIfAborted());
      journal(`exit ${me}`);
    }, { ttlMs: args.ttlMs, waitMs: args.waitMs, owner: `${hostname()}:${me}` });
  } catch (err) {
    console.error(`lock: ${err.message}`);
    if (err instanceof LockHeldError) return EXIT_HELD;
    if (err instanceof UnavailableError) return EXIT_UNAVAILABLE;
    if (err instanceof LockLostError) return EXIT_LOST;
    if (err instanceof ConfigError) return EXIT_USAGE;
    throw err;
  }
  console.log(`lock: released ${resource}`);
  return 0;
}

process.exitCode = await main(process.argv.slice(2));
