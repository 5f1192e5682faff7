// A raw AT-SPI client over one D-Bus connection (dbus-native, low-level `invoke`, no proxy objects).
//
// Every call carries its own timeout, so a hung peer costs at most that long. Connection failures become
// `A11yError('a11y_unavailable')`; nothing here throws from an event handler, so a dead bus cannot take the
// process down.

import { stat } from 'node:fs/promises';
import type { Duplex } from 'node:stream';
import { createClient, type MessageBus } from 'dbus-native';
import { A11yError } from './errors.ts';
import type { WalkOptions, WalkResult, A11yNode } from './types.ts';
import { type A11yBus, type A11yCall, A11yCallError, classify, type DbusErrorLike, type DirectHow } from './bus.ts';
import { walk } from './walk.ts';

export { A11yCallError, type A11yCall, type DirectHow } from './bus.ts';

export const DEFAULT_CALL_TIMEOUT_MS = 1000;
/**
 * The largest D-Bus message read from a session's bus or an application's socket (both the session's): dbus-native
 * refuses a message declaring more before buffering it, and the connection closes (the walk then fails as
 * `a11y_unavailable`, or an application's subtree as `gone`). AT-SPI's largest reply is one node's whole text; 32
 * MiB is a long book, and a quarter of D-Bus's own 128 MiB default.
 */
export const A11Y_MAX_MESSAGE_BYTES = 32 * 1024 * 1024;
/** How long an application whose own socket could not be used is read over the bus before its socket is tried again. */
export const PEER_RETRY_MS = 30_000;

export type A11yConnectOptions = {
  /** Bounds the connect handshake and is the default per-call timeout. Default 1000 ms. */
  timeoutMs?: number;
  /** A peer-to-peer connection (an application's own socket): no bus, so no Hello. */
  peer?: boolean;
  /**
   * Opens the connected socket instead of connecting to the path as this process (e.g. a socket connected as
   * another uid, for a bus inside a user namespace where this process is unmapped). Its failure is
   * `a11y_unavailable`.
   */
  open?: () => Promise<Duplex>;
  /** The uid to claim in D-Bus EXTERNAL auth (the peer's view of the socket's owner); default this process's. */
  authUid?: number;
  /** Refuse (and close on) a message declaring more than this; default A11Y_MAX_MESSAGE_BYTES. */
  maxMessageBytes?: number;
};

/** What a signal handler sees of a D-Bus signal: who sent it and where, not its body. */
export type A11ySignal = { sender: string; path: string; interface: string; member: string; body: unknown[] };

/** `unix:path=/x/y,guid=…` → connection options; anything without `=` is taken as a socket path. */
function connectionTarget(addressOrPath: string): { socket: string } | { busAddress: string } {
  if (addressOrPath.includes('=')) return { busAddress: addressOrPath };
  return { socket: addressOrPath };
}

/** The path in a `unix:path=` address, or undefined for other transports. */
export function socketPathFromAddress(address: string): string | undefined {
  for (const part of address.split(';')) {
    const [transport, rest] = part.split(/:(.*)/s, 2);
    if (transport !== 'unix' || rest === undefined) continue;
    for (const kv of rest.split(',')) {
      const eq = kv.indexOf('=');
      if (kv.slice(0, eq) === 'path') return decodeURIComponent(kv.slice(eq + 1));
    }
  }
  return undefined;
}

/**
 * dbus-native claims `process.getuid()` in `AUTH EXTERNAL`; a server checks the claim against the socket's
 * credentials, so a socket connected as another uid must claim that one. Rewrites the one AUTH EXTERNAL line.
 */
function claimUid(stream: Duplex, uid: number): void {
  const write = stream.write;
  const hex = Buffer.from(String(uid), 'ascii').toString('hex');
  stream.write = function (this: Duplex, chunk: unknown, ...rest: unknown[]) {
    if (typeof chunk === 'string' && chunk.startsWith('AUTH EXTERNAL ')) {
      stream.write = write;
      chunk = `AUTH EXTERNAL ${hex}\r\n`;
    }
    return (write as (...a: unknown[]) => boolean).call(this, chunk, ...rest);
  } as Duplex['write'];
}

export class A11yClient implements A11yBus {
  readonly address: string;
  readonly timeoutMs: number;
  private readonly _bus: MessageBus;
  private _closedReason: string | undefined;
  /** Peer-to-peer connections to applications, by their unique name on this bus. */
  private readonly _peers = new Map<string, Promise<A11yClient | undefined>>();

  private constructor(address: string, bus: MessageBus, timeoutMs: number) {
    this.address = address;
    this._bus = bus;
    this.timeoutMs = timeoutMs;
  }

