// Compiled by `npm run typecheck` (tsc --noEmit), never run: the public
// types fit together with the generated schema.
import {
  Client, LockHeldError, LimitMismatchError, type Held, type HeldMulti, type HeldPermit, type LockInfo, type SemaphoreInfo,
} from '../src/index.js';

const client = new Client({ url: 'http://127.0.0.1:8080', apiKey: 'k', timeoutMs: 5_000 });
const pair = new Client({ url: ['http://10.0.0.1:8080', 'http://10.0.0.2:8080'] });
async function typed(): Promise<number> {
  const held: Held = await client.acquire('r', { ttlMs: 1_000, waitMs: 0, owner: 'me' });
  const info: LockInfo = await client.inspect('r');
  const page = await client.list({ prefix: 'r' });
  const fences: number[] = page.locks.map((l) => l.fencing_token);
  try {
    await client.extend('r', held.token, { ttlMs: 1_000 });
  } catch (err) {
    if (err instanceof LockHeldError) return err.retryAfterMs ?? 0;
  }
  await client.release('r', held.token);
  const both: HeldMulti = await client.acquireMulti(['a', 'b'], { ttlMs: 1_000, waitMs: 0, owner: 'me', token: held.token });
  const extended = await client.extendMulti(['a', 'b'], both.token, { ttlMs: 1_000 });
  await client.releaseMulti(['a', 'b'], both.token);
  fences.push(...extended.resources.map((r) => r.fencing_token), both.validUntil);
  fences.push(await client.withLocks(['a', 'b'], ({ fencingTokens, resources, signal }) => {
    signal.throwIfAborted();
    return fencingTokens[0] + resources.length;
  }, { ttlMs: 1_000, waitMs: 100 }));
  const permit: HeldPermit = await pair.acquirePermit('s', { limit: 3, ttlMs: 1_000, waitMs: 0, owner: 'me' });
  const extendedPermit: HeldPermit = await pair.extendPermit('s', permit.token, { ttlMs: 1_000 });
  await pair.releasePermit('s', permit.token);
  const sem: SemaphoreInfo = await pair.inspectSemaphore('s');
  fences.push(permit.permit + permit.limit + extendedPermit.validUntil + sem.held, ...sem.permits.map((p) => p.fencing_token));
  try {
    fences.push(await pair.withPermit('s', ({ fencingToken, permit: index, limit, name, signal }) => {
      signal.throwIfAborted();
      return fencingToken + index + limit + name.length;
    }, { limit: 3, ttlMs: 1_000, waitMs: 100 }));
  } catch (err) {
    if (err instanceof LimitMismatchError) return err.limit ?? 0;
  }
  return client.withLock('r', async ({ fencingToken, signal }) => {
    signal.throwIfAborted();
    return fencingToken + (info.fencing_token ?? 0) + fences.length + held.validUntil;
  }, { ttlMs: 1_000, waitMs: 100, mode: held.mode === 'read' ? 'read' : 'write' });
}
void typed;
