/**
 * Who is on the other end of a loopback TCP connection: the owner uid of the peer's socket, from the kernel's
 * /proc/net/tcp. Used by `drums session vnc`, whose port serves a session's screen to whoever connects: only the
 * CLI's own uid (and root) may.
 *
 * The match is exact: the peer's address and port as the socket's local end, this end's address and port as its
 * remote end, and state ESTABLISHED (01). A looser match (ports only, any state) can be fooled: a closed connection
 * lingers in TIME_WAIT with uid 0, and a twin from another loopback address shares the ports (issue 27, finding 2).
 */
import { readFileSync } from 'node:fs';
import { isIPv4 } from 'node:net';

const ESTABLISHED = '01';

/** `a.b.c.d:port` as /proc/net/tcp writes it: the address as the host-order hex of its 32 bits, the port in hex. */
function procAddr(ip: string, port: number): string {
  const b = ip.split('.').map(Number);
  const le = ((b[3]! << 24) | (b[2]! << 16) | (b[1]! << 8) | b[0]!) >>> 0;
  return `${le.toString(16).toUpperCase().padStart(8, '0')}:${port.toString(16).toUpperCase().padStart(4, '0')}`;
}

/** The uid owning the peer socket of `sock` (an accepted IPv4 loopback connection), or undefined if not found. */
export function loopbackPeerUid(
  sock: { remoteAddress?: string; remotePort?: number; localAddress?: string; localPort?: number },
  table?: string,
): number | undefined {
  const { remoteAddress: ra, remotePort: rp, localAddress: la, localPort: lp } = sock;
  if (!ra || !la || rp === undefined || lp === undefined || !isIPv4(ra) || !isIPv4(la)) return undefined;
  let text = table;
  if (text === undefined) {
    try {
      text = readFileSync('/proc/net/tcp', 'utf8');
    } catch {
      return undefined;
    }
  }
  const local = procAddr(ra, rp);
  const remote = procAddr(la, lp);
  for (const line of text.split('\n')) {
    const f = line.trim().split(/\s+/);
    if (f[1] === local && f[2] === remote && f[3] === ESTABLISHED) return Number(f[7]);
  }
  return undefined;
}
