/**
 * x11vnc inside a session, on demand: the first viewer starts it, the last one stops it. It runs
 * through the one exec primitive (spawnInSession) as the desktop user, with no capabilities,
 * listening on a unix socket in the session's X socket directory (no TCP port, nothing in the
 * network namespace); it is stopped by SIGTERM through the runtime's signal forwarding. Unused, it
 * costs nothing. The WebSocket bridge to it (pinning the socket, checking its peer, gating input)
 * is the API's: src/api/frames/vnc.ts.
 */
import { existsSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { ChildProcess } from 'node:child_process';
import { DrumsError } from '../common/errors.ts';
import { log } from '../common/log.ts';
import { XAUTHORITY } from './desktop-user.ts';
import { spawnInSession } from './exec.ts';
import type { Session, SessionManager } from './manager.ts';

/** The socket's name in the session's X socket directory (/tmp/.X11-unix inside). */
export const VNC_SOCKET = 'drums-vnc';
const START_DEADLINE_MS = 10_000;
/** A day's backstop: the daemon stops x11vnc when the last viewer leaves. */
const BACKSTOP_MS = 86_400_000;

/** One viewer, as far as the server cares: closed when x11vnc goes away. */
export interface VncViewer {
  close(code: number, reason: string): void;
}

/** One session's running x11vnc. */
export interface VncServer {
  generation: number;
  child: ChildProcess;
  /** The socket on the host (in the session's X socket directory, which the session can write). */
  hostSocket: string;
  /** Resolves once x11vnc listens; rejects (connect_failed) if it exits first or is late. */
  ready: Promise<void>;
  viewers: Set<VncViewer>;
  stderr: string;
}

/** The daemon's x11vnc servers, one per session at most (built by the daemon, handed to the API). */
export class VncServers {
  private readonly _live = new Map<string, VncServer>();
  private readonly _mgr: SessionManager;
  constructor(mgr: SessionManager) {
    this._mgr = mgr;
  }

  /** Live x11vnc servers, by session id (for tests and /v1/usage). */
  running(id: string): { viewers: number } | null {
    const v = this._live.get(id);
    return v ? { viewers: v.viewers.size } : null;
  }

  /** Adds a viewer to the session's x11vnc, started if it is the first (or the running one is of an older generation). */
  join(s: Session, viewer: VncViewer): VncServer {
    let srv = this._live.get(s.id);
    if (srv && srv.generation !== s.generation) {
      this._stop(s.id, srv);
      srv = undefined;
    }
    const server = srv ?? this._start(s);
    server.viewers.add(viewer);
    return server;
  }

  /** Removes a viewer; the last one to leave stops x11vnc. */
  leave(id: string, server: VncServer, viewer: VncViewer): void {
    if (!server.viewers.delete(viewer)) return;
    if (server.viewers.size === 0) this._stop(id, server);
  }

  private _start(s: Session): VncServer {
    const hostSocket = join(dirname(s.x11Socket), VNC_SOCKET);
    rmSync(hostSocket, { force: true });
    // The in-session `timeout` (timeoutMs) is also what follows a TERM with a KILL: x11vnc can hang in
    // its own SIGTERM handler (seen: stuck on a futex after a viewer's drag was let go).
    const child = spawnInSession(
      { runtime: this._mgr.runtime, container: s.names.container, env: this._mgr.sessionEnv() },
      {
        timeoutMs: BACKSTOP_MS,
        argv: [
          'x11vnc',
          '-display',
          ':0',
          // The session's X cookie (XAUTHORITY says the same; explicit, as x11vnc also looks elsewhere).
          '-auth',
          XAUTHORITY,
          '-rfbport',
          '0',
          '-unixsock',
          `/tmp/.X11-unix/${VNC_SOCKET}`,
          '-shared',
          '-forever',
          '-nopw',
          '-quiet',
          '-nolookup',
          '-noipv6',
          '-noxdamage',
        ],
      },
    );
    const srv: VncServer = { generation: s.generation, child, hostSocket, viewers: new Set(), stderr: '', ready: Promise.resolve() };
    child.stdout?.resume();
    child.stderr?.on('data', (d: Buffer) => {
      srv.stderr = (srv.stderr + d.toString()).slice(-2000);
    });
    child.stdin?.end();
    const exited = new Promise<void>((res) => child.once('close', () => res()));
    srv.ready = (async () => {
      const end = Date.now() + START_DEADLINE_MS;
      for (;;) {
        if (child.exitCode !== null || child.signalCode !== null)
          throw new DrumsError(
            'connect_failed',
            `x11vnc exited at start in session ${s.id}: ${srv.stderr.slice(-300) || 'no output'} (is x11vnc in the image?)`,
          );
        if (existsSync(hostSocket)) return;
        if (Date.now() > end) throw new DrumsError('connect_failed', `x11vnc did not listen within ${START_DEADLINE_MS} ms in session ${s.id}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    })();
    srv.ready.catch(() => {});
    exited.then(() => {
      if (this._live.get(s.id) === srv) this._live.delete(s.id);
      rmSync(hostSocket, { force: true });
      for (const v of srv.viewers) v.close(1011, 'vnc server stopped');
    });
    this._live.set(s.id, srv);
    log('info', 'vnc started', { id: s.id });
    return srv;
  }

  private _stop(id: string, srv: VncServer): void {
    if (this._live.get(id) === srv) this._live.delete(id);
    srv.child.kill('SIGTERM');
    log('info', 'vnc stopped', { id });
  }

  closeAll(): void {
    for (const [id, srv] of this._live) this._stop(id, srv);
  }
}
