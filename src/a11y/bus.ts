// The raw call an AT-SPI walk makes, how one fails, and the connection the walker needs
// (A11yBus): what client.ts implements and walk.ts uses, so neither imports the other back.

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

/** What the walker needs of a connection: calls with a timeout, and a direct peer connection per application. */
export interface A11yBus {
  readonly timeoutMs: number;
  /** Set once the connection is gone. */
  readonly closed: boolean;
  call<T = unknown>(msg: A11yCall, timeoutMs?: number): Promise<T>;
  peer(busName: string, mapPath: ((sessionPath: string) => string) | undefined, timeoutMs?: number): Promise<A11yBus | undefined>;
}