  /**
   * Connect to an AT-SPI bus, given a D-Bus address (`unix:path=…`) or a host path to its unix socket.
   * Rejects with `A11yError('a11y_unavailable')` when the bus cannot be reached or does not answer Hello
   * within `timeoutMs`.
   */
  static async connect(busAddressOrSocketPath: string, options: A11yConnectOptions = {}): Promise<A11yClient> {
    const timeoutMs = options.timeoutMs ?? DEFAULT_CALL_TIMEOUT_MS;
    const target = connectionTarget(busAddressOrSocketPath);
    const socketPath = 'socket' in target ? target.socket : socketPathFromAddress(target.busAddress);
    let opened: Duplex | undefined;
    if (options.open) {
      try {
        opened = await options.open();
      } catch (err) {
        throw new A11yError('a11y_unavailable', `cannot connect to AT-SPI bus ${busAddressOrSocketPath}: ${(err as Error).message}`, { cause: err });
      }
      if (options.authUid !== undefined) claimUid(opened, options.authUid);
    } else if (socketPath !== undefined) {
      // Note: checked first so a missing socket fails fast and says so.
      const st = await stat(socketPath).catch(() => undefined);
      if (!st?.isSocket()) {
        throw new A11yError('a11y_unavailable', `no AT-SPI bus socket at ${socketPath}`);
      }
    }
    let bus: MessageBus;
    try {
      // direct: we send Hello ourselves; dbus-native's own Hello throws from a callback if it fails.
      bus = createClient({
        ...(opened ? { stream: opened } : target),
        direct: true,
        timeout: timeoutMs,
        fdTransport: false,
        maxMessageSize: options.maxMessageBytes ?? A11Y_MAX_MESSAGE_BYTES,
      });
    } catch (err) {
      opened?.destroy();
      throw new A11yError('a11y_bad_address', `cannot use AT-SPI bus address ${busAddressOrSocketPath}: ${(err as Error).message}`, { cause: err });
    }
    const client = new A11yClient(busAddressOrSocketPath, bus, timeoutMs);
    let failConnect: (err: Error) => void = () => {};
    const connectFailed = new Promise<never>((_, reject) => {
      failConnect = reject;
    });
    connectFailed.catch(() => {});
    bus.connection.on('error', (err: Error) => {
      client._closedReason ??= err.message;
      failConnect(err);
    });
    bus.connection.on('close', () => {
      client._closedReason ??= 'connection closed';
      failConnect(new Error(client._closedReason));
    });
    bus.connection.on('end', () => {
      client._closedReason ??= 'connection closed by the bus';
    });
    try {
      if (options.peer) {
        let timer: NodeJS.Timeout | undefined;
        await Promise.race([
          new Promise<void>((resolve) => bus.connection.once('connect', () => resolve())),
          connectFailed,
          new Promise<never>((_, reject) => {
            timer = setTimeout(() => reject(Object.assign(new Error('timeout'), { code: 'ETIMEDOUT' })), timeoutMs);
          }),
        ]).finally(() => clearTimeout(timer));
      } else {
        const name = await Promise.race([bus.invokeDbus({ member: 'Hello' }, { timeout: timeoutMs }), connectFailed]);
        bus.name = String(name);
      }
    } catch (err) {
      await client.close();
      const why = (err as DbusErrorLike).code === 'ETIMEDOUT' ? `no answer within ${timeoutMs} ms` : (err as Error).message;
      throw new A11yError('a11y_unavailable', `cannot connect to AT-SPI bus ${busAddressOrSocketPath}: ${why}`, { cause: err });
    }
    return client;
  }

  get closed(): boolean {
    return this._closedReason !== undefined;
  }

  /** One raw method call with a timeout. Rejects with `A11yCallError`. */
  async call<T = unknown>(msg: A11yCall, timeoutMs: number = this.timeoutMs): Promise<T> {
    if (this._closedReason !== undefined) throw new A11yCallError('closed', this._closedReason);
    // Note: the callback form; dbus-native's promise form captures a stack trace per call (~5% of a walk).
    return new Promise<T>((resolve, reject) => {
      this._bus.invoke({ ...msg }, { timeout: timeoutMs }, (err, ...values) => {
        if (err) reject(classify(err));
        else resolve((values.length <= 1 ? values[0] : values) as T);
      });
    });
  }

  /**
   * Calls `handler` for every signal this connection receives (after an AddMatch), and `onClose` once when it
   * closes. Both are guarded: what they throw is dropped, never thrown from the socket's event handler.
   */
  onSignal(handler: (signal: A11ySignal) => void, onClose?: (why: string) => void): void {
    this._bus.connection.on('message', (msg: Record<string, unknown>) => {
      if (msg.type !== 4) return; // constants.messageType.signal
      try {
        handler({
          sender: String(msg.sender ?? ''),
          path: String(msg.path ?? ''),
          interface: String(msg.interface ?? ''),
          member: String(msg.member ?? ''),
          body: Array.isArray(msg.body) ? msg.body : [],
        });
      } catch {
        // a handler's bug must not reach the socket's event loop
      }
    });
    if (onClose) {
      let done = false;
      const closed = () => {
        if (done) return;
        done = true;
        try {
          onClose(this._closedReason ?? 'connection closed');
        } catch {
          // as above
        }
      };
      this._bus.connection.on('close', closed);
      this._bus.connection.on('error', closed);
    }
  }

  /** Walk the accessibility tree from the registry's desktop. See `WalkOptions`. */
  walk(options: WalkOptions = {}): Promise<WalkResult> {
    return walk(this, options);
  }

