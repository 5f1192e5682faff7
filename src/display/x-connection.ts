/**
 * One X connection to one session's X server, reached through a path socket on the host: the
 * requests (promise-wrapped, each with a deadline), the atom cache, the two locks, and the XTEST,
 * XFIXES and MIT-SHM handles. A dead server rejects every pending and later call with
 * `display_closed` and never hangs or crashes the caller.
 *
 * Everything else in display/ (pointer, keyboard, screenshot, frames, windows) is written over
 * this class; XDisplay composes them into the facade the rest of the daemon uses.
 *
 * Events: `xevent` (every X event), `xerror` (a protocol error of a request sent without a
 * callback, or a throwing event listener), `closed` (reason).
 */
import { EventEmitter } from 'node:events';
import * as fs from 'node:fs';
import { createRequire } from 'node:module';
import * as net from 'node:net';
import type { Duplex } from 'node:stream';
import x11 from 'x11';
import type { XClient, XDisplayInfo, XEvent, XProtocolError } from 'x11';
import { DisplayError } from './errors.ts';
import { cookieBytes, XAUTH_NAME } from './xauth.ts';

const require = createRequire(import.meta.url);

interface FdPass {
  available(): boolean;
  connect(path: string): (net.Socket & { _fdCapable?: boolean }) | null;
}

let fdpassModule: FdPass | null | undefined;
function fdpass(): FdPass | null {
  if (fdpassModule === undefined) {
    try {
      // Internal module of x11 (pinned to 4.2.2): a unix socket that can carry SCM_RIGHTS,
      // needed for MIT-SHM AttachFd across mount namespaces.
      fdpassModule = require('x11/lib/fdpass') as FdPass;
    } catch {
      fdpassModule = null;
    }
  }
  return fdpassModule;
}

export const DEFAULT_TIMEOUT_MS = 5_000;

/** The protocol's largest connection setup reply (its length is a u16 count of 4-byte units after an 8-byte header). */
export const SETUP_BUDGET = 8 + 4 * 0xffff;
/** What a reply may carry beyond a GetImage of the whole screen (properties, keymaps, window trees are far smaller). */
export const REPLY_SLACK = 1 << 20;
/** Budget of one reply when the caller names none: a GetImage of the largest screen a session may have (7680x4320, 4 bytes a pixel). */
export const MAX_REPLY_BYTES = 7680 * 4320 * 4 + REPLY_SLACK;

/** The reply budget for a screen: a GetImage of all of it, 4 bytes a pixel, and the slack. */
export function replyBudget(width: number, height: number): number {
  return width * height * 4 + REPLY_SLACK;
}

export interface XConnectionOpenOptions {
  /** Deadline for every X request (default 5000). */
  timeoutMs?: number;
  /** Deadline for the whole open(), keymap included (default: timeoutMs). */
  openTimeoutMs?: number;
  /** Try MIT-SHM (default true). false forces core GetImage. */
  shm?: boolean;
  /**
   * Runs on the connected socket before a byte is sent (within the open deadline); a rejection fails the open with
   * `connect_failed`. The daemon checks there that the socket is served by the session's own X server.
   */
  verify?: (sock: net.Socket) => Promise<void>;
  /**
   * The server's MIT-MAGIC-COOKIE-1 (32 hex digits), sent in the connection setup; without it the setup carries no
   * authorization (a server started with `-auth` then refuses it).
   */
  cookie?: string;
  /**
   * The most bytes one reply or event may claim (default: a GetImage of the server's screen plus REPLY_SLACK, at most
   * MAX_REPLY_BYTES). The server may be one a session runs: a larger claim closes the connection, failing the pending
   * requests with `display_closed`, instead of making the daemon buffer it.
   */
  maxReplyBytes?: number;
}

/** The MIT-SHM segment the server writes GetImage replies into; read back with pread. */
export interface ShmSegment {
  ext: any;
  xid: number;
  fd: number;
  size: number;
}

/** XTEST FakeInput event types. */
export const FAKE = { keyPress: 2, keyRelease: 3, buttonPress: 4, buttonRelease: 5, motion: 6 } as const;

interface Pending {
  reject(err: Error): void;
  timer: NodeJS.Timeout;
}

type Callback<T> = (err: XProtocolError | null | undefined, result: T) => unknown;

