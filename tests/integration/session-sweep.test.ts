import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { DRUMS, assertClean, removeStateDir, residue, startDaemon } from '../helpers.ts';

describe('sweep after a killed daemon', () => {
  it('kill -9 of the daemon, then `drums sweep`, leaves nothing of the instance', async () => {
    const d = await startDaemon();
    try {
      // One session with a user namespace (the default), one with the host ids.
      await Promise.all([
        d.client.createSession({ image: 'minimal' }),
        d.client.createSession({ image: 'minimal', egress: true, hostPorts: [18555], userns: false }),
      ]);
      const before = residue(d.instance, d.stateDir);
      assert.equal(before.netns.length, 2);
      // Per session: the overlay root, its disk (the writable layer's filesystem) and its runtime
      // tmpfs; with a user namespace two more (the bind mount pinning it, and the idmapped image).
      assert.equal(before.mounts.length, 5 + 3, before.mounts.join('\n'));
      assert.equal(before.loops.length, 2);
      assert.ok(before.procs.length > 4, 'session processes are running');
      // SIGKILL the daemon process itself (bin/drums runs it under tini, which then exits too).
      const { pid } = JSON.parse(readFileSync(join(d.stateDir, 'daemon.json'), 'utf8')) as { pid: number };
      process.kill(pid, 'SIGKILL');
      await new Promise((r) => d.proc.once('exit', r));
      // The sessions outlive their daemon until swept.
      assert.equal(residue(d.instance, d.stateDir).netns.length, 2);
      const out = execFileSync(DRUMS, ['sweep', '--json'], { env: d.env, encoding: 'utf8' });
      const report = JSON.parse(out) as { containers: string[]; errors: string[] };
      assert.equal(report.containers.length, 2);
      assert.deepEqual(report.errors, []);
      assertClean(d.instance, d.stateDir);
      // A second sweep finds nothing to do.
      const again = JSON.parse(execFileSync(DRUMS, ['sweep', '--json'], { env: d.env, encoding: 'utf8' })) as { containers: string[] };
      assert.deepEqual(again.containers, []);
    } finally {
      await d.stop();
      execFileSync(DRUMS, ['sweep'], { env: d.env });
      removeStateDir(d.stateDir);
    }
  });

  it('sweep refuses while a live daemon owns the instance, and two instances never touch each other', async () => {
    const d1 = await startDaemon();
    const d2 = await startDaemon();
    try {
      const s1 = await d1.client.createSession({ image: 'minimal' });
      const s2 = await d2.client.createSession({ image: 'minimal' });
      let refused = '';
      try {
        execFileSync(DRUMS, ['sweep'], { env: d1.env, encoding: 'utf8', stdio: 'pipe' });
      } catch (e) {
        refused = String((e as { stderr: string }).stderr);
      }
      assert.match(refused, /daemon_running/);
      // Stopping d1 removes its objects and leaves d2's session alone.
      await d1.stop();
      assertClean(d1.instance, d1.stateDir);
      assert.equal((await d2.client.getSession(s2.id)).state, 'ready');
      const echo = await d2.client.exec(s2.id, { argv: ['true'] });
      assert.equal(echo.exitCode, 0);
      void s1;
    } finally {
      await d1.stop();
      await d2.stop();
      assertClean(d2.instance, d2.stateDir);
      removeStateDir(d1.stateDir);
      removeStateDir(d2.stateDir);
    }
  });
});
