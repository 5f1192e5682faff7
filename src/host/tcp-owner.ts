/**
 * Who owns the client end of a loopback TCP connection: the uid check of the OSWorld listeners
 * (src/osworld/service.ts, docs/osworld.md "Who can connect").
 *
 * The kernel is asked for the one socket with the connection's exact 4-tuple (sock_diag, through
 * the long-lived helper `drums-tcp-owner`, src/host/drums-tcp-owner.c), and only an ESTABLISHED
 * socket counts: a TIME_WAIT entry has no owner and reads as uid 0, which is how a lookup by ports
 * alone in /proc/net/tcp was fooled (a closed connection from 127.0.0.1:C left behind, and a new one
 * from 127.0.0.2:C). Why a helper that stays up: a question costs a pipe round trip (~45 µs here),
 * where reading /proc/net/tcp cost 4-14 ms of the event loop and a process per connection 2-3 ms
 * (1.6-2.6 ms of it blocking the loop in spawn); see docs/osworld.md.
 *
 * Fail-closed: a helper that is missing, exits, or does not answer within the timeout answers
 * `undefined` to every question in flight (the caller refuses), and the next question starts a new one.
 */
import { type ChildProcessByStdio, spawn } from 'node:child_process';
import type { Readable, Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';

export const TCP_OWNER_HELPER = fileURLToPath(new URL('../../.runtime/bin/drums-tcp-owner', import.meta.url));

/** The kernel's number for ESTABLISHED (include/net/tcp_states.h). */
export const TCP_ESTABLISHED = 1;

export interface TcpEnd {
  address: string;
  port: number;
}

export interface TcpOwner {
  /** The kernel's tcp state number (1 = ESTABLISHED, 6 = TIME_WAIT, 10 = LISTEN, ...). */
  state: number;
  uid: number;
}

/** Questions waiting at most this many at once; past it, more are answered `undefined` at once (a flood). */
const MAX_PENDING = 4096;

export class TcpOwners {
  private readonly _helper: string;
  private readonly _timeoutMs: number;
  private _child: ChildProcessByStdio<Writable, Readable, Readable> | undefined;
  /** Resolvers of the questions in flight, in the order they were asked (the helper answers in order). */
  private _pending: ((v: TcpOwner | undefined) => void)[] = [];
  private _buf = '';
  private _timer: NodeJS.Timeout | undefined;
  private _lastError = '';

  constructor(opts: { helper?: string; timeoutMs?: number } = {}) {
    this._helper = opts.helper ?? TCP_OWNER_HELPER;
    this._timeoutMs = opts.timeoutMs ?? 2000;
  }

  /** Why the last question got no answer (for the log), or ''. */
  get lastError(): string {
    return this._lastError;
  }

  /** The state and owner uid of the socket `client` → `server` (the client's end), or undefined if none or unknown. */
  lookup(client: TcpEnd, server: TcpEnd): Promise<TcpOwner | undefined> {
    const ok = (e: TcpEnd) => /^[0-9a-fA-F.:]{2,45}$/.test(e.address) && Number.isInteger(e.port) && e.port > 0 && e.port < 65536;
    if (!ok(client) || !ok(server)) return Promise.resolve(undefined);
    if (this._pending.length >= MAX_PENDING) {
      this._lastError = 'too many questions in flight';
      return Promise.resolve(undefined);
    }
    const child = this._start();
    if (!child) return Promise.resolve(undefined);
    return new Promise((resolve) => {
      this._pending.push(resolve);
      child.stdin.write(`${client.address} ${client.port} ${server.address} ${server.port}\n`);
      this._timer ??= setTimeout(() => this._fail('no answer within the timeout'), this._timeoutMs);
    });
  }

  /** Stops the helper; questions in flight get `undefined`. */
  close(): void {
    this._fail('closed');
  }

  private _start() {
    if (this._child) return this._child;
    let child: ChildProcessByStdio<Writable, Readable, Readable>;
    try {
      child = spawn(this._helper, [], { stdio: ['pipe', 'pipe', 'pipe'] });
    } catch (e) {
      this._lastError = `cannot start ${this._helper}: ${(e as Error).message}`;
      return undefined;
    }
    this._child = child;
    this._buf = '';
    let stderr = '';
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (d: string) => {
      if (this._child !== child) return;
      this._buf += d;
      let nl = this._buf.indexOf('\n');
      while (nl >= 0) {
        this._answer(this._buf.slice(0, nl));
        this._buf = this._buf.slice(nl + 1);
        nl = this._buf.indexOf('\n');
      }
      if (this._buf.length > 1024) this._fail('an answer line too long');
    });
    child.stderr.on('data', (d: Buffer) => {
      if (stderr.length < 1000) stderr += d.toString();
    });
    child.stdin.on('error', () => {});
    child.on('error', (e) => {
      if (this._child === child) this._fail(`${this._helper}: ${e.message} (scripts/setup.sh builds it)`);
    });
    child.on('exit', (code, signal) => {
      if (this._child === child) this._fail(stderr.trim() || `${this._helper} exited (${code ?? signal})`);
    });
    // The helper must not keep the daemon (or a test) alive; it exits at the end of its input.
    child.unref();
    for (const s of [child.stdin, child.stdout, child.stderr] as unknown as { unref?: () => void }[]) s.unref?.();
    return child;
  }

  private _answer(line: string): void {
    const resolve = this._pending.shift();
    if (!resolve) {
      this._fail(`an answer nobody asked for: '${line.slice(0, 80)}'`);
      return;
    }
    clearTimeout(this._timer);
    this._timer = this._pending.length ? setTimeout(() => this._fail('no answer within the timeout'), this._timeoutMs) : undefined;
    const m = /^(\d{1,3}) (\d{1,10})$/.exec(line);
    if (!m && line !== 'none') this._lastError = `lookup failed: ${line.slice(0, 80)}`;
    resolve(m ? { state: Number(m[1]), uid: Number(m[2]) } : undefined);
  }

  /** Every question in flight gets `undefined` and the helper is stopped; the next question starts a new one. */
  private _fail(why: string): void {
    this._lastError = why;
    clearTimeout(this._timer);
    this._timer = undefined;
    const child = this._child;
    this._child = undefined;
    if (child) {
      child.stdin.end();
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    }
    const pending = this._pending;
    this._pending = [];
    for (const r of pending) r(undefined);
  }
}
