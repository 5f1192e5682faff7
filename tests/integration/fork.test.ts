import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { DrumsApiError } from '../../src/client/client.ts';
import { apiError, startDaemon, type TestDaemon } from '../helpers.ts';

// Disk fork on the `minimal` image: copies get the source's files, a fresh identity, and nothing is half-made.
describe('fork (disk)', () => {
  let d: TestDaemon;
  before(async () => {
    d = await startDaemon({ DRUMS_TEST_HOOKS: '1', DRUMS_MAX_SESSIONS: '6' });
  });
  after(async () => {
    await d.finish();
  });

  it('copies files into N sessions with their own identity; the source runs on', async () => {
    const src = await d.client.createSession({ image: 'minimal', labels: { task: 't1' } });
    const made: string[] = [src.id];
    try {
      await d.client.exec(src.id, { shell: 'mkdir -p /home/user/work && echo state-42 > /home/user/work/f && rm /etc/os-release', root: true });
      const srcId = await d.client.exec(src.id, { shell: 'cat /etc/machine-id; hostname' });
      const r = await d.client.forkSession(src.id, { count: 2 });
      made.push(...r.copies.map((c) => c.id));
      assert.equal(r.source, src.id);
      assert.equal(r.mode, 'disk');
      assert.equal(r.copies.length, 2);
      assert.ok(r.timings.pausedMs >= 0 && r.timings.totalMs >= r.timings.snapshotMs);
      const ids = new Set([src.id]),
        addrs = new Set([src.network.address]),
        tokens = new Set([src.attempt.token]);
      const idents = new Set([srcId.stdout]);
      for (const c of r.copies) {
        assert.equal(c.state, 'ready');
        assert.equal(c.generation, 1);
        assert.deepEqual(c.labels, { task: 't1', 'drums.fork.source': src.id, 'drums.fork.mode': 'disk' });
        ids.add(c.id);
        addrs.add(c.network.address);
        tokens.add(c.attempt.token);
        // Files (a change and a whiteout) equal the source's.
        assert.equal((await d.client.exec(c.id, { argv: ['cat', '/home/user/work/f'] })).stdout, 'state-42\n');
        assert.notEqual((await d.client.exec(c.id, { argv: ['test', '-e', '/etc/os-release'] })).exitCode, 0);
        const ident = await d.client.exec(c.id, { shell: 'cat /etc/machine-id; hostname' });
        assert.match(ident.stdout, new RegExp(`^[0-9a-f]{32}\\n${c.id}\\n$`));
        idents.add(ident.stdout);
      }
      assert.equal(ids.size, 3);
      assert.equal(addrs.size, 3);
      assert.equal(tokens.size, 3);
      assert.equal(idents.size, 3);
      // The source runs on, and copies are independent of it and of each other.
      assert.equal((await d.client.getSession(src.id)).state, 'ready');
      await d.client.exec(r.copies[0]!.id, { shell: 'echo changed > /home/user/work/f' });
      assert.equal((await d.client.exec(src.id, { argv: ['cat', '/home/user/work/f'] })).stdout, 'state-42\n');
      assert.equal((await d.client.exec(r.copies[1]!.id, { argv: ['cat', '/home/user/work/f'] })).stdout, 'state-42\n');
    } finally {
      for (const id of made) await d.client.destroySession(id).catch(() => {});
    }
  });

  it('refuses bad forks with stable codes and leaves nothing half-made', async () => {
    const src = await d.client.createSession({ image: 'minimal' });
    const made = [src.id];
    try {
      const cases: [() => Promise<unknown>, number, string][] = [
        [() => d.client.forkSession(src.id, { count: 0 }), 400, 'invalid_fork'],
        [() => d.client.forkSession(src.id, { count: 65 }), 400, 'invalid_fork'],
        [() => d.client.forkSession(src.id, { count: 1, extra: 1 } as never), 400, 'invalid_fork'],
        [() => d.client.forkSession(src.id, { count: 6 }), 429, 'pool_exhausted'],
        [() => d.client.forkSession('s0000000000', { count: 1 }), 404, 'session_not_found'],
      ];
      for (const [p, status, code] of cases) {
        const e = await apiError(p);
        assert.deepEqual([e.status, e.code], [status, code], e.message);
      }
      // Two forks of one source at once: the second is 409 session_forking.
      const [a, b] = await Promise.allSettled([d.client.forkSession(src.id, { count: 1 }), d.client.forkSession(src.id, { count: 1 })]);
      const ok = [a, b].filter((x) => x.status === 'fulfilled') as PromiseFulfilledResult<{ copies: { id: string }[] }>[];
      const bad = [a, b].filter((x) => x.status === 'rejected') as PromiseRejectedResult[];
      for (const o of ok) for (const c of o.value.copies) await d.client.destroySession(c.id);
      assert.equal(ok.length, 1);
      assert.equal((bad[0]!.reason as DrumsApiError).code, 'session_forking');
      // A fork of a resetting source is 409.
      const reset = d.client.resetSession(src.id);
      const during = await apiError(() => d.client.forkSession(src.id, { count: 1 }));
      await reset;
      assert.equal(during.code, 'session_resetting');
      await d.client.exec(src.id, { shell: 'echo keep > /home/user/k' });
      const before = (await d.client.listSessions()).map((s) => s.id).sort();
      // Broken source: kill its processes, wait until the daemon sees it.
      const victim = await d.client.createSession({ image: 'minimal' });
      made.push(victim.id);
      await d.client.exec(victim.id, { shell: 'kill -9 -1', root: true }).catch(() => {});
      const end = Date.now() + 30_000;
      while ((await d.client.getSession(victim.id)).state !== 'broken' && Date.now() < end) await new Promise((r) => setTimeout(r, 100));
      const broken = await apiError(() => d.client.forkSession(victim.id, { count: 1 }));
      assert.equal(broken.code, 'session_broken');
      await d.client.destroySession(victim.id);
      made.pop();
      assert.deepEqual((await d.client.listSessions()).map((s) => s.id).sort(), before);
      assert.equal((await d.client.exec(src.id, { argv: ['cat', '/home/user/k'] })).stdout, 'keep\n');
    } finally {
      for (const id of made) await d.client.destroySession(id).catch(() => {});
    }
  });

  it('a fork whose copy fails midway leaves no copy and the source untouched', async () => {
    const src = await d.client.createSession({ image: 'minimal', labels: { 'drums.test.forkFailStep': 'ready' } });
    try {
      await d.client.exec(src.id, { shell: 'echo keep > /home/user/k' });
      const e = await apiError(() => d.client.forkSession(src.id, { count: 3 }));
      assert.deepEqual([e.status, e.code], [500, 'fork_failed']);
      assert.deepEqual(
        (await d.client.listSessions()).map((s) => s.id),
        [src.id],
      );
      assert.equal((await d.client.getSession(src.id)).state, 'ready');
      assert.equal((await d.client.exec(src.id, { argv: ['cat', '/home/user/k'] })).stdout, 'keep\n');
      // Nothing of the snapshot is left in the source's directory either.
      const left = await d.client.exec(src.id, { shell: 'echo ok' });
      assert.equal(left.stdout, 'ok\n');
    } finally {
      await d.client.destroySession(src.id).catch(() => {});
    }
  });
});
