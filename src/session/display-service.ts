import { randomBytes } from 'node:crypto';
import { basename, dirname, join } from 'node:path';
import { DrumsError } from '../common/errors.ts';
import type { Session } from './manager.ts';
import { XDisplay } from '../display/x-display.ts';
import { replyBudget } from '../display/x-connection.ts';
import type { ScreenshotOptions, ScreenshotResult } from '../display/screenshot.ts';
import { captureResolved, type ResolvedShot } from '../display/frames.ts';
import { A11yClient, type DirectHow } from '../a11y/client.ts';
import { A11yMirror, MIRROR_MAX_MESSAGE_BYTES, type MirrorStatus } from '../a11y/mirror.ts';
import { createConnection, type Socket } from 'node:net';
import { checkPeer, withPinnedSocket } from '../host/peer.ts';
import { connectAs } from '../host/userns.ts';
import { DESKTOP_UID } from './desktop-user.ts';
import { hostIds } from './userns.ts';
import { FIELDS } from '../common/config.ts';

/** Stored frames per session with DRUMS_BENCH_STORED_FRAME. */
const STORED_FRAMES = 4;

interface Conn {
  generation: number;
  display: Promise<XDisplay>;
  /** Set when the daemon itself closes the connection (reset, destroy, shutdown). */
  dropping: boolean;
}

interface A11yConn {
  generation: number;
  client: Promise<A11yClient>;
}

interface MirrorConn {
  generation: number;
  mirror: Promise<A11yMirror | undefined>;
  /** Set once it has subscribed. */
  ready: A11yMirror | undefined;
  idle: NodeJS.Timeout | undefined;
}

/** After a mirror stops by itself (flood, memory bound, lost connection), reads of that session walk this long. */
export const MIRROR_BACKOFF_MS = 60_000;

/** A person's hold on a session's input (POST /v1/sessions/{id}/takeover; src/api/frames/takeover.ts). */
export interface Takeover {
  id: string;
  holder: string;
  since: string;
  generation: number;
}

/**
 * Who holds each session's input. During a take-over, agent input (actions, window activate and
 * close, stream input) is refused with 409 `session_taken_over` unless it carries the
 * take-over's id; a take-over belongs to one generation, so a reset or destroy ends it.
 */
export class Takeovers {
  private readonly _held = new Map<string, Takeover>();

  /** The live take-over of a session (none once its generation moved on). */
  get(s: Session): Takeover | undefined {
    const t = this._held.get(s.id);
    if (t && t.generation !== s.generation) {
      this._held.delete(s.id);
      return undefined;
    }
    return t;
  }

  take(s: Session, holder: string): Takeover {
    const cur = this.get(s);
    if (cur)
      throw new DrumsError(
        'takeover_held',
        `session ${s.id} is already taken over by '${cur.holder}' since ${cur.since}; release it first (DELETE /v1/sessions/${s.id}/takeover)`,
        { details: { holder: cur.holder, since: cur.since } },
      );
    const t: Takeover = { id: randomBytes(12).toString('hex'), holder, since: new Date().toISOString(), generation: s.generation };
    this._held.set(s.id, t);
    return t;
  }

  release(s: Session, id?: string): Takeover {
    const cur = this.get(s);
    if (!cur) throw new DrumsError('takeover_not_found', `session ${s.id} is not taken over`);
    if (id !== undefined && id !== cur.id)
      throw new DrumsError('takeover_held', `take-over ${id.slice(0, 32)} is not the one held on session ${s.id} (held by '${cur.holder}')`, {
        details: { holder: cur.holder, since: cur.since },
      });
    this._held.delete(s.id);
    return cur;
  }

  /** Throws 409 session_taken_over unless the session is free or `id` is its take-over. */
  checkInput(s: Session, id: string | undefined): void {
    const cur = this.get(s);
    if (!cur || cur.id === id) return;
    throw new DrumsError('session_taken_over', `session ${s.id} is taken over by '${cur.holder}' since ${cur.since}; agent input resumes when it is released`, {
      details: { holder: cur.holder, since: cur.since },
    });
  }
}

/**
 * One persistent X connection and one AT-SPI client per session generation,
 * opened on first use through the session's host-side socket paths and
 * dropped on reset/destroy. An X connection that closes while the daemon did
 * not ask for it means the session's X server died: `onLost` is told (the
 * daemon wires it to `SessionManager.markBroken`; the liveness socket would say
 * so a moment later too); nothing throws out of an event handler.
 */
