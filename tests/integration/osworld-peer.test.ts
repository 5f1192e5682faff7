import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createServer, type Server } from 'node:net';
import { startPrivateDaemon, type PrivateDaemon } from '../../src/client/private-daemon.ts';
import { askAs, NOBODY, osworldPeerProbe, probeGuestPort } from '../../bench/host-probes/osworld-peer.ts';
import { TCP_ESTABLISHED, TcpOwners } from '../../src/host/tcp-owner.ts';

// Who may reach a session's OSWorld guest server (issue 27, finding 2 and the Host/Origin part of 7): the
// host probes of `drums audit` (bench/host-probes/osworld-peer.ts) against a private daemon, a uid the
// operator lists, and the owner lookup itself on real sockets.
describe('osworld guest server: who may connect', () => {
  let d: PrivateDaemon;
  before(async () => {
    d = await startPrivateDaemon({ DRUMS_USERNS: '1' });
  });
  after(async () => {
    await d?.stop();
  });

  it('the host probes pass: TIME_WAIT twin, plain and 127.0.0.2 peers refused (guest server, DevTools forwarder); foreign Host and Origin get 403', async () => {
    const probes = await osworldPeerProbe({ d, arm: 'test', progress: () => {} });
    assert.equal(probes.length, 8, JSON.stringify(probes));
    // Every probe that did not pass, each with what it saw.
    assert.deepEqual(
      probes.filter((p) => p.result !== 'pass').map((p) => `${p.id} (${p.as}) ${p.result}: ${p.detail}`),
      [],
    );
    assert.deepEqual(await d.client.listSessions(), [], 'the probe removed its session');
  });

  it('the own origin and loopback Hosts are served, other ports and origins refused; a listed uid connects, still only from 127.0.0.1', async () => {
    const listed = await startPrivateDaemon({ DRUMS_USERNS: '1', DRUMS_OSWORLD_UIDS: String(NOBODY) });
    try {
      const s = (await listed.client.createSession({ image: 'default', labels: { 'drums.osworld': '1' } } as never)) as unknown as {
        id: string;
        osworld: { serverPort: number };
      };
      const port = s.osworld.serverPort;
      const root = await askAs(0, port, {
        same: { origin: `http://127.0.0.1:${port}` },
        sameLocalhost: { host: `localhost:${port}`, origin: `http://localhost:${port}` },
        bare: { host: '127.0.0.1' },
        otherPort: { host: `127.0.0.1:${port === 65535 ? 1 : port + 1}` },
        otherOrigin: { origin: `http://127.0.0.1:${port === 65535 ? 1 : port + 1}` },
        nullOrigin: { origin: 'null' },
      });
      assert.equal(root.same?.status, 200, JSON.stringify(root.same));
      assert.equal(root.sameLocalhost?.status, 200, JSON.stringify(root.sameLocalhost));
      assert.equal(root.bare?.status, 200, `a loopback Host without a port is served: ${JSON.stringify(root.bare)}`);
      assert.equal(root.otherPort?.status, 403, 'a Host naming another port is refused');
      assert.match(root.otherPort?.body ?? '', /forbidden_host/);
      assert.equal(root.otherOrigin?.status, 403, 'another loopback origin is refused');
      assert.equal(root.nullOrigin?.status, 403, 'Origin: null is refused');
      assert.match(root.nullOrigin?.body ?? '', /forbidden_origin/);
      const nobody = await askAs(NOBODY, port, { plain: {}, alias: { src: ['127.0.0.2', 0] } });
      assert.equal(nobody.plain?.status, 200, `uid ${NOBODY} is listed: ${JSON.stringify(nobody.plain)}`);
      assert.match(nobody.plain?.body ?? '', /Linux/);
      assert.equal(nobody.alias?.status, null, `from 127.0.0.2 even a listed uid is refused: ${JSON.stringify(nobody.alias)}`);
      // The probes' verdicts on a daemon that lists 65534: the uid ones do not apply, the address and header ones do.
      const ps = await probeGuestPort('test', port);
      for (const id of ['host.osworld.peer-loopback-alias', 'host.osworld.host-header', 'host.osworld.origin-header']) {
        assert.equal(ps.find((p) => p.id === id)?.result, 'pass', id);
      }
      await listed.client.destroySession(s.id);
    } finally {
      await listed.stop();
    }
  });
});

describe('TcpOwners (sock_diag by the exact 4-tuple)', () => {
  let srv: Server;
  let port: number;
  const owners = new TcpOwners();
  before(async () => {
    srv = createServer((c) => c.on('error', () => {}));
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
    port = (srv.address() as { port: number }).port;
  });
  after(() => {
    owners.close();
    srv.close();
  });

  it("names the owner of a connection's client end, and only that connection", async () => {
    // A client as uid 65534 that connects, prints its port and holds the connection until its stdin closes.
    const child = spawn(
      '/usr/bin/python3',
      ['-c', `import socket,sys\ns=socket.create_connection(('127.0.0.1',${port}))\nprint(s.getsockname()[1],flush=True)\nsys.stdin.read()`],
      { uid: NOBODY, gid: NOBODY, cwd: '/', stdio: ['pipe', 'pipe', 'inherit'] },
    );
    try {
      const c = Number(await new Promise<string>((r) => child.stdout.once('data', (b: Buffer) => r(b.toString().trim()))));
      assert.ok(c > 0);
      assert.deepEqual(await owners.lookup({ address: '127.0.0.1', port: c }, { address: '127.0.0.1', port }), { state: TCP_ESTABLISHED, uid: NOBODY });
      // Another peer address, another port, the server's end the wrong way round: not this connection.
      assert.equal(await owners.lookup({ address: '127.0.0.2', port: c }, { address: '127.0.0.1', port }), undefined);
      assert.equal(await owners.lookup({ address: '127.0.0.1', port: c === 65535 ? 1 : c + 1 }, { address: '127.0.0.1', port }), undefined);
      const back = await owners.lookup({ address: '127.0.0.1', port }, { address: '127.0.0.1', port: c });
      assert.equal(back?.uid, 0, "the server's own end is root's");
      // Many questions at once are answered in order.
      const many = await Promise.all(Array.from({ length: 200 }, () => owners.lookup({ address: '127.0.0.1', port: c }, { address: '127.0.0.1', port })));
      for (const a of many) assert.deepEqual(a, { state: TCP_ESTABLISHED, uid: NOBODY });
    } finally {
      child.kill('SIGKILL');
    }
  });

  it('fails closed: no helper, or a helper that does not answer, gives no owner', async () => {
    const none = new TcpOwners({ helper: '/nonexistent/drums-tcp-owner' });
    assert.equal(await none.lookup({ address: '127.0.0.1', port: 1 }, { address: '127.0.0.1', port }), undefined);
    assert.match(none.lastError, /nonexistent|ENOENT/);
    // tail reads its input and answers nothing before its end: the question times out.
    const mute = new TcpOwners({ helper: '/usr/bin/tail', timeoutMs: 300 });
    const t0 = Date.now();
    assert.equal(await mute.lookup({ address: '127.0.0.1', port: 1 }, { address: '127.0.0.1', port }), undefined);
    assert.ok(Date.now() - t0 < 3000);
    assert.match(mute.lastError, /timeout/);
    // cat answers with the question itself: not an answer.
    const echo = new TcpOwners({ helper: '/usr/bin/cat' });
    assert.equal(await echo.lookup({ address: '127.0.0.1', port: 1 }, { address: '127.0.0.1', port }), undefined);
    for (const o of [none, mute, echo]) o.close();
  });
});