  /** `walk()` without the stats. */
  async walkTree(options: WalkOptions = {}): Promise<A11yNode> {
    return (await this.walk(options)).tree;
  }

  /**
   * A direct connection to one application (`Application.GetApplicationBusAddress`, a socket the app's
   * atk-bridge serves in its XDG_RUNTIME_DIR), or undefined when it has none or it cannot be reached.
   * Cached per unique name; `how` says how to reach the app's view of the path (DirectHow).
   */
  peer(busName: string, how: DirectHow | undefined, timeoutMs: number = this.timeoutMs): Promise<A11yClient | undefined> {
    const opening = this._peers.get(busName) ?? this._openPeer(busName, how, timeoutMs);
    // A walk waits for the peer at most timeoutMs, then reads the app over the bus; the opening goes on, and the
    // next walk uses it if it succeeds.
    let timer: NodeJS.Timeout | undefined;
    return Promise.race([
      opening,
      new Promise<undefined>((resolve) => {
        timer = setTimeout(() => resolve(undefined), timeoutMs);
      }),
    ]).finally(() => clearTimeout(timer));
  }

  private _openPeer(busName: string, how: DirectHow | undefined, timeoutMs: number): Promise<A11yClient | undefined> {
    const opening = (async () => {
      try {
        const address = await this.call<string>(
          {
            destination: busName,
            path: '/org/a11y/atspi/accessible/root',
            interface: 'org.a11y.atspi.Application',
            member: 'GetApplicationBusAddress',
          },
          timeoutMs,
        );
        const path = typeof address === 'string' ? socketPathFromAddress(address) : undefined;
        if (path === undefined) return undefined;
        const open = how?.open;
        const peer = open
          ? await A11yClient.connect(path, {
              timeoutMs,
              peer: true,
              open: () => open(path),
              ...(how.authUid !== undefined ? { authUid: how.authUid } : {}),
            })
          : await A11yClient.connect(how?.mapPath ? how.mapPath(path) : path, { timeoutMs, peer: true });
        if (this.closed) {
          await peer.close();
          return undefined;
        }
        // A socket can accept the connection and then refuse the auth (an application admits only its own uid):
        // one call proves it answers, else the app is read over the bus.
        try {
          await peer.call({ destination: busName, path: '/org/a11y/atspi/accessible/root', interface: 'org.freedesktop.DBus.Peer', member: 'Ping' }, timeoutMs);
        } catch (err) {
          await peer.close();
          throw err;
        }
        if (this.closed) {
          await peer.close();
          return undefined;
        }
        peer._bus.connection.on('close', () => {
          this._peers.delete(busName);
        });
        return peer;
      } catch {
        // Try again after a while (the app may only have been busy), not on every walk: an app without a socket
        // (Qt, GTK 4) or one that refuses would cost each walk a connect.
        setTimeout(() => {
          if (this._peers.get(busName) === opening) this._peers.delete(busName);
        }, PEER_RETRY_MS).unref();
        return undefined;
      }
    })();
    this._peers.set(busName, opening);
    return opening;
  }

  async close(): Promise<void> {
    this._closedReason ??= 'client closed';
    const peers = [...this._peers.values()];
    this._peers.clear();
    await Promise.all(peers.map(async (p) => (await p)?.close()));
    // Note: a graceful close waits for the peer to hang up too; a peer that never speaks never does.
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      this._bus.close().catch(() => {}),
      new Promise<void>((resolve) => {
        timer = setTimeout(resolve, 250);
      }),
    ]);
    clearTimeout(timer);
    this._bus.connection.stream?.destroy();
  }
}

export type ResolveA11yBusOptions = {
  timeoutMs?: number;
  /** Map the socket path the session reports (its own view) to the host's view, e.g. swap the run-dir prefix. */
  mapPath?: (sessionPath: string) => string;
};

/**
 * Ask a session bus for its AT-SPI bus (`org.a11y.Bus.GetAddress`, which D-Bus-activates at-spi-bus-launcher)
 * and return the host path of its socket. Rejects with `A11yError('a11y_unavailable')`.
 */
export async function resolveA11yBusSocket(sessionBusAddressOrPath: string, options: ResolveA11yBusOptions = {}): Promise<string> {
  const timeoutMs = options.timeoutMs ?? 5000;
  const session = await A11yClient.connect(sessionBusAddressOrPath, { timeoutMs });
  try {
    const address = await session.call<string>(
      {
        destination: 'org.a11y.Bus',
        path: '/org/a11y/bus',
        interface: 'org.a11y.Bus',
        member: 'GetAddress',
      },
      timeoutMs,
    );
    const path = socketPathFromAddress(address);
    if (path === undefined) throw new A11yError('a11y_unavailable', `AT-SPI bus address is not a unix path: ${address}`);
    return options.mapPath ? options.mapPath(path) : path;
  } catch (err) {
    if (err instanceof A11yError) throw err;
    throw new A11yError('a11y_unavailable', `org.a11y.Bus.GetAddress failed: ${(err as Error).message}`, { cause: err });
  } finally {
    await session.close();
  }
}
