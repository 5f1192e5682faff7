/**
 * On-demand VNC per session: GET /v1/sessions/:id/vnc is a WebSocket carrying raw RFB (what
 * noVNC speaks; subprotocol `binary` or `drums`). The first viewer starts x11vnc inside the
 * session (src/session/vnc-server.ts: through the exec primitive, as the desktop user, on a unix
 * socket in the session's X socket directory); each viewer gets its own connection to it; when
 * the last viewer leaves, x11vnc is stopped. This file is the bridge: the socket pinned, its peer
 * checked, and each viewer's RFB parsed so its input is dropped unless it holds the session's
 * take-over (`?takeover=<id>`, rfb-gate.ts).
 * For standard VNC viewers, `drums session vnc ID` bridges a local TCP port to this socket.
 */
import { closeSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { dirname } from 'node:path';
import type { WebSocket } from 'ws';
import { checkPeer, pinSocket } from '../../host/peer.ts';
import { log } from '../../common/log.ts';
import type { Session } from '../../session/manager.ts';
import { VNC_SOCKET, type VncServers } from '../../session/vnc-server.ts';
import { RfbGateError, RfbInputGate } from './rfb-gate.ts';

/**
 * Attaches one viewer to the session's x11vnc (started for the first, stopped when the last leaves). The
 * viewer's input passes only while `allowInput()` (it holds the take-over); else view-only.
 */
export function attachViewer(servers: VncServers, s: Session, ws: WebSocket, allowInput: () => boolean): void {
  const server = servers.join(s, ws);
  let sock: Socket | undefined;
  const leave = () => {
    sock?.destroy();
    servers.leave(s.id, server, ws);
  };
  ws.on('close', leave);
  ws.on('error', leave);
  server.ready.then(
    () => {
      if (!server.viewers.has(ws)) return;
      // The socket file itself, no symlink followed (pinSocket), then its peer checked (below).
      let fd: number;
      try {
        fd = pinSocket(dirname(server.hostSocket), VNC_SOCKET);
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
