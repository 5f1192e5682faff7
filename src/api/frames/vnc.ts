/**
 * On-demand VNC per session: GET /v1/sessions/:id/vnc is a WebSocket carrying raw RFB (what
 * noVNC speaks; subprotocol `binary` or `drums`). The first viewer starts x11vnc (Debian's,
 * in the image) inside the session through the OCI runtime, as the desktop user, listening on
 * a unix socket in the session's X socket directory (no TCP port, nothing in the network
 * namespace); each viewer gets its own connection to it; when the last viewer leaves, x11vnc
 * is stopped (SIGTERM through `runc exec`'s signal forwarding). Unused, it costs nothing.
 * Viewers are view-only unless they hold the session's take-over (`?takeover=<id>`): the
 * daemon parses each viewer's RFB and drops its input otherwise (rfb-gate.ts).
 * For standard VNC viewers, `drums session vnc ID` bridges a local TCP port to this socket.
 */
import { closeSync, existsSync, rmSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { dirname, join } from 'node:path';
import type { ChildProcess } from 'node:child_process';
import type { WebSocket } from 'ws';
import { DrumsError } from '../../common/errors.ts';
import { checkPeer, pinSocket } from '../../host/peer.ts';
import { log } from '../../common/log.ts';
import type { Session, SessionManager } from '../../session/manager.ts';
import { RfbGateError, RfbInputGate } from './rfb-gate.ts';
import { XAUTHORITY } from '../../session/desktop-user.ts';

const SOCKET_NAME = 'drums-vnc';
const START_DEADLINE_MS = 10_000;

interface Server {
  generation: number;
  child: ChildProcess;
  hostSocket: string;
  ready: Promise<void>;
  viewers: Set<WebSocket>;
  stderr: string;
}

export class VncService {
  private readonly _live = new Map<string, Server>();
  private readonly _mgr: SessionManager;
  constructor(mgr: SessionManager) {
    this._mgr = mgr;
  }

  /** Live x11vnc servers, by session id (for tests and /v1/usage). */
  running(id: string): { viewers: number } | null {
    const v = this._live.get(id);
    return v ? { viewers: v.viewers.size } : null;
  }

  private _start(s: Session): Server {
    const hostSocket = join(dirname(s.x11Socket), SOCKET_NAME);
    rmSync(hostSocket, { force: true });
    const child = this._mgr.runtime.spawnExec(s.names.container, {
      uid: 1000,
      gid: 1000,
      cwd: '/home/user',
      env: this._mgr.sessionEnv(),
      caps: [],
      // A day's backstop; the daemon stops it when the last viewer leaves. x11vnc can hang in
      // its own SIGTERM handler (seen: stuck on a futex after a viewer's drag was let go), so
      // timeout follows any TERM it passes on with a KILL 3 s later.
      args: [
        '/usr/bin/timeout',
        '--kill-after=3',
        '--signal=TERM',
        '86400',
        'x11vnc',
        '-display',
        ':0',
        // The session's X cookie (XAUTHORITY says the same; explicit, as x11vnc also looks elsewhere).
        '-auth',
        XAUTHORITY,
        '-rfbport',
        '0',
        '-unixsock',
        `/tmp/.X11-unix/${SOCKET_NAME}`,
        '-shared',
        '-forever',
        '-nopw',
        '-quiet',
        '-nolookup',
        '-noipv6',
        '-noxdamage',
      ],
    });
    const srv: Server = { generation: s.generation, child, hostSocket, viewers: new Set(), stderr: '', ready: Promise.resolve() };
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
      for (const ws of srv.viewers) ws.close(1011, 'vnc server stopped');
    });
    this._live.set(s.id, srv);
    log('info', 'vnc started', { id: s.id });
    return srv;
  }

  private _stop(id: string, srv: Server): void {
    if (this._live.get(id) === srv) this._live.delete(id);
    srv.child.kill('SIGTERM');
    log('info', 'vnc stopped', { id });
  }

  /**
   * Attaches one viewer: starts x11vnc if it is the first, stops it when the last leaves. The
   * viewer's input passes only while `allowInput()` (it holds the take-over); else view-only.
   */
  attach(s: Session, ws: WebSocket, allowInput: () => boolean): void {
    let srv = this._live.get(s.id);
    if (srv && srv.generation !== s.generation) {
      this._stop(s.id, srv);
      srv = undefined;
    }
    const server = srv ?? this._start(s);
    server.viewers.add(ws);
    let sock: Socket | undefined;
    const leave = () => {
      sock?.destroy();
      if (!server.viewers.delete(ws)) return;
      if (server.viewers.size === 0) this._stop(s.id, server);
    };
    ws.on('close', leave);
    ws.on('error', leave);
    server.ready.then(
      () => {
        if (!server.viewers.has(ws)) return;
        // The socket file itself, no symlink followed (pinSocket), then its peer checked (below).
        let fd: number;
        try {
          fd = pinSocket(dirname(server.hostSocket), SOCKET_NAME);
        } catch (e) {
          log('warn', 'vnc viewer closed: the vnc socket is not the session’s own', { id: s.id, error: (e as Error).message });
          ws.close(1011, 'vnc socket not the session’s own');
          leave();
          return;
        }
        const vs = connect(`/proc/self/fd/${fd}`);
        const unpin = () => closeSync(fd);
        vs.once('connect', unpin);
        vs.once('error', unpin);
        sock = vs;
        vs.on('close', () => ws.close(1000, 'vnc connection closed'));
        vs.on('error', () => ws.close(1011, 'vnc connection failed'));
        // The socket's directory is the session's to write: nothing flows until the socket is known to be served
        // from inside the session (a symlink to a sibling's x11vnc is refused; docs/security.md).
        vs.once('connect', () => {
          checkPeer(vs, s.names.cgroup, 3000).then(
            () => {
              if (server.viewers.has(ws)) wire(vs);
            },
            (e: Error) => {
              log('warn', 'vnc viewer closed: the vnc socket is not served from inside the session', { id: s.id, error: e.message });
              ws.close(1011, 'vnc socket not the session’s own');
              leave();
            },
          );
        });
      },
      (e: Error) => {
        if (ws.readyState === ws.OPEN) ws.close(1011, e.message.slice(0, 120));
        leave();
      },
    );
    const wire = (vs: Socket) => {
      vs.on('data', (d) => {
        if (ws.readyState === ws.OPEN) ws.send(d, { binary: true });
      });
      const sock = vs;
      const gate = new RfbInputGate(allowInput);
      ws.on('message', (d) => {
        try {
          const pass = gate.feed(d as Buffer);
          if (pass.length) sock.write(pass);
        } catch (e) {
          if (!(e instanceof RfbGateError)) throw e;
          log('warn', 'vnc viewer closed: unparsable RFB', { id: s.id, error: e.message });
          ws.close(1008, `refused: ${e.message}`.slice(0, 120));
          leave();
        }
      });
    };
  }

  closeAll(): void {
    for (const [id, srv] of this._live) this._stop(id, srv);
  }
}

const services = new WeakMap<SessionManager, VncService>();
export function vncService(mgr: SessionManager): VncService {
  let v = services.get(mgr);
  if (!v) {
    v = new VncService(mgr);
    services.set(mgr, v);
  }
  return v;
}