export class DisplayService {
  /** Who holds each session's input: checked before agent input reaches the display. */
  readonly takeovers = new Takeovers();
  private readonly _conns = new Map<string, Conn>();
  private readonly _a11y = new Map<string, A11yConn>();
  private readonly _mirrors = new Map<string, MirrorConn>();
  /** Per session: when its mirror stopped by itself, and why; no mirror is started before MIRROR_BACKOFF_MS. */
  private readonly _mirrorStopped = new Map<string, { at: number; generation: number; status: MirrorStatus }>();
  private readonly _mirrorIdleMs: number;
  /** DRUMS_A11Y_DEADLINE_MS: an API tree read's walk deadline. */
  readonly a11yDeadlineMs: number;
  private readonly _onLost: (s: Session, generation: number, reason: string) => void;
  /**
   * DRUMS_BENCH_STORED_FRAME (read once at start, off by default): the steps bench's ceiling arm.
   * Set, a session's API screenshots are the frame it first captured with the same options, kept
   * per generation: a step then costs the HTTP path, the fair share and its actions, but no
   * capture or encode. No request can turn it on; a daemon started with it serves stale frames.
   */
  readonly storedFrame: boolean;
  private readonly _stored = new Map<string, { generation: number; frames: Map<string, ScreenshotResult> }>();

  constructor(
    opts: {
      onLost?: (s: Session, generation: number, reason: string) => void;
      a11yMirrorIdleS?: number;
      a11yDeadlineMs?: number;
      storedFrame?: boolean;
    } = {},
  ) {
    this._onLost = opts.onLost ?? (() => {});
    this.storedFrame = opts.storedFrame ?? false;
    this._mirrorIdleMs = (opts.a11yMirrorIdleS ?? FIELDS.a11yMirrorIdleS.default) * 1000;
    this.a11yDeadlineMs = opts.a11yDeadlineMs ?? FIELDS.a11yDeadlineMs.default;
  }

  async connection(s: Session): Promise<XDisplay> {
    const cur = this._conns.get(s.id);
    if (cur && cur.generation === s.generation) return this._await(s, cur.display);
    this.dropDisplay(s.id);
    const generation = s.generation;
    // The socket's directory is the session's to write: only a socket its own X server serves is used (docs/security.md).
    // It is connected through a descriptor of the socket file itself (no symlink followed), then its peer checked.
    const display = withPinnedSocket(dirname(s.x11Socket), basename(s.x11Socket), (path) =>
      XDisplay.open(path, {
        timeoutMs: 5000,
        verify: (sock) => ownPeer(sock, s, 'X socket'),
        // Sent only once the socket is known to be served from inside the session (verify).
        cookie: s.xCookie,
        // A GetImage of the screen the session was made with, no more, whatever screen its server claims.
        maxReplyBytes: replyBudget(s.spec.screen.width, s.spec.screen.height),
      }),
    ).catch((e: Error) => {
      throw e instanceof DrumsError ? e : new Error(`the X socket of session ${s.id} is not the session's own: ${e.message}`);
    });
    const conn: Conn = { generation, display, dropping: false };
    this._conns.set(s.id, conn);
    display.then(
      (d) => {
        d.once('closed', (reason: string) => {
          if (this._conns.get(s.id) === conn) this._conns.delete(s.id);
          if (conn.dropping) return;
          try {
            this._onLost(s, generation, `the session's X server went away (${reason})`);
          } catch {
            /* never from an event handler */
          }
        });
      },
      () => {
        if (this._conns.get(s.id) === conn) this._conns.delete(s.id);
      },
    );
    return this._await(s, display);
  }

  /** A frame of the session's display as resolved (the API's screenshot and actions routes). */
  async frame(s: Session, d: XDisplay, shot: ResolvedShot): Promise<ScreenshotResult> {
    if (!this.storedFrame) return captureResolved(d.conn, shot);
    const key = JSON.stringify(shot);
    let st = this._stored.get(s.id);
    if (!st || st.generation !== s.generation) {
      st = { generation: s.generation, frames: new Map() };
      this._stored.set(s.id, st);
    }
    const kept = st.frames.get(key);
    if (kept) return kept;
    const { timing: _, ...r } = await captureResolved(d.conn, shot);
    // A few option sets per session (the bench asks one or two); more are captured each time.
    if (st.frames.size < STORED_FRAMES) st.frames.set(key, r);
    return r;
  }

  private async _await(s: Session, p: Promise<XDisplay>): Promise<XDisplay> {
    try {
      return await p;
    } catch (e) {
      throw new DrumsError('display_unavailable', `cannot connect to the X server of session ${s.id}: ${(e as Error).message}`, { cause: e });
    }
  }

