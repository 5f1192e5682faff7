// `drums session vnc`'s gate (src/common/peer-uid.ts): the owner of a loopback peer socket, matched on the exact
// connection (both addresses and ports) and only in state ESTABLISHED, so a TIME_WAIT entry (uid 0) or a twin from
// another loopback address with the same ports never stands in for the real peer; and live, on this host's own table.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createConnection, createServer, type Socket } from 'node:net';
import { loopbackPeerUid } from '../../src/common/peer-uid.ts';

const HEAD = '  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode';
const row = (n: number, local: string, remote: string, st: string, uid: number) =>
  `   ${n}: ${local} ${remote} ${st} 00000000:00000000 00:00000000 00000000 ${String(uid).padStart(5)}        0 ${1000 + n} 1 0000000000000000 20 4 30 10 -1`;

// The CLI listens on 127.0.0.1:5900 (170C); its viewer connected from 127.0.0.1:40000 (9C40).
const viewer = { remoteAddress: '127.0.0.1', remotePort: 40000, localAddress: '127.0.0.1', localPort: 5900 };

test('the exact established connection decides, not a TIME_WAIT or another address with the same ports', () => {
  const table = [
    HEAD,
    row(0, '0100007F:170C', '00000000:0000', '0A', 0), // the listener
    row(1, '0100007F:9C40', '0100007F:170C', '06', 0), // an earlier connection from the same port, in TIME_WAIT
    row(2, '0200007F:9C40', '0100007F:170C', '01', 0), // a twin from 127.0.0.2 with the same ports
    row(3, '0100007F:9C40', '0100007F:170C', '01', 65534), // the viewer's own socket
    row(4, '0100007F:170C', '0100007F:9C40', '01', 0), // the accepted end (the listener's uid)
  ].join('\n');
  assert.equal(loopbackPeerUid(viewer, table), 65534);
  // Only the TIME_WAIT entry and the twin: not found, so refused.
  assert.equal(
    loopbackPeerUid(viewer, [HEAD, row(1, '0100007F:9C40', '0100007F:170C', '06', 0), row(2, '0200007F:9C40', '0100007F:170C', '01', 0)].join('\n')),
    undefined,
  );
  // The twin itself is matched on its own address.
  assert.equal(loopbackPeerUid({ ...viewer, remoteAddress: '127.0.0.2' }, table), 0);
  // Not IPv4: unknown.
  assert.equal(loopbackPeerUid({ ...viewer, remoteAddress: '::1', localAddress: '::1' }, table), undefined);
});

test('live: a loopback connection of this process is owned by this uid', async () => {
  const accepted = new Promise<Socket>((resolve) => {
    const srv = createServer((s) => {
      resolve(s);
      srv.close();
    });
    srv.listen(0, '127.0.0.1', () => {
      const c = createConnection((srv.address() as { port: number }).port, '127.0.0.1');
      c.on('error', () => {});
      accepted.then(() => setTimeout(() => c.destroy(), 200));
    });
  });
  const s = await accepted;
  try {
    assert.equal(loopbackPeerUid(s), process.getuid!());
  } finally {
    s.destroy();
  }
});