/** Promise chain used as a mutex. */
export class Lock {
  private _tail: Promise<unknown> = Promise.resolve();
  run<T>(fn: () => Promise<T>): Promise<T> {
    const result = this._tail.then(fn, fn);
    this._tail = result.then(
      () => undefined,
      () => undefined,
    );
    return result;
  }
}

export class XConnection extends EventEmitter {
  readonly socketPath: string;
  readonly timeoutMs: number;
  /** Screen geometry of screen 0. */
  readonly root: number;
  readonly width: number;
  readonly height: number;
  readonly depth: number;
  /** The x11 client: raw requests go through request() so they get a deadline. */
  readonly x: XClient;
  readonly info: XDisplayInfo;
  readonly xtest: any;
  /** XFIXES (cursor image), or null when the server lacks it. */
  readonly fixes: any;
  /** Serialises input (the keymap trick in input.ts needs it). */
  readonly inputLock = new Lock();
  /** Serialises use of the single SHM segment. */
  readonly shmLock = new Lock();

  private _shm: ShmSegment | null = null;
  private readonly _atoms = new Map<string, number>();
  private _closed = false;
  private _closeReason = '';
  private readonly _pending = new Set<Pending>();

  private constructor(init: { socketPath: string; timeoutMs: number; client: XClient; info: XDisplayInfo; xtest: any; fixes: any }) {
    super();
    this.socketPath = init.socketPath;
    this.timeoutMs = init.timeoutMs;
    this.x = init.client;
    this.info = init.info;
    const scr = init.info.screen[0];
    this.root = scr.root;
    this.width = scr.pixel_width;
    this.height = scr.pixel_height;
    this.depth = scr.root_depth;
    this.xtest = init.xtest;
    this.fixes = init.fixes;
  }

  /**
   * Connect to the X server listening on `socketPath` (a unix path socket, e.g.
   * `/var/lib/drums/sessions/<id>/run/x11/X0`). `init` runs inside the same deadline before the
   * connection is returned (XDisplay loads the keymap there). Rejects with `connect_failed` or
   * `display_timeout`.
   */
  static async open(socketPath: string, options: XConnectionOpenOptions & { init?: (c: XConnection) => Promise<void> } = {}): Promise<XConnection> {
    const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    const openTimeoutMs = options.openTimeoutMs ?? timeoutMs;
    const wantShm = options.shm !== false;
    let stream: (net.Socket & { _fdCapable?: boolean }) | null = null;
    let conn: XConnection | null = null;
    let timer: NodeJS.Timeout | undefined;
    let failOpen: (err: Error) => void = () => {};
    // Raced against every step of the open: the deadline, or a server that overran the reply budget (meterReplies).
    const deadline = new Promise<never>((_, reject) => {
      failOpen = reject;
      timer = setTimeout(
        () => reject(new DisplayError('display_timeout', `opening X display at ${socketPath} timed out after ${openTimeoutMs} ms`, { socketPath })),
        openTimeoutMs,
      );
    });
    // Errors that arrive after open() settled must not become unhandled.
    deadline.catch(() => {});
    try {
      stream = await Promise.race([connectStream(socketPath, wantShm), deadline]);
      const s = stream;
      if (options.verify) {
        const verify = options.verify;
        await Promise.race([
          verify(s).catch((err: Error) => {
            throw new DisplayError('connect_failed', `X socket ${socketPath} refused: ${err.message}`, { socketPath });
          }),
          deadline,
        ]);
      }
      const meter: ReplyMeter = {
        setup: true,
        used: 0,
        limit: SETUP_BUDGET,
        onOver: (err) => failOpen(new DisplayError('connect_failed', `cannot open X display at ${socketPath}: ${err.message}`, { socketPath })),
      };
      const { c, info } = await Promise.race([handshake(s, options.cookie, meter), deadline]);
      // The screen a server claims sizes the daemon's buffers (the SHM segment, screenshots): never beyond the budget.
      const scr = info.screen[0];
      const budget = Math.min(options.maxReplyBytes ?? replyBudget(scr?.pixel_width ?? 0, scr?.pixel_height ?? 0), MAX_REPLY_BYTES);
      if (!scr || replyBudget(scr.pixel_width, scr.pixel_height) > budget)
        throw new DisplayError(
          'connect_failed',
          `X server at ${socketPath} claims a screen of ${scr ? `${scr.pixel_width}x${scr.pixel_height}` : 'nothing'}, larger than the ${budget}-byte reply budget`,
          { socketPath },
        );
      meter.setup = false;
      meter.limit = budget;
      const ext = (name: string) => Promise.race([requireExt(c, name), deadline]);
      const xtest = await ext('xtest').catch((err: Error) => {
        throw new DisplayError('unsupported', `X server at ${socketPath} lacks XTEST: ${err.message}`);
      });
      const fixes = await ext('fixes').catch(() => null);
      conn = new XConnection({ socketPath, timeoutMs, client: c, info, xtest, fixes });
      conn._wire(s);
      if (wantShm && s._fdCapable) {
        const shmExt = await ext('shm').catch(() => null);
        if (shmExt) await Promise.race([conn._setupShm(shmExt), deadline]).catch(() => {});
      }
      if (options.init) await Promise.race([options.init(conn), deadline]);
      // PropertyChange on the root drives waitForWindow (_NET_CLIENT_LIST changes).
      c.ChangeWindowAttributes(conn.root, { eventMask: x11.eventMask.PropertyChange });
      await Promise.race([conn.sync(), deadline]);
      return conn;
    } catch (err) {
      if (conn) conn._markClosed('open failed');
      try {
        stream?.destroy();
      } catch {
        /* ignore */
      }
      if (err instanceof DisplayError) throw err;
      throw new DisplayError('connect_failed', `cannot open X display at ${socketPath}: ${(err as Error).message}`, { socketPath }, err);
    } finally {
      clearTimeout(timer);
    }
  }

