import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { chmodSync, chownSync, mkdirSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import { connectAs } from '../../src/host/userns.ts';
import { ROOT } from '../helpers.ts';

// connectAs: the daemon's own connections into a user-namespace session, made as the session's mapped uid.
const UID = 2 ** 30 + 65536 * 9000 + 1000;
const PY = join(ROOT, '.runtime', 'venv', 'bin', 'python');

/** A unix server that answers each connection with its peer's uid and gid (SO_PEERCRED), then closes. */
const PEERCRED_PY = `
import os, socket, struct, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1]); os.chmod(sys.argv[1], 0o777); s.listen(4); print('ready', flush=True)
c, _ = s.accept()
pid, uid, gid = struct.unpack('3i', c.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
c.sendall(f'{uid & 0xffffffff} {gid & 0xffffffff}'.encode()); c.close()
`;

async function readAll(sock: Socket): Promise<string> {
  let out = '';
  for await (const chunk of sock) out += chunk;
  return out;
}

describe('connectAs (drums-userns connect)', () => {
  let dir: string;
  let servers: Server[] = [];
  before(() => {
    dir = mkdtempSync('/tmp/drums-test-connect-');
    chmodSync(dir, 0o755);
  });
  after(() => {
    for (const s of servers) s.close();
    servers = [];
    rmSync(dir, { recursive: true, force: true });
  });

  it('connects with the given host uid and gid as the peer credentials', async () => {
    const run = join(dir, 'run');
    mkdirSync(join(run, 'xdg'), { recursive: true });
    chownSync(join(run, 'xdg'), UID, UID);
    chmodSync(join(run, 'xdg'), 0o700);
    const py = spawn(PY, ['-c', PEERCRED_PY, join(run, 'xdg', 'bus')], { stdio: ['ignore', 'pipe', 'inherit'] });
    try {
      await new Promise<void>((resolve, reject) => {
        py.stdout.once('data', () => resolve());
        py.once('exit', (c) => reject(new Error(`server exited ${c}`)));
      });
      const sock = await connectAs(UID, UID + 1, run, 'xdg/bus');
      assert.equal(await readAll(sock), `${UID} ${UID + 1}`);
    } finally {
      py.kill();
    }
  });

  it('resolves the name as that uid: a symlink to a root-only directory is refused; .. and absolute names are refused', async () => {
    const secret = join(dir, 'secret');
    mkdirSync(secret, { mode: 0o700 });
    const server = createServer((c) => c.end('secret')).listen(join(secret, 's'));
    servers.push(server);
    await new Promise((r) => server.once('listening', r));
    chmodSync(join(secret, 's'), 0o777);
    const run = join(dir, 'run2');
    mkdirSync(run);
    symlinkSync(secret, join(run, 'link'));
    // As root the symlink leads to the socket; as the session's uid it does not.
    await assert.rejects(connectAs(UID, UID, run, 'link/s'), /link\/s: Permission denied/);
    await assert.rejects(connectAs(UID, UID, run, '../secret/s'), /relative path without/);
    await assert.rejects(connectAs(UID, UID, run, join(secret, 's')), /relative path without/);
    await assert.rejects(connectAs(UID, UID, run, 'missing'), /missing: No such file/);
    // And as root it does (the refusals above are the uid's, not a broken helper).
    assert.equal(await readAll(await connectAs(0, 0, run, 'link/s')), 'secret');
  });
});
