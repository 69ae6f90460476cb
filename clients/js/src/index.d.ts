// Types of src/index.js, over the schemas generated from openapi.yaml
// (src/schema.d.ts, `npm run generate`).
import type { components } from './schema.js';

type Schemas = components['schemas'];
export type LockResponse = Schemas['LockResponse'];
export type MultiLockResponse = Schemas['MultiLockResponse'];
export type FencedResource = Schemas['FencedResource'];
export type LockInfo = Schemas['LockInfo'];
export type LockList = Schemas['LockList'];
export type ListedLock = Schemas['ListedLock'];
export type PermitResponse = Schemas['PermitResponse'];
export type SemaphoreInfo = Schemas['SemaphoreInfo'];
export type PermitInfo = Schemas['PermitInfo'];
export type ProblemType = Schemas['ProblemType'];
export type LockState = NonNullable<Schemas['Problem']['lock_state']>;

export interface ClientOptions {
  /**
   * The gateway's base URL, e.g. `http://127.0.0.1:8080`, or the URLs of
   * several gateways of one deployment: a request that gets no answer or a
   * 5xx moves the client to the next one, and the hold helpers try them in
   * turn.
   */
  url: string | string[];
  /** Sent as `Authorization: Bearer`. */
  apiKey?: string;
  /** Bound of one request in ms (an acquire's `waitMs` is added). Default 30000. */
  timeoutMs?: number;
  /** A fetch implementation; default the global `fetch`. */
  fetch?: typeof fetch;
}

export interface CallOptions {
  timeoutMs?: number;
  signal?: AbortSignal;
}

export interface AcquireOptions extends CallOptions {
  ttlMs?: Schemas['AcquireRequest']['ttl_ms'];
  waitMs?: Schemas['AcquireRequest']['wait_ms'];
  /** 22-128 characters of [A-Za-z0-9_-]; makes the acquire idempotent. */
  token?: Schemas['AcquireRequest']['token'];
  owner?: Schemas['AcquireRequest']['owner'];
  /** 'read' shares the lock with other readers; 'write' (the default) is exclusive. */
  mode?: Schemas['AcquireRequest']['mode'];
}

/** Options of acquireMulti: acquire's, without a mode (the locks are write locks). */
export interface AcquireMultiOptions extends CallOptions {
  ttlMs?: Schemas['MultiAcquireRequest']['ttl_ms'];
  waitMs?: Schemas['MultiAcquireRequest']['wait_ms'];
  /** 22-128 characters of [A-Za-z0-9_-]; makes the acquire idempotent. */
  token?: Schemas['MultiAcquireRequest']['token'];
  owner?: Schemas['MultiAcquireRequest']['owner'];
}

/** Options of acquirePermit: acquire's, with the semaphore's limit instead of a mode. */
export interface AcquirePermitOptions extends CallOptions {
  /** The number of permits, 1..256; every holder must give the same. */
  limit: Schemas['AcquirePermitRequest']['limit'];
  ttlMs?: Schemas['AcquirePermitRequest']['ttl_ms'];
  waitMs?: Schemas['AcquirePermitRequest']['wait_ms'];
  /** 22-128 characters of [A-Za-z0-9_-]; makes the acquire idempotent. */
  token?: Schemas['AcquirePermitRequest']['token'];
  owner?: Schemas['AcquirePermitRequest']['owner'];
}

export interface ExtendOptions extends CallOptions {
  ttlMs?: Schemas['ExtendRequest']['ttl_ms'];
}

export interface ListOptions extends CallOptions {
  prefix?: string;
  limit?: number;
  cursor?: string;
}

/** When an acquired or extended lock is safe until (rule 1). */
export interface Timing {
  requestId: string;
  /** performance.now() just before the request went out. */
  startedAt: number;
  /** startedAt + validity_ms: the lock is safe until performance.now() reaches it (rule 1). */
  validUntil: number;
}

/** An acquired or extended lock. */
export type Held = LockResponse & Timing;

/** The acquired or extended locks of several resources: `resources` lists each with its fencing token. */
export type HeldMulti = MultiLockResponse & Timing;

/** An acquired or extended permit of a semaphore: `limit` and `permit` (0..limit-1). */
export type HeldPermit = PermitResponse & Timing;

export interface Fields {
  /** The HTTP status; 0 when no answer came. */
  status: number;
  /** The problem type, e.g. `urn:redlockd:problem:lock-held`; '' without a problem body. */
  type: ProblemType | '';
  detail: string;
  /** The answer's X-Request-Id; '' when no answer came. */
  requestId: string;
}

export class RedlockdError extends Error implements Fields {
  status: number;
  type: ProblemType | '';
  detail: string;
  requestId: string;
}
/** 409 lock-held: another owner holds the lock. */
export class LockHeldError extends RedlockdError {
  retryAfterMs?: number;
}
/** 409 not-owner on extend or release. */
export class NotOwnerError extends RedlockdError {
  lockState?: LockState;
}
/** A 5xx, no answer or a timeout: the outcome is unknown, try again later. */
export class UnavailableError extends RedlockdError {
  retryAfterMs?: number;
}
/** Another 4xx (400, 401, 404, 413, ...): a configuration error that no retry fixes. */
export class ConfigError extends RedlockdError {}
/** 409 limit-mismatch on acquirePermit: the permits are held with another limit. */
export class LimitMismatchError extends ConfigError {
  /** The limit of the permits held. */
  limit?: number;
}
/** A hold helper lost the hold during the work or found it not held at release; `cause` is the gateway's answer, if any. */
export class LockLostError extends RedlockdError {
  cause?: RedlockdError;
}

