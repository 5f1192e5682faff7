import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CpuGuard } from '../../src/host/cpu-guard.ts';

// The guard's policy on a cgroup tree laid out in a temporary directory (v1 and v2 file names).
for (const v2 of [false, true]) {
  describe(`CPU guard (cgroup ${v2 ? 'v2' : 'v1'} files)`, () => {
    it('demotes a session that keeps the CPU busy, never a bursty one, and restores it when it calms down', () => {
      const root = mkdtempSync(join(tmpdir(), 'drums-cpu-guard-'));
      try {
        const cg = (id: string) => `/drums-t/${id}`;
        const usage = (id: string) => join(root, v2 ? `${cg(id)}/cpu.stat` : `cpuacct${cg(id)}/cpuacct.usage`);
        const weight = (id: string) => join(root, v2 ? `${cg(id)}/cpu.weight` : `cpu${cg(id)}/cpu.shares`);
        const normal = v2 ? '100' : '1024';
        const set = (id: string, ns: number) => writeFileSync(usage(id), v2 ? `usage_usec ${Math.round(ns / 1000)}\nuser_usec 0\n` : String(ns));
        for (const id of ['hog', 'burst', 'idle']) {
          for (const f of [usage(id), weight(id)]) mkdirSync(join(f, '..'), { recursive: true });
          writeFileSync(weight(id), normal);
          set(id, 0);
        }
        const guard = new CpuGuard(() => new Map(['hog', 'burst', 'idle'].map((id) => [id, cg(id)])), { root, v2 });
        const used: Record<string, number> = { hog: 0, burst: 0, idle: 0 };
        // 10 s: the hog spins at 0.9 core; the burst takes 1 core for one second in three; idle does nothing.
        for (let s = 0; s <= 10; s++) {
          if (s > 0) {
            used.hog! += 0.9e9;
            used.burst! += s % 3 === 0 ? 1e9 : 0;
            used.idle! += 0.01e9;
          }
          for (const id of Object.keys(used)) set(id, used[id]!);
          guard.tick(s * 1000);
          if (s < 2) assert.equal(readFileSync(weight('hog'), 'utf8'), normal, 'no verdict before a full window');
        }
        assert.notEqual(readFileSync(weight('hog'), 'utf8'), normal);
        assert.ok(Number(readFileSync(weight('hog'), 'utf8')) < Number(normal) / 10);
        assert.equal(readFileSync(weight('burst'), 'utf8'), normal);
        assert.equal(readFileSync(weight('idle'), 'utf8'), normal);
        assert.deepEqual(guard.demoted(), ['hog']);
        // A reset gives the hog a new cgroup (counter from 0, default weight): still spinning, it is demoted again.
        used.hog = 0;
        writeFileSync(weight('hog'), normal);
        for (let s = 11; s <= 15; s++) {
          used.hog! += 0.9e9;
          set('hog', used.hog!);
          guard.tick(s * 1000);
        }
        assert.notEqual(readFileSync(weight('hog'), 'utf8'), normal);
        // Starved by its neighbours, it gets only 0.1 core but its threads wait for more: still a hog.
        let waited = 0;
        guard.waitOf = (c) => (c === cg('hog') ? waited : 0);
        for (let s = 16; s <= 21; s++) {
          used.hog! += 0.1e9;
          waited += 3e9;
          set('hog', used.hog!);
          guard.tick(s * 1000);
        }
        assert.notEqual(readFileSync(weight('hog'), 'utf8'), normal, 'demand, not what it got, decides');
        // It stops: after a window below the calm level it is back at the normal weight.
        for (let s = 22; s <= 26; s++) {
          used.hog! += 0.05e9;
          set('hog', used.hog!);
          guard.tick(s * 1000);
        }
        assert.equal(readFileSync(weight('hog'), 'utf8'), normal);
        assert.deepEqual(guard.demoted(), []);
        assert.equal(guard.demotions, 1);
      } finally {
        rmSync(root, { recursive: true, force: true });
      }
    });
  });
}
