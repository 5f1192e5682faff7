import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execProcess, OciRuntime } from '../../src/host/oci-runtime.ts';

describe('exec process (runtime exec --process)', () => {
  const base = {
    terminal: false,
    user: { uid: 1000, gid: 1000, additionalGids: [1000] },
    args: ['/usr/bin/tini'],
    env: ['PATH=/bin', 'HOME=/home/user', 'DRUMS_SESSION_ID=s1'],
    cwd: '/home/user',
    capabilities: { bounding: ['CAP_CHOWN', 'CAP_KILL'], effective: [], permitted: [], inheritable: [], ambient: [] },
    noNewPrivileges: true,
    oomScoreAdj: 500,
  };

  it("is the container's process with what --user/--cwd/--env/--cap changed", () => {
    const p = execProcess(base, { uid: 0, gid: 0, cwd: '/root', env: { HOME: '/root', FOO: 'bar' }, caps: ['CAP_KILL', 'CAP_SETUID'], args: ['id'] });
    assert.deepEqual(p.user, { uid: 0, gid: 0, additionalGids: [1000] });
    assert.deepEqual(p.args, ['id']);
    assert.equal(p.cwd, '/root');
    // The last of a name wins; the container's own variables stay.
    assert.deepEqual(p.env, ['PATH=/bin', 'DRUMS_SESSION_ID=s1', 'HOME=/root', 'FOO=bar']);
    assert.deepEqual(p.capabilities, {
      bounding: ['CAP_CHOWN', 'CAP_KILL', 'CAP_SETUID'],
      effective: ['CAP_KILL', 'CAP_SETUID'],
      permitted: ['CAP_KILL', 'CAP_SETUID'],
      inheritable: [],
      ambient: [],
    });
    assert.equal(p.noNewPrivileges, true);
    assert.equal(p.oomScoreAdj, 500);
    assert.deepEqual(base.env, ['PATH=/bin', 'HOME=/home/user', 'DRUMS_SESSION_ID=s1'], 'the base is not changed');
  });

  it('an exec into a container it cannot prepare exits 1 with why, and never throws', async () => {
    const rt = new OciRuntime({ name: 'runc', path: '/bin/false' }, '/nonexistent-drums-runc-root');
    const child = rt.spawnExec('nope', { uid: 1000, gid: 1000, cwd: '/', env: { SECRET: 'x' }, caps: [], args: ['true'] });
    let err = '';
    child.stderr!.on('data', (d: Buffer) => (err += d));
    const code = await new Promise((resolve) => child.on('close', resolve));
    assert.equal(code, 1);
    assert.match(err, /runc exec: container nope: .*not found/);
    assert.doesNotMatch(err, /SECRET/);
  });
});