export interface Work {
  resource: string;
  /** Pass it with every write to the storage the lock protects (rule 2). */
  fencingToken: number;
  /** Aborted (reason: a LockLostError) once the lock is lost, or when the caller's signal aborts. */
  signal: AbortSignal;
  /** The lock token: keep it out of logs and URLs. */
  token: string;
}

export interface WorkMulti {
  resources: string[];
  /** The fencing token of each resource, in the order of resources (rule 2). */
  fencingTokens: number[];
  /** Aborted (reason: a LockLostError) once the locks are lost, or when the caller's signal aborts. */
  signal: AbortSignal;
  /** The locks' token: keep it out of logs and URLs. */
  token: string;
}

export interface WorkPermit {
  /** The semaphore's name. */
  name: string;
  /** Which permit, 0..limit-1. */
  permit: number;
  limit: number;
  /** Unique to this grant across the semaphore's permits (docs/semaphores.md); fence per permit. */
  fencingToken: number;
  /** Aborted (reason: a LockLostError) once the permit is lost, or when the caller's signal aborts. */
  signal: AbortSignal;
  /** The permit's token: keep it out of logs and URLs. */
  token: string;
}

export interface WithLockOptions {
  /** Default 30000; extended every ttlMs/3. */
  ttlMs?: number;
  /** How long to wait for the lock; default 0. */
  waitMs?: number;
  owner?: string;
  /** 'read' shares the lock with other readers (fencingToken is the last writer's); default 'write'. */
  mode?: Schemas['AcquireRequest']['mode'];
  /** Default a new random token; a token derived from a retried event makes its retries idempotent. */
  token?: string;
  /** Cancels the wait, and aborts the work's signal. */
  signal?: AbortSignal;
}

/** Options of withLocks: withLock's, without a mode. */
export type WithLocksOptions = Omit<WithLockOptions, 'mode'>;

/** Options of withPermit: withLock's, with the semaphore's limit instead of a mode. */
export type WithPermitOptions = Omit<WithLockOptions, 'mode'> & {
  /** The number of permits, 1..256; every holder must give the same. */
  limit: number;
};

export class Client {
  constructor(options: ClientOptions);
  acquire(resource: string, options?: AcquireOptions): Promise<Held>;
  extend(resource: string, token: string, options?: ExtendOptions): Promise<Held>;
  release(resource: string, token: string, options?: CallOptions): Promise<void>;
  /**
   * Takes the write locks of every resource (1-16 valid names, none
   * repeated, else a ConfigError before any request), or none; errors as
   * acquire's.
   */
  acquireMulti(resources: string[], options?: AcquireMultiOptions): Promise<HeldMulti>;
  /** Extends the locks that token holds on resources, only if it holds every one of them. */
  extendMulti(resources: string[], token: string, options?: ExtendOptions): Promise<HeldMulti>;
  releaseMulti(resources: string[], token: string, options?: CallOptions): Promise<void>;
  inspect(resource: string, options?: CallOptions): Promise<LockInfo & { requestId: string }>;
  list(options?: ListOptions): Promise<LockList & { requestId: string }>;
  /**
   * Takes one of the `limit` permits of the semaphore; LockHeldError when
   * every permit stayed held for waitMs, LimitMismatchError when they are
   * held with another limit; other errors as acquire's.
   */
  acquirePermit(name: string, options: AcquirePermitOptions): Promise<HeldPermit>;
  extendPermit(name: string, token: string, options?: ExtendOptions): Promise<HeldPermit>;
  releasePermit(name: string, token: string, options?: CallOptions): Promise<void>;
  inspectSemaphore(name: string, options?: CallOptions): Promise<SemaphoreInfo & { requestId: string }>;
  /**
   * Runs fn holding the lock and returns its result. Throws LockHeldError
   * (not acquired within waitMs), UnavailableError, ConfigError, fn's own
   * error, or LockLostError when fn returned but the lock was lost meanwhile
   * or not held at release.
   */
  withLock<T>(resource: string, fn: (work: Work) => T | Promise<T>, options?: WithLockOptions): Promise<T>;
  /** withLock for the locks of several resources, taken all or none (acquireMulti). */
  withLocks<T>(resources: string[], fn: (work: WorkMulti) => T | Promise<T>, options?: WithLocksOptions): Promise<T>;
  /** withLock for one of the `limit` permits of a semaphore (acquirePermit); LimitMismatchError as acquirePermit's. */
  withPermit<T>(name: string, fn: (work: WorkPermit) => T | Promise<T>, options: WithPermitOptions): Promise<T>;
}

/** A random token: 24 characters of [A-Za-z0-9_-]. */
export function newToken(): string;