  async screenshot(s: Session, opts: ScreenshotOptions): Promise<ScreenshotResult> {
    const d = await this.connection(s);
    return d.screenshot(opts);
  }

  /**
   * The session's AT-SPI client for this generation (`<runDir>/xdg/at-spi/bus_0`). In a session with its own
   * user namespace the daemon (host root, unmapped there) would be refused by the bus, so it connects as the
   * session's mapped desktop user (docs/security.md, "The daemon's bus connections").
   */
  async a11y(s: Session): Promise<A11yClient> {
    const cur = this._a11y.get(s.id);
    if (cur && cur.generation === s.generation) {
      const c = await cur.client.catch(() => undefined);
      if (c && !c.closed) return c;
    }
    this.dropA11y(s.id);
    const client = this._connectA11y(s);
    const conn = { generation: s.generation, client };
    this._a11y.set(s.id, conn);
    client.catch(() => {
      if (this._a11y.get(s.id) === conn) this._a11y.delete(s.id);
    });
    return client;
  }

  /** A new connection to the session's AT-SPI bus, served from inside the session (see a11y()). */
  private _connectA11y(s: Session, extra: { maxMessageBytes?: number } = {}): Promise<A11yClient> {
    const bus = join(s.runDir, 'xdg', 'at-spi', 'bus_0');
    const ids = s.uids ? hostIds(s.uids) : undefined;
    // Either way the bus must be served from inside the session: a symlink the session planted at bus_0 is refused.
    const open = async () => {
      const sock = ids
        ? await connectAs(ids.desktopUid, ids.desktopGid, s.runDir, 'xdg/at-spi/bus_0', 2000)
        : await withPinnedSocket(s.runDir, 'xdg/at-spi/bus_0', (path) => connectPath(path, 2000));
      try {
        await ownPeer(sock, s, 'AT-SPI bus');
      } catch (e) {
        sock.destroy();
        throw e;
      }
      return sock;
    };
    return A11yClient.connect(bus, ids ? { timeoutMs: 2000, authUid: DESKTOP_UID, open, ...extra } : { timeoutMs: 2000, open, ...extra });
  }

  /**
   * The session's accessibility mirror (src/a11y/mirror.ts), started at its first read on a connection of its own
   * and stopped after DRUMS_A11Y_MIRROR_IDLE_S without a read. Undefined when there is none to use: turned off
   * (0), still starting (this read walks), refused, or stopped by itself within MIRROR_BACKOFF_MS (a flood of
   * events, its memory bound, a lost connection): then reads are walks.
   */
  async a11yMirror(s: Session): Promise<A11yMirror | undefined> {
    if (this._mirrorIdleMs <= 0) return undefined;
    let cur = this._mirrors.get(s.id);
    if (cur && cur.generation !== s.generation) {
      this.dropMirror(s.id);
      cur = undefined;
    }
    if (!cur) {
      const stopped = this._mirrorStopped.get(s.id);
      if (stopped && stopped.generation === s.generation && Date.now() - stopped.at < MIRROR_BACKOFF_MS) return undefined;
      this._mirrorStopped.delete(s.id);
      const conn: MirrorConn = { generation: s.generation, mirror: Promise.resolve(undefined), ready: undefined, idle: undefined };
      const onStop = (reason: string, m: A11yMirror) => {
        if (this._mirrors.get(s.id) !== conn) return;
        this._mirrors.delete(s.id);
        clearTimeout(conn.idle);
        if (reason !== 'idle' && reason !== 'dropped') this._mirrorStopped.set(s.id, { at: Date.now(), generation: conn.generation, status: m.status() });
      };
      conn.mirror = this._connectA11y(s, { maxMessageBytes: MIRROR_MAX_MESSAGE_BYTES })
        .then((client) => {
          let mirror: A11yMirror | undefined;
          return A11yMirror.start(client, { onStop: (reason) => mirror && onStop(reason, mirror) }).then((m) => {
            mirror = m;
            conn.ready = m;
            if (!m.live) onStop(m.status().reason ?? 'stopped', m);
            return m;
          });
        })
        .catch(() => {
          // Refused or unreachable: reads walk; try again after the backoff.
          if (this._mirrors.get(s.id) === conn) {
            this._mirrors.delete(s.id);
            this._mirrorStopped.set(s.id, {
              at: Date.now(),
              generation: conn.generation,
              status: { state: 'stopped', reason: 'could not subscribe', objects: 0, bytes: 0, events: 0 },
            });
          }
          return undefined;
        });
      this._mirrors.set(s.id, conn);
      cur = conn;
    }
    const conn = cur;
    clearTimeout(conn.idle);
    conn.idle = setTimeout(() => {
      if (this._mirrors.get(s.id) === conn) this.dropMirror(s.id, 'idle');
    }, this._mirrorIdleMs);
    conn.idle.unref();
    // Note: the first read waits for the subscription (a few round trips), so it fills the mirror.
    const m = conn.ready ?? (await conn.mirror);
    return m?.live ? m : undefined;
  }

