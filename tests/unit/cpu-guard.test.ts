import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CpuGuard, type CpuGuardOptions } from '../../src/host/cpu-guard.ts';

/** A cgroup tree in a temporary directory with the v1 or v2 file names, and a guard over it. */
function fixture(v2: boolean, ids: string[], opts: Partial<CpuGuardOptions> = {}) {
  const root = mkdtempSync(join(tmpdir(), 'drums-cpu-guard-'));
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
  const guard = new CpuGuard(() => new Map(ids.map((id) => [id, cg(id)])), { root, v2, ...opts });
  return {
    root,
    guard,
    normal,
    weight,
    idle,
    /** Adds `cores` × `ms` of CPU time to a session's counter. */
    use(id: string, cores: number, ms: number) {
      used[id]! += cores * ms * 1e6;
      set(id);
    },
    /** A reset: the new cgroup's counter starts from 0, at the default weight. */
    reset(id: string) {
      used[id] = 0;
      set(id);
      writeFileSync(weight(id), normal);
      writeFileSync(idle(id), '0');
    },
    demotedNow: (id: string) => readFileSync(weight(id), 'utf8') !== normal && readFileSync(idle(id), 'utf8') === '1',
    done: () => rmSync(root, { recursive: true, force: true }),
  };
}

// The guard's policy on a cgroup tree laid out in a temporary directory (v1 and v2 file names).
for (const v2 of [false, true]) {
  describe(`CPU guard (cgroup ${v2 ? 'v2' : 'v1'} files)`, () => {
    it('demotes a spinning session and one far above its neighbours, never the even ones; probation after the hold', () => {
      const ids = ['spin', 'greedy', 'a', 'b', 'c', 'd'];
      const f = fixture(v2, ids, { graceS: 0 });
      try {
        // Per second: spin 0.9 core, greedy 0.4 (4× the others), a-d 0.1 each, all of it steady.
        const rate: Record<string, number> = { spin: 0.9, greedy: 0.4, a: 0.1, b: 0.1, c: 0.1, d: 0.12 };
        const run = (from: number, to: number) => {
          for (let s = from; s <= to; s++) {
            for (const id of ids) f.use(id, rate[id]!, 1000);
            f.guard.tick(s * 1000);
          }
        };
        run(0, 1);
        assert.deepEqual(f.guard.demoted(), [], 'no verdict before a full window');
        run(2, 3);
        assert.deepEqual(f.guard.demoted().sort(), ['greedy', 'spin']);
        for (const id of ['spin', 'greedy']) assert.ok(f.demotedNow(id), id);
        for (const id of ['a', 'b', 'c', 'd']) assert.equal(readFileSync(f.weight(id), 'utf8'), f.normal, id);
        // Should anything put the weight back while it is demoted, the guard writes it again.
        writeFileSync(f.weight('spin'), f.normal);
        writeFileSync(f.idle('spin'), '0');
        run(4, 4);
        assert.ok(f.demotedNow('spin'));
        // greedy calms down; after the 10 s hold both are on probation: spin, still spinning, is demoted again.
        rate.greedy = 0.1;
        run(5, 11);
        assert.deepEqual(f.guard.demoted().sort(), ['greedy', 'spin']);
        run(12, 13);
        assert.deepEqual(f.guard.demoted(), [], 'both on probation at the normal weight');
        assert.equal(readFileSync(f.idle('spin'), 'utf8'), '0');
        run(14, 16);
        assert.deepEqual(f.guard.demoted(), ['spin']);
        assert.equal(readFileSync(f.weight('greedy'), 'utf8'), f.normal);
        assert.equal(f.guard.demotions, 3);
        assert.ok(existsSync(f.idle('a')));
      } finally {
        f.done();
      }
    });

    it('never demotes a bursty session (a quiet tick in every window), even at a mean the old rule called a hog', () => {
      const ids = ['bursty', 'a', 'b', 'c'];
      const f = fixture(v2, ids, { graceS: 0 });
      try {
        // Ticks of 500 ms. bursty: 1 core for 1.5 s, then 0.05 for 0.5 s, over and over: a mean of 0.76
        // core (over hogCores, 7× the others), but one quiet tick in every 2 s window.
        for (let k = 0; k < 80; k++) {
          f.use('bursty', k % 4 === 3 ? 0.05 : 1, 500);
          for (const id of ['a', 'b', 'c']) f.use(id, 0.1, 500);
          f.guard.tick(k * 500);
          assert.deepEqual(f.guard.demoted(), [], `tick ${k}`);
        }
        // The same session, spinning now: every tick busy.
        for (let k = 80; k < 86; k++) {
          f.use('bursty', 1, 500);
          for (const id of ['a', 'b', 'c']) f.use(id, 0.1, 500);
          f.guard.tick(k * 500);
        }
        assert.deepEqual(f.guard.demoted(), ['bursty']);
        assert.equal(f.guard.demotions, 1);
      } finally {
        f.done();
      }
    });

    it('gives a session graceS after its create and after a reset, and a reset ends a demotion', () => {
      const ids = ['spin', 'a', 'b'];
      const f = fixture(v2, ids);
      try {
        let now = 0;
        const step = (spin: number) => {
          now += 500;
          f.use('spin', spin, 500);
          for (const id of ['a', 'b']) f.use(id, 0.05, 500);
          f.guard.tick(now);
        };
        f.guard.tick(now);
        // Busy from its first moment (a desktop starting up): not judged for 10 s.
        while (now < 9500) {
          step(0.9);
          assert.deepEqual(f.guard.demoted(), [], `at ${now} ms`);
        }
        step(0.9);
        assert.deepEqual(f.guard.demoted(), ['spin'], 'judged once the grace is over');
        assert.ok(f.demotedNow('spin'));
        // A reset: the counter starts again. The demotion ends and the new desktop gets its grace.
        f.reset('spin');
        const resetAt = now;
        step(0.9);
        assert.deepEqual(f.guard.demoted(), []);
        assert.equal(readFileSync(f.weight('spin'), 'utf8'), f.normal);
        assert.equal(readFileSync(f.idle('spin'), 'utf8'), '0');
        while (now < resetAt + 9500) {
          step(0.9);
          assert.deepEqual(f.guard.demoted(), [], `at ${now} ms`);
        }
        step(0.9);
        step(0.9);
        assert.deepEqual(f.guard.demoted(), ['spin']);
        assert.equal(f.guard.demotions, 2);
      } finally {
        f.done();
      }
    });
  });
}
