// Per-session OSWorld endpoints: the guest contract server and two TCP
// forwarders (Chromium DevTools 9222, VLC HTTP 8080) into the session's
// network namespace, each on 127.0.0.1:<free port>. Started when a session
// becomes ready, kept across resets, closed on destroy. Idle cost: three
// listening sockets and no process.
//
// Who may connect: loopback only, and (by default) only local users the
// daemon trusts: each accepted connection's peer socket is looked up in
// /proc/net/tcp and its owner uid must be the daemon's own (root) or listed in
// DRUMS_OSWORLD_UIDS. DRUMS_OSWORLD_PEER_CHECK=0 turns the check off.

import { readFileSync } from 'node:fs';
import { createServer as createHttpServer, type Server as HttpServer } from 'node:http';
import { connect, createServer as createTcpServer, type Server, type Socket } from 'node:net';
import { dirname, join } from 'node:path';
import type { DisplayService } from '../session/display-service.ts';
import type { DaemonConfig } from '../common/config.ts';
import { log } from '../common/log.ts';
import { joinSockets } from '../common/tcp.ts';
import type { Session, SessionManager } from '../session/manager.ts';
import type { OsworldEndpoint } from '../protocol/generated/types.ts';
import { forgetSession, guestHandler } from './server.ts';

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

const hex4 = (n: number) => n.toString(16).toUpperCase().padStart(4, '0');

/** Owner uid of the client end of a loopback connection, from /proc/net/tcp (undefined if not found). */
export function peerUid(clientPort: number, serverPort: number): number | undefined {
  let table: string;
  try {
    table = readFileSync('/proc/net/tcp', 'utf8');
  } catch {
    return undefined;
  }
  const local = `0100007F:${hex4(clientPort)}`;
  const remote = `0100007F:${hex4(serverPort)}`;
  for (const line of table.split('\n')) {
    const f = line.trim().split(/\s+/);
    if (f[1] === local && f[2] === remote) return Number(f[7]);
  }
  return undefined;
}

function guard(sock: Socket, uids: Set<number> | undefined): boolean {
  if (!uids) return true;
  const uid = peerUid(sock.remotePort ?? 0, sock.localPort ?? 0);
  if (uid !== undefined && uids.has(uid)) return true;
  log('warn', 'osworld: refused a local connection', { uid, port: sock.localPort });
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
  private readonly _entries = new Map<string, Entry>();
  private readonly _uids: Set<number> | undefined;

  constructor(mgr: SessionManager, display: DisplayService, config: Pick<DaemonConfig, 'osworldUids' | 'osworldPeerCheck'> = mgr.config) {
    this._mgr = mgr;
    this._display = display;
    this._uids = allowedUids(config);
  }

  /** Starts the session's listeners (idempotent; a no-op for sessions without OSWorld). */
  async attach(s: Session): Promise<void> {
    if (this._entries.has(s.id) || !osworldEnabled(s)) return;
    const id = s.id;
    const guest = guestHandler({
      mgr: this._mgr,
      display: this._display,
      session: () => {
        try {
          return this._mgr.get(id);
        } catch {
          return undefined;
        }
      },
    });
    // Note: a long keep-alive timeout leaves closing an idle socket to the client (as the daemon's API
    // does): with Node's 5 s, a client under load reused a socket the server had just closed ("other side closed").
    const http: HttpServer = createHttpServer({ requestTimeout: 0, headersTimeout: 70_000, keepAliveTimeout: 65_000 }, guest.handler);
    http.on('connection', (sock: Socket) => {
      guard(sock, this._uids);
    });
    http.on('clientError', (_e, sock) => {
      try {
        sock.destroy();
      } catch {}
    });
    const forward = (port: number) =>
      createTcpServer((client) => {
        if (!guard(client, this._uids)) return;
        joinSockets(client, connect({ host: s.subnet.address, port }));
      });
    const cdp = forward(9222);
    const vlc = forward(8080);
    const servers: Server[] = [http, cdp, vlc];
    try {
      const [serverPort, chromiumPort, vlcPort] = await Promise.all(servers.map(listen));
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
  }
}
