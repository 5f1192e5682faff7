import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { apiError, residue, startDaemon, type TestDaemon } from '../helpers.ts';

// Issue 29, bad input: a memory fork whose copy fails midway leaves nothing behind (no container,
// netns, cgroup, uid range, mount, loop device or session directory), at every step of the copy's
// create, and also inside the restore after CRIU made the container (the test hook 'restored').
// A source per step (the hook is the source's label); the sources have no browser, so they are quick.
describe('fork (memory): a copy that fails at any step leaves nothing behind', () => {
  let d: TestDaemon;
  before(async () => {
    d = await startDaemon({ DRUMS_TEST_HOOKS: '1', DRUMS_MAX_SESSIONS: '3' });
  });
  after(async () => {
    await d.finish();
  });

  /** What the instance holds, without the source's own processes (their pids come and go). */
  const held = (srcId: string): Record<string, string[]> => {
    const r = residue(d.instance, d.stateDir);
    const strays = r.procs!.filter((pid) => {
      try {
        return !readFileSync(`/proc/${pid}/cgroup`, 'utf8').includes(srcId);
      } catch {
        return false;
      }
    });
    return { ...r, procs: strays };
  };

  it('at each step of the copy, and inside the restore: 500 fork_failed, the source runs on, nothing else is left', async () => {
    // The create's steps, as the daemon names them (its timings), then the point inside the restore.
    const probe = await d.client.createSession({ image: 'default' });
    const steps = Object.keys(probe.timings)
      .filter((k) => k.startsWith('step.'))
      .map((k) => k.slice('step.'.length, -'Ms'.length));
    await d.client.destroySession(probe.id);
    assert.ok(steps.includes('container') && steps.includes('userns'), `steps: ${steps.join(', ')}`);
    steps.splice(steps.indexOf('container') + 1, 0, 'restored');
    const failures: string[] = [];
    for (const step of steps) {
      const src = await d.client.createSession({ image: 'default', labels: { 'drums.test.forkFailStep': step } });
      try {
        await d.client.exec(src.id, { shell: 'echo keep > /tmp/k' });
        const before = held(src.id);
        const e = await apiError(() => d.client.forkSession(src.id, { count: 1, mode: 'memory' }));
        const after = held(src.id);
        const left = Object.keys(after).filter((k) => JSON.stringify(after[k]) !== JSON.stringify(before[k]));
        const ckpts = readdirSync(join(d.stateDir, 'sessions', src.id)).filter((f) => f.startsWith('ckpt-'));
        const ok =
          e.status === 500 &&
          e.code === 'fork_failed' &&
          (await d.client.listSessions()).length === 1 &&
          (await d.client.getSession(src.id)).state === 'ready' &&
          (await d.client.exec(src.id, { argv: ['cat', '/tmp/k'] })).stdout === 'keep\n' &&
          !left.length &&
          !ckpts.length;
        if (!ok)
          failures.push(
            `${step}: ${e.status} ${e.code}; left: ${JSON.stringify(Object.fromEntries(left.map((k) => [k, after[k]])))}; checkpoints ${ckpts.join(',')}`,
          );
      } finally {
        await d.client.destroySession(src.id).catch(() => {});
      }
    }
    assert.deepEqual(failures, [], `steps tried: ${steps.join(', ')}`);
  });
});
