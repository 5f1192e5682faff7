// Per-session OSWorld endpoints: the guest contract server and two TCP
// forwarders (Chromium DevTools 9222, VLC HTTP 8080) into the session's
// network namespace, each on 127.0.0.1:<free port>. Started when a session
// becomes ready, kept across resets, closed on destroy. Idle cost: three
// listening sockets and no process.
//
// Who may connect: loopback only, and (by default) only local users the
// daemon trusts. Each accepted connection must come from 127.0.0.1, and the
// kernel is asked (sock_diag, by the connection's exact 4-tuple:
// src/host/tcp-owner.ts) who owns its client end: only an ESTABLISHED socket
// owned by the daemon's own uid (root) or a uid in DRUMS_OSWORLD_UIDS is
// served. A refused connection is destroyed unanswered (a forwarder reads
// nothing of it; the guest server at most a request's headers). The guest
// server is a Hono app (app.ts) behind node-server's request listener, the
// same adapter as the daemon's API; the verdict is asked before the request
// reaches it.
// DRUMS_OSWORLD_PEER_CHECK=0 turns the uid check off.

import { readFileSync } from 'node:fs';
import { createServer as createHttpServer, type Server as HttpServer } from 'node:http';
import { connect, createServer as createTcpServer, type Server, type Socket } from 'node:net';
import { dirname, join } from 'node:path';
import type { DisplayService } from '../session/display-service.ts';
import type { FairScheduler } from '../policy/fair-share.ts';
import type { DaemonConfig } from '../common/config.ts';
import { log } from '../common/log.ts';
import { TCP_ESTABLISHED, type TcpOwner, TcpOwners } from '../host/tcp-owner.ts';
import { joinSockets } from '../common/tcp.ts';
import type { Session, SessionManager } from '../session/manager.ts';
import type { OsworldEndpoint } from '../protocol/generated/types.ts';
import { getRequestListener } from '@hono/node-server';
import { forgetSession, guestApp, toResponse } from './app.ts';
import { flaskPage, json } from './guest.ts';

/** The wire shape from the spec (vncPort is 0: Drums has no VNC server, and 0 keeps DesktopEnv's five-field address valid). */
export type { OsworldEndpoint };

interface Entry {
  endpoint: OsworldEndpoint;
  servers: Server[];
  closeGuest: () => void;
}

/** Sessions get an endpoint when their image says so (recipe env DRUMS_OSWORLD=1) or with label drums.osworld=1. */
export function osworldEnabled(s: Session): boolean {
  if (s.spec.labels['drums.osworld'] === '1') return true;
  if (s.spec.labels['drums.osworld'] === '0') return false;
  try {
    const m = JSON.parse(readFileSync(join(dirname(s.imageDir), 'image.json'), 'utf8')) as { env?: Record<string, string> };
    return m.env?.DRUMS_OSWORLD === '1';
  } catch {
    return false;
  }
}

/** Who may connect: the daemon's own uid and DRUMS_OSWORLD_UIDS; undefined = anyone (DRUMS_OSWORLD_PEER_CHECK=0). */
function allowedUids(c: Pick<DaemonConfig, 'osworldUids' | 'osworldPeerCheck'>): Set<number> | undefined {
  if (!c.osworldPeerCheck) return undefined;
  return new Set<number>([process.getuid?.() ?? 0, ...c.osworldUids]);
}

/** The only peer address served: the listeners are on 127.0.0.1, and a client there connects from it unless it binds another. */
const LOOPBACK = '127.0.0.1';

/**
 * Whether to serve this connection: it comes from 127.0.0.1, and (with the uid check on) the kernel names an
 * allowed uid as the owner of its client end, which must be ESTABLISHED. A connection refused, or one whose owner
 * cannot be found out (fail-closed), is destroyed. Never rejects.
 */
async function admit(sock: Socket, uids: Set<number> | undefined, owners: TcpOwners | undefined): Promise<boolean> {
  // Read now: a destroyed socket forgets its addresses.
  const client = { address: sock.remoteAddress ?? '', port: sock.remotePort ?? 0 };
  const server = { address: sock.localAddress ?? '', port: sock.localPort ?? 0 };
  let why: string | undefined;
  let owner: TcpOwner | undefined;
  if (client.address !== LOOPBACK || server.address !== LOOPBACK) why = 'the peer is not 127.0.0.1';
  else if (uids && owners) {
    owner = await owners.lookup(client, server);
    if (!owner) why = `its owner could not be found${owners.lastError ? ` (${owners.lastError})` : ''}`;
    else if (owner.state !== TCP_ESTABLISHED) why = `its client end is in tcp state ${owner.state}, not ESTABLISHED`;
    else if (!uids.has(owner.uid)) why = `uid ${owner.uid} is not allowed (DRUMS_OSWORLD_UIDS)`;
  }
  if (why === undefined && !sock.destroyed) return true;
  if (why !== undefined) log('warn', 'osworld: refused a local connection', { why, peer: `${client.address}:${client.port}`, port: server.port });
  sock.destroy();
  return false;
}

function listen(server: Server): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      server.off('error', reject);
      resolve((server.address() as { port: number }).port);
    });
  });
}

