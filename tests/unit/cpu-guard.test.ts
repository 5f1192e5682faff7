import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CpuGuard } from '../../src/host/cpu-guard.ts';

// The guard's policy on a cgroup tree laid out in a temporary directory (v1 and v2 file names).
for (const v2 of [false, true]) {
  describe(`CPU guard (cgroup ${v2 ? 'v2' : 'v1'} files)`, () => {
    it('demotes a spinning session and one far above its neighbours, never the even ones; probation after the hold', () => {
      const root = mkdtempSync(join(tmpdir(), 'drums-cpu-guard-'));
      try {
        const ids = ['spin', 'greedy', 'a', 'b', 'c', 'd'];
        const cg = (id: string) => `/drums-t/${id}`;
        const usage = (id: string) => join(root, v2 ? `${cg(id)}/cpu.stat` : `cpuacct${cg(id)}/cpuacct.usage`);
        const weight = (id: string) => join(root, v2 ? `${cg(id)}/cpu.weight` : `cpu${cg(id)}/cpu.shares`);
        const idle = (id: string) => join(weight(id), '..', 'cpu.idle');
        const normal = v2 ? '100' : '1024';
        const used: Record<string, number> = {};
        const set = (id: string) => writeFileSync(usage(id), v2 ? `usage_usec ${Math.round(used[id]! / 1000)}\nuser_usec 0\n` : String(used[id]));
        for (const id of ids) {
          for (const f of [usage(id), weight(id)]) mkdirSync(join(f, '..'), { recursive: true });
          writeFileSync(weight(id), normal);
          writeFileSync(idle(id), '0');
          used[id] = 0;
          set(id);
        }
        const demotedNow = (id: string) => readFileSync(weight(id), 'utf8') !== normal && readFileSync(idle(id), 'utf8') === '1';
        const guard = new CpuGuard(() => new Map(ids.map((id) => [id, cg(id)])), { root, v2 });
        // Per second: spin 0.9 core, greedy 0.4 (4× the others), a-d 0.1 each.
        const rate: Record<string, number> = { spin: 0.9, greedy: 0.4, a: 0.1, b: 0.1, c: 0.1, d: 0.12 };
        const run = (from: number, to: number) => {
          for (let s = from; s <= to; s++) {
            for (const id of ids) {
              used[id]! += rate[id]! * 1e9;
              set(id);
            }
            guard.tick(s * 1000);
          }
        };
        run(0, 1);
        assert.deepEqual(guard.demoted(), [], 'no verdict before a full window');
        run(2, 3);
        assert.deepEqual(guard.demoted().sort(), ['greedy', 'spin']);
        for (const id of ['spin', 'greedy']) assert.ok(demotedNow(id), id);
        for (const id of ['a', 'b', 'c', 'd']) assert.equal(readFileSync(weight(id), 'utf8'), normal, id);
        // A reset gives a new cgroup at the default weight: while demoted, it is demoted again at once.
        writeFileSync(weight('spin'), normal);
        writeFileSync(idle('spin'), '0');
        run(4, 4);
        assert.ok(demotedNow('spin'));
        // greedy calms down; after the 10 s hold both are on probation: spin, still spinning, is demoted again.
        rate.greedy = 0.1;
        run(5, 11);
        assert.deepEqual(guard.demoted().sort(), ['greedy', 'spin']);
        run(12, 13);
        assert.deepEqual(guard.demoted(), [], 'both on probation at the normal weight');
        assert.equal(readFileSync(idle('spin'), 'utf8'), '0');
        run(14, 16);
        assert.deepEqual(guard.demoted(), ['spin']);
        assert.equal(readFileSync(weight('greedy'), 'utf8'), normal);
        assert.equal(guard.demotions, 3);
        assert.ok(existsSync(idle('a')));
      } finally {
        rmSync(root, { recursive: true, force: true });
      }
    });
  });
}
