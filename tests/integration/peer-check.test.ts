import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { closeSync, existsSync, fstatSync, mkdirSync, mkdtempSync, readFileSync, rmdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import { checkPeer, pinSocket, withPinnedSocket } from '../../src/host/peer.ts';

// The two guards on the daemon's connections into a session (docs/security.md, "The daemon's connections into a
// session"), on real sockets with the real helper: the peer must be in the given cgroup, and the socket file is
// opened without following any symlink.
/** The deepest cgroup path of this process in any hierarchy (on a hybrid host, the others may be /). */
function deepestCgroup(): string {
  const lines = readFileSync('/proc/self/cgroup', 'utf8').trim().split('\n');
  return lines.map((l) => l.split(':').slice(2).join(':')).sort((a, b) => b.length - a.length)[0]!;
}

/**
 * A cgroup this process is in, below the root of some hierarchy: its own, or (a test run from the root
 * cgroup of every hierarchy, as a CI runner may be) one made for the test, in the v1 pids hierarchy or
 * the v2 one, left again and removed by `undo`.
 */
function ownCgroup(): { path: string; undo: () => void } {
  const deepest = deepestCgroup();
  if (deepest !== '/') return { path: deepest, undo: () => {} };
  const base = existsSync('/sys/fs/cgroup/pids/cgroup.procs') ? '/sys/fs/cgroup/pids' : '/sys/fs/cgroup';
  const name = `drums-test-peer-${randomBytes(4).toString('hex')}`;
  mkdirSync(join(base, name));
  writeFileSync(join(base, name, 'cgroup.procs'), String(process.pid));
  return {
    path: `/${name}`,
    undo: () => {
      writeFileSync(join(base, 'cgroup.procs'), String(process.pid));
      rmdirSync(join(base, name));
    },
  };
}

function connected(path: string): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = connect(path);
    s.once('connect', () => resolve(s));
    s.once('error', reject);
  });
}

describe('checkPeer and pinSocket', () => {
  let dir: string;
  let server: Server;
  before(async () => {
    dir = mkdtempSync('/tmp/drums-test-peer-');
    mkdirSync(join(dir, 'sub'));
    server = createServer((c) => c.end('hello'));
    await new Promise<void>((r) => server.listen(join(dir, 'sub', 'sock'), r));
  });
  after(() => {
    server.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('accepts a peer in the cgroup or below it, refuses any other cgroup', async () => {
    const own = ownCgroup();
    const sock = await connected(join(dir, 'sub', 'sock'));
    try {
      const ownCgroup = own.path;
      await checkPeer(sock, ownCgroup);
      const parent = ownCgroup.slice(0, ownCgroup.lastIndexOf('/')) || undefined;
      if (parent) await checkPeer(sock, parent);
      await assert.rejects(checkPeer(sock, `${ownCgroup}x`), /served by a process outside/);
      await assert.rejects(checkPeer(sock, '/drums-nobody/s0000000000'), /served by a process outside/);
      await assert.rejects(checkPeer(sock, 'relative'), /not a cgroup path/);
      // The check did not disturb the connection: the server's bytes are still there to read.
      let got = '';
      for await (const chunk of sock) got += chunk;
      assert.equal(got, 'hello');
    } finally {
      sock.destroy();
      own.undo();
    }
  });

  it('pins the socket file itself; a symlink at any component, or a non-socket, is refused', async () => {
    const fd = pinSocket(dir, 'sub/sock');
    try {
      assert.ok(fstatSync(fd).isSocket());
    } finally {
      closeSync(fd);
    }
    assert.equal(
      await withPinnedSocket(dir, 'sub/sock', async (p) => {
        const s = await connected(p);
        let got = '';
        for await (const chunk of s) got += chunk;
        return got;
      }),
      'hello',
    );
    symlinkSync(join(dir, 'sub', 'sock'), join(dir, 'link'));
    symlinkSync(join(dir, 'sub'), join(dir, 'linkdir'));
    writeFileSync(join(dir, 'file'), 'x');
    assert.throws(() => pinSocket(dir, 'link'), /is a symlink: refused/);
    assert.throws(() => pinSocket(dir, 'linkdir/sock'), /is a symlink: refused/);
    assert.throws(() => pinSocket(dir, 'file'), /is not a socket: refused/);
    assert.throws(() => pinSocket(dir, '../x'), /not a plain relative path/);
    assert.throws(() => pinSocket(dir, 'missing'), /ENOENT/);
  });
});
