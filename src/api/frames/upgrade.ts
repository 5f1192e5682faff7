/**
 * WebSocket upgrades through the Hono app: the daemon's HTTP server hands every upgrade request
 * to the app's fetch (so Host/Origin/token checks, the rate limit and the route's own checks run
 * exactly as for HTTP), with a ticket in the env. A route that wants the socket calls
 * `ticket.accept(onOpen)` and returns any 2xx; anything else the app answers is written back on
 * the raw socket as the HTTP refusal. Browsers cannot set headers on a WebSocket, so the token
 * may also come as the subprotocol `drums.token.<token>` beside `drums` (the one chosen).
 */
import type { IncomingMessage, Server } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Context } from 'hono';
import { WebSocketServer, type WebSocket } from 'ws';
import { log } from '../../common/log.ts';

export const PROTOCOL = 'drums';
const TOKEN_PROTOCOL = 'drums.token.';
/** Largest message a client may send (a batch of actions as JSON). */
const MAX_PAYLOAD = 1024 * 1024;

export interface UpgradeTicket {
  accept(onOpen: (ws: WebSocket) => void): void;
}

const KEY = 'drumsUpgrade';

/** The ticket of an upgrade request, or undefined for a plain HTTP request. */
export function upgradeTicket(c: Context): UpgradeTicket | undefined {
  const env = c.env as Record<string, unknown> | undefined;
  return env?.[KEY] as UpgradeTicket | undefined;
}

type Fetch = (req: Request, env: Record<string, unknown>) => Response | Promise<Response>;

function toRequest(req: IncomingMessage): Request {
  const headers = new Headers();
  for (let i = 0; i + 1 < req.rawHeaders.length; i += 2) headers.append(req.rawHeaders[i], req.rawHeaders[i + 1]);
  if (!headers.has('authorization')) {
    const protos = (headers.get('sec-websocket-protocol') ?? '').split(',').map((p) => p.trim());
    const tok = protos.find((p) => p.startsWith(TOKEN_PROTOCOL));
    if (tok) headers.set('authorization', `Bearer ${tok.slice(TOKEN_PROTOCOL.length)}`);
  }
  return new Request(`http://${req.headers.host ?? 'localhost'}${req.url ?? '/'}`, { method: req.method, headers });
}

async function refuse(socket: Duplex, res: Response): Promise<void> {
  const body = Buffer.from(await res.arrayBuffer());
  const head = [
    `HTTP/1.1 ${res.status} ${res.statusText || 'Error'}`,
    `content-type: ${res.headers.get('content-type') ?? 'text/plain'}`,
    `content-length: ${body.length}`,
    'connection: close',
    '',
    '',
  ].join('\r\n');
  socket.end(Buffer.concat([Buffer.from(head), body]));
}

/** Routes WebSocket upgrades on `server` through `fetch` (the Hono app). Returns a closer. */
export function attachUpgrades(server: Server, fetch: Fetch): () => void {
  const wss = new WebSocketServer({
    noServer: true,
    maxPayload: MAX_PAYLOAD,
    perMessageDeflate: false,
    // `binary` is what noVNC asks for on the VNC endpoint.
    handleProtocols: (protocols) => (protocols.has(PROTOCOL) ? PROTOCOL : protocols.has('binary') ? 'binary' : false),
  });
  const onUpgrade = (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    socket.on('error', () => socket.destroy());
    let onOpen: ((ws: WebSocket) => void) | undefined;
    const ticket: UpgradeTicket = {
      accept(fn) {
        onOpen = fn;
      },
    };
    Promise.resolve()
      .then(() => fetch(toRequest(req), { [KEY]: ticket }))
      .then(async (res) => {
        if (!onOpen || res.status >= 300) {
          await refuse(
            socket,
            res.status >= 300
              ? res
              : new Response('{"error":{"code":"not_found","message":"no WebSocket here"}}', { status: 404, headers: { 'content-type': 'application/json' } }),
          );
          return;
        }
        const open = onOpen;
        wss.handleUpgrade(req, socket, head, (ws) => {
          try {
            open(ws);
          } catch (e) {
            log('error', 'websocket open failed', { error: String(e) });
            ws.close(1011);
          }
        });
      })
      .catch((e) => {
        log('error', 'websocket upgrade failed', { error: String(e) });
        socket.destroy();
      });
  };
  server.on('upgrade', onUpgrade);
  return () => {
    server.off('upgrade', onUpgrade);
    for (const ws of wss.clients) ws.terminate();
    wss.close();
  };
}
