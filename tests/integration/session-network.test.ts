import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { HOST_ROUTES_LOCK } from '../../bench/audit.ts';
import type { SessionInfo } from '../../src/client/client.ts';
import { acquireLock, type LockHandle } from '../../src/image/lock.ts';
import { assertClean, removeStateDir, runPrefix, startDaemon, type TestDaemon } from '../helpers.ts';

/**
 * The egress policy, tested only against listeners this test starts: on the
 * sessions' gateway addresses (host side) and in a network namespace it makes
 * that stands in for "the internet", cloud metadata and private networks.
 */
const ip = (...args: string[]) => execFileSync('ip', args, { encoding: 'utf8' });
const FAKE = {
  public: '203.0.113.10', // TEST-NET-3: stands in for an internet host
  metadata: '169.254.169.254',
  private10: '10.77.0.10',
  private172: '172.16.77.10',
  private192: '192.168.77.10',
  cgnat: '100.64.77.10',
};

describe('network policy', () => {
  const prefix = runPrefix();
  const ns = `drtest-${prefix}`;
  const vh = `${prefix}x`; // host end of the link to the fake world
  const port = 20000 + Math.floor(Math.random() * 5000);
  const forwardBefore = readFileSync('/proc/sys/net/ipv4/ip_forward', 'utf8').trim();
  let d: TestDaemon;
  let open: SessionInfo; // egress on, may reach port on its gateway
  let closed: SessionInfo; // egress off
  let fakeServer: ChildProcess | undefined;
  const hostServers: Server[] = [];

  const probe = async (s: SessionInfo, host: string, p = port) => {
    const r = await d.client.exec(s.id, { argv: ['timeout', '2', 'bash', '-c', `exec 3<>/dev/tcp/${host}/${p}`], timeoutMs: 10_000 });
    return r.exitCode === 0 ? 'open' : 'blocked';
  };
  const listenHost = (addr: string, p: number) =>
    new Promise<void>((res, rej) => {
      const srv = createServer((sock) => sock.end()).listen(p, addr, () => res());
      srv.on('error', rej);
      hostServers.push(srv);
    });

  let routes: LockHandle | undefined;
  before(async () => {
    // The fake world: a namespace holding every target address, routed via the host (host-wide
    // routes, as the isolation audit makes: one of the two at a time).
    routes = await acquireLock(HOST_ROUTES_LOCK, { timeoutMs: 20 * 60_000 });
    ip('netns', 'add', ns);
    ip('link', 'add', vh, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns);
    ip('addr', 'add', '198.51.100.1/30', 'dev', vh);
    ip('link', 'set', vh, 'up');
    ip('-n', ns, 'addr', 'add', '198.51.100.2/30', 'dev', 'eth0');
    ip('-n', ns, 'link', 'set', 'eth0', 'up');
    ip('-n', ns, 'link', 'set', 'lo', 'up');
    ip('-n', ns, 'route', 'add', 'default', 'via', '198.51.100.1');
    for (const a of Object.values(FAKE)) {
      ip('-n', ns, 'addr', 'add', `${a}/32`, 'dev', 'lo');
      ip('route', 'add', `${a}/32`, 'via', '198.51.100.2');
    }
    fakeServer = spawn('ip', ['netns', 'exec', ns, '/usr/bin/python3', '-m', 'http.server', String(port), '--bind', '0.0.0.0'], { stdio: 'ignore' });
    // Wait until the fake world answers (from the host, through the route).
    for (let i = 0; i < 100; i++) {
      try {
        execFileSync('timeout', ['1', 'bash', '-c', `exec 3<>/dev/tcp/${FAKE.public}/${port}`]);
        break;
      } catch {
        await new Promise((r) => setTimeout(r, 100));
      }
    }
    d = await startDaemon();
    open = await d.client.createSession({ image: 'minimal', egress: true, hostPorts: [port] });
    closed = await d.client.createSession({ image: 'minimal' });
    await listenHost(open.network.gateway, port);
    await listenHost(open.network.gateway, port + 1);
    await listenHost(closed.network.gateway, port);
    await listenHost('198.51.100.1', port);
  });

  after(async () => {
    const quiet = (f: () => unknown) => {
      try {
        f();
      } catch {}
    };
    for (const s of hostServers) s.close();
    if (d) {
      for (const s of [open, closed]) if (s) await d.client.destroySession(s.id).catch(() => {});
      await d.stop();
    }
    if (fakeServer && fakeServer.exitCode === null) {
      const gone = new Promise((r) => fakeServer!.once('exit', r));
      fakeServer.kill('SIGTERM');
      await gone;
    }
    for (const a of Object.values(FAKE)) quiet(() => execFileSync('ip', ['route', 'del', `${a}/32`], { stdio: 'ignore' }));
    quiet(() => execFileSync('ip', ['netns', 'del', ns]));
    quiet(() => execFileSync('ip', ['link', 'del', vh], { stdio: 'ignore' }));
    routes?.release();
    assert.ok(!ip('netns', 'list').includes(ns));
    assert.ok(!ip('link', 'show').includes(vh + ':'));
    if (d) {
      assertClean(d.instance, d.stateDir);
      removeStateDir(d.stateDir);
    }
    assert.equal(readFileSync('/proc/sys/net/ipv4/ip_forward', 'utf8').trim(), forwardBefore, 'ip_forward restored');
  });

  it('a session with egress reaches an internet address, but no private, metadata, CGNAT or loopback range', async () => {
    assert.equal(await probe(open, FAKE.public), 'open');
    for (const [name, addr] of Object.entries(FAKE)) {
      if (name !== 'public') assert.equal(await probe(open, addr), 'blocked', `${name} ${addr}`);
    }
  });

  it('egress is off by default', async () => {
    assert.equal(await probe(closed, FAKE.public), 'blocked');
    assert.equal(await probe(closed, FAKE.metadata), 'blocked');
  });

  it('a session reaches the host only at its own gateway, on its allowed ports', async () => {
    assert.equal(await probe(open, open.network.gateway, port), 'open');
    assert.equal(await probe(open, open.network.gateway, port + 1), 'blocked', 'port not in hostPorts');
    assert.equal(await probe(open, closed.network.gateway, port), 'blocked', "another session's gateway");
    assert.equal(await probe(open, '198.51.100.1', port), 'blocked', 'another host address');
    assert.equal(await probe(closed, closed.network.gateway, port), 'blocked', 'no hostPorts given');
  });

  it('sessions cannot reach each other, and IPv6 is off inside', async () => {
    assert.equal(await probe(open, closed.network.address, 22), 'blocked');
    assert.equal(await probe(closed, open.network.address, 22), 'blocked');
    const v6 = await d.client.exec(closed.id, { argv: ['cat', '/proc/sys/net/ipv6/conf/all/disable_ipv6'] });
    assert.equal(v6.stdout.trim(), '1');
    const addrs = await d.client.exec(closed.id, { argv: ['cat', '/proc/net/if_inet6'] });
    assert.equal(addrs.stdout.trim(), '', 'no IPv6 addresses in the session');
  });
});