  get closed(): boolean {
    return this._closed;
  }

  /** The MIT-SHM segment, or null (no SHM, or closed): screenshots then use core GetImage. */
  get shm(): ShmSegment | null {
    return this._shm;
  }

  /** Attach lifecycle listeners once the object exists. */
  private _wire(stream: Duplex): void {
    const c = this.x;
    c.removeAllListeners('error');
    c.on('error', (err: XProtocolError) => {
      if (typeof err?.error === 'number') {
        // A protocol error for a request sent without a callback (FakeInput, ChangeKeyboardMapping...).
        this.emit('xerror', err);
        return;
      }
      this._markClosed(`connection error: ${err?.message ?? err}`);
    });
    c.on('end', () => this._markClosed('X server closed the connection'));
    stream.on('end', () => this._markClosed('X server closed the connection'));
    stream.on('close', () => this._markClosed('connection closed'));
    stream.on('error', (err: Error) => this._markClosed(`connection error: ${err.message}`));
    c.on('event', (ev: XEvent) => {
      try {
        this.emit('xevent', ev);
      } catch (err) {
        // An event consumer must never take down the parser or the process.
        this.emit('xerror', err);
      }
    });
  }

  private async _setupShm(ext: any): Promise<void> {
    const usable = await this.request<boolean>('MIT-SHM probe', (cb) => ext.usable(cb));
    if (!usable || !ext.provider) return;
    const size = this.width * this.height * 4;
    const seg = ext.provider.create(size) as { fd: number; size: number };
    const xid = this.x.AllocID();
    try {
      await this.request<void>('ShmAttachFd', (cb) => ext.AttachFd(xid, seg.fd, false, cb));
    } catch (err) {
      try {
        fs.closeSync(seg.fd);
      } catch {
        /* ignore */
      }
      throw err;
    }
    this._shm = { ext, xid, fd: seg.fd, size };
  }

  /**
   * Issue one X request with a deadline. `issue` gets a callback in x11's convention; the wrapper
   * returns true from it so protocol errors are never re-emitted as 'error'.
   */
  request<T>(label: string, issue: (cb: Callback<T>) => void, timeoutMs: number = this.timeoutMs): Promise<T> {
    if (this._closed) return Promise.reject(this._closedError(label));
    return new Promise<T>((resolve, reject) => {
      let done = false;
      const entry: Pending = {
        reject: (err: Error) => {
          if (!done) {
            done = true;
            clearTimeout(entry.timer);
            reject(err);
          }
        },
        timer: setTimeout(() => {
          if (done) return;
          done = true;
          this._pending.delete(entry);
          reject(new DisplayError('display_timeout', `X request ${label} timed out after ${timeoutMs} ms`, { request: label, socketPath: this.socketPath }));
        }, timeoutMs),
      };
      this._pending.add(entry);
      try {
        issue((err, result) => {
          if (done) return true;
          done = true;
          clearTimeout(entry.timer);
          this._pending.delete(entry);
          if (err) reject(xError(label, err));
          else resolve(result);
          return true;
        });
      } catch (err) {
        this._pending.delete(entry);
        entry.reject(
          this._closed
            ? this._closedError(label)
            : new DisplayError('x_error', `X request ${label} failed: ${(err as Error).message}`, { request: label }, err),
        );
      }
    });
  }

