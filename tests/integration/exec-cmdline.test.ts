import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync } from 'node:fs';
import { startPrivateDaemon, type PrivateDaemon } from '../../src/client/private-daemon.ts';
import { probeExecCmdline } from '../../bench/host-probes/exec-cmdline.ts';

const leftovers = () => readdirSync('/dev/shm').filter((n) => n.startsWith('drums-exec-'));

// Issue 27, finding 7: an exec's argv and env were on the OCI runtime's command line, readable by every local user.
describe('exec: argv and env never reach a command line a local user can read', () => {
  let d: PrivateDaemon;
  before(async () => {
    d = await startPrivateDaemon({ DRUMS_USERNS: '1' });
  });
  after(async () => {
    await d?.stop();
  });

  it('uid 65534 scanning /proc/*/cmdline and /proc/*/environ sees the env secret nowhere and the argv secret only in the command itself', async () => {
    const before = leftovers();
    const probes = await probeExecCmdline({ d, arm: 'test' });
    assert.equal(probes.length, 2);
    for (const p of probes) assert.equal(p.result, 'pass', `${p.id}: ${p.detail}`);
    assert.deepEqual(leftovers(), before, 'process files left in /dev/shm');
  });

  it('an exec keeps the identity, groups, capabilities, environment and cwd it had with --user/--env/--cap', async () => {
    const s = await d.client.createSession({ image: 'default' });
    try {
      const show = 'id; grep -E "^(Cap|NoNewPrivs|Seccomp:)" /proc/self/status; cat /proc/self/oom_score_adj; pwd; env';
      const user = await d.client.exec(s.id, { shell: show, env: { FOO: 'bar', HOME: '/x' } });
      assert.equal(user.exitCode, 0, user.stderr);
      assert.match(user.stdout, /^uid=1000\(user\) gid=1000\(user\) groups=1000\(user\)$/m);
      assert.match(user.stdout, /^CapEff:\t0000000000000000$/m);
      assert.match(user.stdout, /^CapBnd:\t00000000a00405fb$/m);
      assert.match(user.stdout, /^NoNewPrivs:\t1$/m);
      assert.match(user.stdout, /^Seccomp:\t2$/m);
      assert.match(user.stdout, /^500$/m);
      assert.match(user.stdout, /^\/home\/user$/m);
      // The container's own environment, then the exec's (the last of a name wins).
      assert.match(user.stdout, new RegExp(`^DRUMS_SESSION_ID=${s.id}$`, 'm'));
      assert.match(user.stdout, /^FOO=bar$/m);
      assert.deepEqual(user.stdout.match(/^HOME=.*$/gm), ['HOME=/x']);
      const root = await d.client.exec(s.id, { shell: show, root: true, cwd: '/tmp' });
      assert.equal(root.exitCode, 0, root.stderr);
      assert.match(root.stdout, /^uid=0\(root\) gid=0\(root\) groups=0\(root\),1000\(user\)$/m);
      assert.match(root.stdout, /^CapEff:\t00000000a00405fb$/m);
      assert.match(root.stdout, /^CapAmb:\t0000000000000000$/m);
      assert.match(root.stdout, /^\/tmp$/m);
      assert.deepEqual(root.stdout.match(/^(HOME|USER)=.*$/gm)?.sort(), ['HOME=/root', 'USER=root']);
      // stdin and a non-zero exit still pass through.
      const cat = await d.client.exec(s.id, { argv: ['/bin/sh', '-c', 'cat; exit 3'], stdin: 'piped' });
      assert.deepEqual([cat.exitCode, cat.stdout], [3, 'piped']);
    } finally {
      await d.client.destroySession(s.id);
    }
  });
});