  /** The session's mirror's state for a read's stats: live, stopped (and why), or none. */
  a11yMirrorStatus(s: Session): MirrorStatus | undefined {
    const cur = this._mirrors.get(s.id);
    const m = cur?.ready;
    if (m) return m.status();
    const stopped = this._mirrorStopped.get(s.id);
    return stopped && stopped.generation === s.generation ? stopped.status : undefined;
  }

  dropMirror(id: string, why = 'dropped'): void {
    const cur = this._mirrors.get(id);
    this._mirrors.delete(id);
    if (!cur) return;
    clearTimeout(cur.idle);
    cur.mirror.then((m) => m?.stop(why)).catch(() => {});
  }

  /**
   * How a walk reaches each application's own AT-SPI socket (WalkOptions.direct), skipping the bus daemon: half
   * the messages of a read. The app names its socket (GetApplicationBusAddress, session-controlled): only
   * `/run/drums/xdg/at-spi2-<letters>/socket` (atk-bridge's, in the session's XDG_RUNTIME_DIR, which is the host's
   * `<runDir>/xdg`) is taken, connected as the desktop user (the path resolved as that uid) and kept only if a process of the session serves it. Anything else is refused and
   * that app is read over the bus.
   */
  a11yDirect(s: Session): DirectHow {
    // Note: always as the desktop user, even without a user namespace: an application's socket (libdbus, no bus
    // policy) admits only its own uid, not root.
    const ids = hostIds(s.uids);
    return {
      authUid: DESKTOP_UID,
      open: async (sessionPath: string) => {
        const m = /^\/run\/drums\/xdg\/(at-spi2-[A-Za-z0-9]{1,32})\/socket$/.exec(sessionPath);
        if (!m) throw new Error(`not an atk-bridge socket in the session's runtime dir: ${sessionPath.slice(0, 200)}`);
        const rel = `xdg/${m[1]}/socket`;
        const sock = await connectAs(ids.desktopUid, ids.desktopGid, s.runDir, rel, 2000);
        try {
          await ownPeer(sock, s, 'AT-SPI socket of an application');
        } catch (e) {
          sock.destroy();
          throw e;
        }
        return sock;
      },
    };
  }

  dropDisplay(id: string): void {
    this._stored.delete(id);
    const cur = this._conns.get(id);
    this._conns.delete(id);
    if (!cur) return;
    cur.dropping = true;
    cur.display
      .then(
        (d) => d.close(),
        () => {},
      )
      .catch(() => {});
  }

  dropA11y(id: string): void {
    const cur = this._a11y.get(id);
    this._a11y.delete(id);
    cur?.client
      .then(
        (c) => c.close(),
        () => {},
      )
      .catch(() => {});
  }

  /** Drops both connections of a session and its mirror (reset, destroy). */
  drop(id: string): void {
    this.dropDisplay(id);
    this.dropA11y(id);
    this.dropMirror(id);
    this._mirrorStopped.delete(id);
  }

  closeAll(): void {
    for (const id of new Set([...this._conns.keys(), ...this._a11y.keys(), ...this._mirrors.keys()])) this.drop(id);
  }
}

/** Rejects unless the connected socket is served by a process of the session's own cgroup. */
async function ownPeer(sock: Socket, s: Session, what: string): Promise<void> {
  try {
    await checkPeer(sock, s.names.cgroup, 3000);
  } catch (e) {
    throw new Error(`the ${what} of session ${s.id} is not served from inside the session (${(e as Error).message})`);
  }
}

function connectPath(path: string, timeoutMs: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const sock = createConnection(path);
    const timer = setTimeout(() => {
      sock.destroy();
      reject(new Error(`connecting to ${path} timed out after ${timeoutMs} ms`));
    }, timeoutMs);
    sock.once('connect', () => {
      clearTimeout(timer);
      sock.removeAllListeners('error');
      resolve(sock);
    });
    sock.once('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
  });
}