  /** Round trip: resolves once the server has processed every request sent so far. */
  sync(): Promise<void> {
    return this.request<unknown>('GetInputFocus', (cb) => this.x.GetInputFocus(cb)).then(() => undefined);
  }

  /** Throw display_closed if the connection is gone (for fire-and-forget requests). */
  assertOpen(what: string): void {
    if (this._closed) throw this._closedError(what);
  }

  /** One XTEST event, fire and forget (callers end with sync()). Motion is absolute on the root. */
  fakeInput(type: (typeof FAKE)[keyof typeof FAKE], detail: number, x = 0, y = 0): void {
    this.assertOpen('FakeInput');
    this.xtest.FakeInput(type, detail, 0, type === FAKE.motion ? this.root : 0, x, y);
  }

  /** Intern an atom (cached). */
  async atom(name: string): Promise<number> {
    const cached = this._atoms.get(name) ?? this.x.atoms[name];
    if (cached !== undefined) return cached;
    const atom = await this.request<number>(`InternAtom(${name})`, (cb) => this.x.InternAtom(false, name, cb));
    this._atoms.set(name, atom);
    return atom;
  }

  private _closedError(what: string): DisplayError {
    return new DisplayError('display_closed', `X display ${this.socketPath} is closed (${this._closeReason}); ${what} not sent`, {
      socketPath: this.socketPath,
      reason: this._closeReason,
    });
  }

  private _markClosed(reason: string): void {
    if (this._closed) return;
    this._closed = true;
    this._closeReason = reason;
    const err = new DisplayError('display_closed', `X display ${this.socketPath} closed: ${reason}`, { socketPath: this.socketPath, reason });
    for (const p of this._pending) p.reject(err);
    this._pending.clear();
    if (this._shm) {
      try {
        fs.closeSync(this._shm.fd);
      } catch {
        /* ignore */
      }
      this._shm = null;
    }
    try {
      this.x.stream.destroy();
    } catch {
      /* ignore */
    }
    this.emit('closed', reason);
  }

  /** Close the connection now. Pending calls reject with `display_closed`. Idempotent. */
  close(): void {
    if (this._closed) return;
    try {
      this.x.terminate();
    } catch {
      /* ignore */
    }
    this._markClosed('closed by client');
  }
}

function xError(label: string, err: XProtocolError): DisplayError {
  if (err instanceof DisplayError) return err;
  return new DisplayError('x_error', `X request ${label} failed: ${err.message || 'X error ' + err.error}`, {
    request: label,
    xError: err.error,
    badValue: err.badParam,
    majorOpcode: err.majorOpcode,
    minorOpcode: err.minorOpcode,
  });
}

/** Open the unix socket, fd-capable if possible (MIT-SHM), else a plain net socket. */
function connectStream(socketPath: string, wantFd: boolean): Promise<net.Socket & { _fdCapable?: boolean }> {
  const attempt = (fdCapable: boolean) =>
    new Promise<net.Socket & { _fdCapable?: boolean }>((resolve, reject) => {
      let sock: (net.Socket & { _fdCapable?: boolean }) | null = null;
      if (fdCapable) {
        try {
          sock = fdpass()?.connect(socketPath) ?? null;
        } catch {
          sock = null;
        }
        if (!sock) {
          reject(new Error('fd passing unavailable'));
          return;
        }
      } else {
        sock = net.createConnection(socketPath);
      }
      const s = sock;
      const onError = (err: Error) => {
        s.removeListener('connect', onConnect);
        s.destroy();
        reject(err);
      };
      const onConnect = () => {
        s.removeListener('error', onError);
        resolve(s);
      };
      s.once('error', onError);
      s.once('connect', onConnect);
    });
  if (!wantFd) return attempt(false);
  return attempt(true).catch((err: NodeJS.ErrnoException) => {
    // A missing socket fails the same way either way: report it instead of retrying.
    if (err.code === 'ENOENT') throw new Error(`no X socket at ${socketPath}`);
    return attempt(false);
  });
}

/** The last of the atoms the X protocol predefines (XA_LAST_PREDEFINED); every other atom's id is the server's own. */
const LAST_PREDEFINED_ATOM = 68;