export class OsworldService {
  private readonly _mgr: SessionManager;
  private readonly _display: DisplayService;
  private readonly _fair: FairScheduler;
  private readonly _entries = new Map<string, Entry>();
  private readonly _uids: Set<number> | undefined;
  /** The kernel's answers on who owns a connection (one helper process, started at the first connection). */
  private readonly _owners: TcpOwners | undefined;

  constructor(mgr: SessionManager, display: DisplayService, fair: FairScheduler, config: Pick<DaemonConfig, 'osworldUids' | 'osworldPeerCheck'> = mgr.config) {
    this._mgr = mgr;
    this._display = display;
    this._fair = fair;
    this._uids = allowedUids(config);
    this._owners = this._uids ? new TcpOwners() : undefined;
  }

  /** Whether to serve `sock` (destroyed if not); see admit. */
  private _admit(sock: Socket): Promise<boolean> {
    // Until the verdict, an error on the socket (a reset) must not go unhandled.
    sock.on('error', () => {});
    return admit(sock, this._uids, this._owners);
  }

  /** Starts the session's listeners (idempotent; a no-op for sessions without OSWorld). */
  async attach(s: Session): Promise<void> {
    if (this._entries.has(s.id) || !osworldEnabled(s)) return;
    const id = s.id;
    const guest = guestApp({
      mgr: this._mgr,
      display: this._display,
      fair: this._fair,
      session: () => {
        try {
          return this._mgr.get(id);
        } catch {
          return undefined;
        }
      },
    });
    let port = 0;
    const listener = getRequestListener(guest.app.fetch, {
      // The body limit (body.ts) drains a refused body itself, for longer than node-server would.
      autoCleanupIncoming: false,
      // Only for the URL of a request without a Host header, which the app then refuses (forbidden_host).
      hostname: 'no-host.invalid',
      // A request node-server cannot make a URL of: a Host that is no host name (refused, as any foreign Host), or
      // a path it will not take (Flask's 400 page). The connection closes after the answer.
      errorHandler: (e) =>
        toResponse({
          ...(/host/i.test(e instanceof Error ? e.message : '')
            ? json(403, { status: 'error', code: 'forbidden_host', message: `the Host header is not a host name; use 127.0.0.1:${port} or localhost:${port}` })
            : flaskPage(400, 'Bad Request', 'The browser (or proxy) sent a request that this server could not understand.')),
          headers: { connection: 'close' },
        }),
    });
    // Each connection's verdict, asked for as it is accepted; the request waits for it (only its headers are
    // parsed meanwhile: the body is not read before the handler runs).
    const verdicts = new WeakMap<Socket, Promise<boolean>>();
    // Note: a long keep-alive timeout leaves closing an idle socket to the client (as the daemon's API
    // does): with Node's 5 s, a client under load reused a socket the server had just closed ("other side closed").
    const http: HttpServer = createHttpServer({ requestTimeout: 0, headersTimeout: 70_000, keepAliveTimeout: 65_000 }, (req, res) => {
      void (verdicts.get(req.socket) ?? Promise.resolve(false)).then((ok) => {
        if (ok) void listener(req, res);
        else req.socket.destroy();
      });
    });
    http.on('connection', (sock: Socket) => {
      verdicts.set(sock, this._admit(sock));
    });
    http.on('clientError', (_e, sock) => {
      try {
        sock.destroy();
      } catch {}
    });
    // The forwarders read nothing from a connection before its verdict (pauseOnConnect; the pipe resumes it).
    const forward = (port: number) =>
      createTcpServer({ pauseOnConnect: true }, (client) => {
        void this._admit(client).then((ok) => {
          if (ok) joinSockets(client, connect({ host: s.subnet.address, port }));
        });
      });
    const cdp = forward(9222);
    const vlc = forward(8080);
    const servers: Server[] = [http, cdp, vlc];
    try {
      const [serverPort, chromiumPort, vlcPort] = await Promise.all(servers.map(listen));
      port = serverPort!;
      const endpoint: OsworldEndpoint = {
        host: '127.0.0.1',
        serverPort: serverPort!,
        chromiumPort: chromiumPort!,
        vncPort: 0,
        vlcPort: vlcPort!,
        address: `127.0.0.1:${serverPort}:${chromiumPort}:0:${vlcPort}`,
      };
      this._entries.set(id, { endpoint, servers, closeGuest: guest.close });
    } catch (e) {
      for (const sv of servers) sv.close();
      throw e;
    }
  }

  /** The session's endpoint, if it has one (the daemon adds it to the session view). */
  endpointOf(id: string): OsworldEndpoint | undefined {
    return this._entries.get(id)?.endpoint;
  }

  detach(id: string): void {
    const e = this._entries.get(id);
    this._entries.delete(id);
    forgetSession(id);
    if (!e) return;
    e.closeGuest();
    for (const sv of e.servers) {
      sv.close();
      (sv as HttpServer).closeAllConnections?.();
    }
  }

  closeAll(): void {
    for (const id of [...this._entries.keys()]) this.detach(id);
    this._owners?.close();
  }
}
