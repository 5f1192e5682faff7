// The raw call an AT-SPI walk makes, how one fails, and the connection the walker needs
// (A11yBus): what client.ts implements and walk.ts uses, so neither imports the other back.

import type { Duplex } from 'node:stream';

export type A11yCall = {
  destination: string;
  path: string;
  interface: string;
  member: string;
  signature?: string;
  body?: unknown[];
};

/** How a raw call failed; the walker decides what each means. */
export class A11yCallError extends Error {
  readonly kind: 'timeout' | 'closed' | 'dbus';
  readonly dbusName: string | undefined;

  constructor(kind: 'timeout' | 'closed' | 'dbus', message: string, dbusName?: string) {
    super(message);
    this.name = 'A11yCallError';
    this.kind = kind;
    this.dbusName = dbusName;
  }
}

export type DbusErrorLike = { code?: string; dbusName?: string; message?: string };

export function classify(err: unknown): A11yCallError {
  const e = (err ?? {}) as DbusErrorLike;
  if (e.code === 'ETIMEDOUT') return new A11yCallError('timeout', String(e.message));
  if (e.code === 'ECONNCLOSED') return new A11yCallError('closed', String(e.message));
  if (e.dbusName) return new A11yCallError('dbus', String(e.message), e.dbusName);
  return new A11yCallError('closed', err instanceof Error ? err.message : String(err));
}

/**
 * How to reach an application's own socket (`Application.GetApplicationBusAddress`), whose path is in the
 * session's view: `mapPath` turns it into a host path this process connects to; `open` connects it some other way
 * (e.g. as the session's desktop user, for a session in its own user namespace) and may refuse (reject).
 * `authUid` is the uid to claim in D-Bus EXTERNAL auth on a socket `open` returns.
 */
export type DirectHow = {
  mapPath?: (sessionPath: string) => string;
  open?: (sessionPath: string) => Promise<Duplex>;
  authUid?: number;
};

/** What the walker needs of a connection: calls with a timeout, and a direct peer connection per application. */
export interface A11yBus {
  readonly timeoutMs: number;
  /** Set once the connection is gone. */
  readonly closed: boolean;
  call<T = unknown>(msg: A11yCall, timeoutMs?: number): Promise<T>;
  peer(busName: string, how: DirectHow | undefined, timeoutMs?: number): Promise<A11yBus | undefined>;
}