/**
 * The x11 package starts every client with one module-wide atom table and writes each
 * InternAtom reply into it, so a later client on another X server would be answered from that
 * table with the first server's id for the same name: `_NET_CLIENT_LIST` read under another
 * session's atom id finds nothing (a session showed no windows at all while its X server had
 * one). Each connection gets tables of its own, holding only the predefined atoms.
 */
function ownAtomTables(c: XClient): void {
  const x = c as unknown as { atoms: Record<string, number>; atom_names: Record<number, string> };
  x.atoms = Object.fromEntries(Object.entries(x.atoms).filter(([, id]) => id <= LAST_PREDEFINED_ATOM));
  x.atom_names = Object.fromEntries(Object.entries(x.atom_names).filter(([id]) => Number(id) <= LAST_PREDEFINED_ATOM));
}

/**
 * How much the x11 parser may read from the server: during the setup, all of it together (the protocol's maximum
 * setup reply); after it, each packet. The parser allocates each packet whole before its bytes arrive, from the length
 * the server claims (up to 16 GiB for a reply): a server a session runs must not size the daemon's memory.
 */
interface ReplyMeter {
  setup: boolean;
  used: number;
  limit: number;
  /** Told once when a read goes beyond the budget (besides the client's 'error'). */
  onOver?: (err: Error) => void;
}

/**
 * Puts `meter` in front of every read of the x11 client's parser (x11 4.2.2's FrameBuffer.get, the one place it
 * allocates for what the server sends). A read beyond it is never queued: the parser stops, the socket is destroyed and
 * the client emits an error (the handshake rejects with it; an open connection closes with it as the reason).
 */
function meterReplies(c: XClient, stream: net.Socket, meter: ReplyMeter): void {
  const ps = (c as unknown as { pack_stream?: { get(n: number, cb: (b: Buffer) => void): void } }).pack_stream;
  if (typeof ps?.get !== 'function') {
    // Another x11 than the pinned one: refuse rather than read unmetered.
    stream.destroy();
    c.emit('error', new Error('x11 has no FrameBuffer.get to meter (x11 is pinned to 4.2.2)'));
    return;
  }
  const get = ps.get.bind(ps);
  let over = false;
  ps.get = (n, cb) => {
    if (over) return;
    const claim = meter.setup ? meter.used + n : n;
    if (claim > meter.limit) {
      over = true;
      stream.destroy();
      const budget = meter.setup ? `the connection setup's budget of ${meter.limit} bytes` : `the reply budget of ${meter.limit} bytes`;
      const err = new Error(`the X server claimed a packet of ${n} bytes, beyond ${budget}; the connection is closed`);
      try {
        meter.onOver?.(err);
        c.emit('error', err);
      } catch {
        /* a listener's throw must not reach the parser */
      }
      return;
    }
    if (meter.setup) meter.used += n;
    get(n, cb);
  };
}

function handshake(stream: net.Socket, cookie: string | undefined, meter: ReplyMeter): Promise<{ c: XClient; info: XDisplayInfo }> {
  return new Promise((resolve, reject) => {
    let settled = false;
    // x11 writes the name and data as latin1 strings: the cookie's 16 bytes, one character each.
    const auth = cookie ? { name: XAUTH_NAME, data: cookieBytes(cookie).toString('latin1') } : { name: '', data: '' };
    // Until _wire() replaces it, an 'error' listener keeps a failing handshake from throwing.
    const c = x11.createClient({ stream, auth }, (err, info) => {
      if (settled) return;
      settled = true;
      if (err) reject(err);
      else {
        ownAtomTables(c);
        resolve({ c, info });
      }
    });
    // x11 builds its parser in init(), which createClient defers to a microtask for an open stream: the meter goes
    // on right after it, before a byte is read (init attaches the socket's 'data' listener).
    const inst = c as unknown as { init(s: net.Socket): void };
    const init = inst.init;
    inst.init = (st: net.Socket) => {
      init.call(c, st);
      meterReplies(c, stream, meter);
    };
    c.on('error', (err: Error) => {
      if (!settled) {
        settled = true;
        reject(err);
      }
    });
  });
}

function requireExt(c: XClient, name: string): Promise<any> {
  return new Promise((resolve, reject) => {
    try {
      c.require(name, (err, ext) => (err ? reject(err) : resolve(ext)));
    } catch (err) {
      reject(err);
    }
  });
}
