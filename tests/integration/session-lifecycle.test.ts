import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { DrumsApiError } from '../../src/client/client.ts';
import { assertClean, removeStateDir, residue, startDaemon, type TestDaemon } from '../helpers.ts';

// Lifecycle, bad input and failure injection on the `minimal` image (fast).
describe('session lifecycle (minimal image)', () => {
  let d: TestDaemon;
  before(async () => {
    d = await startDaemon({ DRUMS_TEST_HOOKS: '1' });
  });
  after(async () => {
    await d.finish();
  });

  it('creates a ready desktop, execs in it, resets it and destroys it', async () => {
    const s = await d.client.createSession({ image: 'minimal', screen: '1024x768' });
    try {
      assert.equal(s.state, 'ready');
      assert.equal(s.generation, 1);
      assert.match(s.attempt.token, /^[0-9a-f-]{36}$/);
      assert.ok(s.timings.desktopReadyMs! > 0);
      const who = await d.client.exec(s.id, { argv: ['id', '-u'] });
      assert.equal(who.stdout.trim(), '1000');
      const size = await d.client.exec(s.id, { shell: 'xdpyinfo | grep dimensions' });
      assert.match(size.stdout, /1024x768 pixels/);
      // A file written before reset is gone after it: the upper layer is fresh.
      await d.client.exec(s.id, { shell: 'echo before > /home/user/marker' });
      const r = await d.client.resetSession(s.id);
      assert.equal(r.generation, 2);
      assert.notEqual(r.attempt.token, s.attempt.token);
      const gone = await d.client.exec(s.id, { argv: ['cat', '/home/user/marker'] });
      assert.notEqual(gone.exitCode, 0);
      // A non-zero exit is a result, not an error.
      const fail = await d.client.exec(s.id, { shell: 'echo out; echo err >&2; exit 7' });
      assert.deepEqual([fail.exitCode, fail.stdout, fail.stderr], [7, 'out\n', 'err\n']);
      const slow = await d.client.exec(s.id, { argv: ['sleep', '30'], timeoutMs: 300 });
      assert.equal(slow.timedOut, true);
    } finally {
      await d.client.destroySession(s.id);
    }
    assert.deepEqual(await d.client.listSessions(), []);
    await assert.rejects(d.client.getSession(s.id), (e: DrumsApiError) => e.status === 404 && e.code === 'session_not_found');
  });

  it('the CLI creates, lists, execs (passing the exit code) and removes', async () => {
    const created = d.cli(['session', 'create', '--image', 'minimal', '--json']);
    assert.equal(created.status, 0, created.stderr);
    const { id } = JSON.parse(created.stdout) as { id: string };
    try {
      const ls = JSON.parse(d.cli(['session', 'ls', '--json']).stdout) as { id: string }[];
      assert.deepEqual(
        ls.map((x) => x.id),
        [id],
      );
      const got = JSON.parse(d.cli(['session', 'get', id, '--json']).stdout) as { id: string; state: string };
      assert.equal(got.state, 'ready');
      const ex = d.cli(['session', 'exec', id, '--', 'sh', '-c', 'echo hi; exit 3']);
      assert.equal(ex.status, 3);
      assert.equal(ex.stdout, 'hi\n');
      const root = d.cli(['session', 'exec', id, '--root', '--', 'id', '-u']);
      assert.equal(root.stdout.trim(), '0');
      assert.equal(d.cli(['session', 'reset', id]).status, 0);
    } finally {
      assert.equal(d.cli(['session', 'rm', id]).status, 0);
    }
  });

  it('applies the cgroup limits from the spec (memory, pids, cpu)', async () => {
    const s = await d.client.createSession({ image: 'minimal', memoryMb: 512, pids: 200, cpus: 0.5 });
    try {
      // Read through the session's own cgroup namespace: v1 controllers or the v2 unified files.
      const r = await d.client.exec(s.id, {
        shell:
          'cat /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/pids/pids.max /sys/fs/cgroup/cpu/cpu.cfs_quota_us 2>/dev/null || cat /sys/fs/cgroup/memory.max /sys/fs/cgroup/pids.max /sys/fs/cgroup/cpu.max',
      });
      const out = r.stdout.trim().split('\n');
      assert.equal(out[0], String(512 * 1024 * 1024));
      assert.equal(out[1], '200');
      assert.match(out[2]!, /^50000( 100000)?$/);
      // The pids limit bites: a fork bomb stops at the limit and the session survives.
      const bomb = await d.client.exec(s.id, { shell: 'for i in $(seq 400); do sleep 5 & done 2>/dev/null; jobs -p | wc -l', timeoutMs: 20_000 });
      assert.ok(Number(bomb.stdout.trim()) < 200, `started ${bomb.stdout.trim()} sleeps under pids.max=200`);
      assert.equal((await d.client.getSession(s.id)).state, 'ready');
    } finally {
      await d.client.destroySession(s.id);
    }
  });

  it('rejects invalid specs with 4xx and a stable code, creating nothing', async () => {
    const cases: [Record<string, unknown>, number, string][] = [
      [{ image: 'no-such-image' }, 404, 'image_not_found'],
      [{ image: 'minimal', screen: '0x0' }, 400, 'invalid_spec'],
      [{ image: 'minimal', screen: '100000x100000' }, 400, 'invalid_spec'],
      [{ image: 'minimal', memoryMb: -5 }, 400, 'invalid_spec'],
      [{ image: 'minimal', pids: -1 }, 400, 'invalid_spec'],
      [{ image: 'minimal', cpus: -1 }, 400, 'invalid_spec'],
      [{ image: 'minimal', url: 'javascript:alert(1)' }, 400, 'invalid_spec'],
      [{ image: 'minimal', browserFlags: ['--x; rm -rf /'] }, 400, 'invalid_spec'],
      [{ image: 'minimal', bogus: 1 }, 400, 'invalid_spec'],
      [{ image: '../../etc' }, 400, 'invalid_spec'],
    ];
    for (const [spec, status, code] of cases) {
      await assert.rejects(d.client.createSession(spec), (e: DrumsApiError) => {
        assert.equal(e.status, status, `${JSON.stringify(spec)} → ${e.status} ${e.code}`);
        assert.equal(e.code, code);
        return true;
      });
    }
    const r = residue(d.instance, d.stateDir);
    assert.deepEqual([r.netns, r.links, r.mounts, r.claims, r.sessionDirs], [[], [], [], [], []]);
  });

  it('more sessions than the pool holds gets 429 pool_exhausted', async () => {
    const small = await startDaemon({ DRUMS_MAX_SESSIONS: '1' });
    try {
      const a = await small.client.createSession({ image: 'minimal' });
      await assert.rejects(small.client.createSession({ image: 'minimal' }), (e: DrumsApiError) => e.status === 429 && e.code === 'pool_exhausted');
      await small.client.destroySession(a.id);
    } finally {
      await small.stop();
      assertClean(small.instance, small.stateDir);
      removeStateDir(small.stateDir);
    }
  });

  // Create steps ('userns' runs for the default session, which has a user namespace; a failure at 'network' undoes it).
  for (const step of ['userns', 'network', 'firewall', 'rootfs', 'bundle', 'container', 'ready']) {
    it(`a create that fails at '${step}' reports the step and leaves no residue`, async () => {
      await assert.rejects(d.client.createSession({ image: 'minimal', labels: { 'drums.test.failStep': step } }), (e: DrumsApiError) => {
        assert.equal(e.code, 'session_create_failed');
        assert.equal((e.details as { step: string }).step, step);
        return true;
      });
      const r = residue(d.instance, d.stateDir);
      for (const [kind, left] of Object.entries(r)) {
        if (kind === 'tables' || kind === 'cgroupRoots' || kind === 'instanceMounts') continue; // the instance's table and parent cgroup belong to the live daemon
        assert.deepEqual(left, [], `${kind} left after failure at ${step}`);
      }
    });
  }

  it('refuses requests without the token, with a foreign Origin or Host', async () => {
    const noAuth = await fetch(`${d.url}/v1/sessions`);
    assert.equal(noAuth.status, 401);
    const origin = await fetch(`${d.url}/v1/sessions`, { headers: { authorization: `Bearer ${d.token}`, origin: 'http://evil.example' } });
    assert.equal(origin.status, 403);
    assert.equal(((await origin.json()) as { error: { code: string } }).error.code, 'forbidden_origin');
    const bad = await fetch(`${d.url}/v1/sessions/../../etc/passwd`, { headers: { authorization: `Bearer ${d.token}` } });
    assert.ok(bad.status === 404 || bad.status === 400);
  });
});
