import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { missingOsworldTasks, osworldTasksDir } from '../../src/testing/osworld-data.ts';
import { DRUMS, ROOT, skipUnlessCI } from '../helpers.ts';

// `drums bench osworld-run` on three real `os` tasks (read from the shared task data, never copied
// into the repo): two that run offline and one the driver refuses as needing the internet, at two
// --parallel levels; and a level stopped at its deadline is recorded as incomplete with what it finished.
const OS = join(osworldTasksDir(), 'os');
const OFFLINE = ['13584542-872b-42d8-b299-866967b5c3ef', '28cc3b7e-b194-4bc9-8353-d04c0f4d56d2'];
const WEB = '23393935-50c7-4a86-aeea-2b78fd089c5c';

type Level = {
  parallel: number;
  complete: boolean;
  reason?: string;
  wallSeconds: number;
  summary: Record<string, number>;
  loadavg: { samples: number; load1Median: number };
  tasks: { task: string; domain: string; outcome: string }[];
};
type Rec = { kind: string; complete: boolean; levels: Level[]; ratios: Record<string, number> };

const bench = (out: string, args: string[]): Rec => {
  execFileSync(DRUMS, ['bench', 'osworld-run', ...args, '--out', out], { cwd: ROOT, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 900_000 });
  const files = readdirSync(out);
  assert.equal(files.length, 1, String(files));
  return JSON.parse(readFileSync(join(out, files[0]!), 'utf8')) as Rec;
};

describe('DrumsBench osworld-run', { skip: skipUnlessCI(missingOsworldTasks(['os'])) }, () => {
  const dirs: string[] = [];
  const tmp = () => {
    const d = mkdtempSync('/var/tmp/drums-bench-oswr-test-');
    dirs.push(d);
    return d;
  };
  after(() => {
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });

  it('times each --parallel level and records every task outcome and the load average', () => {
    const files = [...OFFLINE, WEB].map((t) => join(OS, `${t}.json`));
    const r = bench(tmp(), ['--parallel', '1,2', ...files]);
    assert.equal(r.kind, 'osworld-run');
    assert.equal(r.complete, true, JSON.stringify(r.levels.map((l) => l.reason)));
    assert.deepEqual(
      r.levels.map((l) => l.parallel),
      [1, 2],
    );
    for (const l of r.levels) {
      assert.ok(l.wallSeconds > 0);
      assert.equal(l.tasks.length, 3);
      const by = Object.fromEntries(l.tasks.map((t) => [t.task, t.outcome]));
      for (const t of OFFLINE) assert.equal(by[t], 'ran-0', JSON.stringify(l.tasks));
      assert.equal(by[WEB], 'refused');
      assert.ok(l.tasks.every((t) => t.domain === 'os'));
      assert.equal(l.summary.ran, 2);
      assert.ok(l.loadavg.samples >= 2 && l.loadavg.load1Median >= 0);
    }
    assert.ok(r.ratios.p1_over_p2 > 0);
  });

  it('stops a level at its deadline and records it as incomplete with the tasks it finished', () => {
    const r = bench(tmp(), ['--parallel', '1', '--level-minutes', '0.02', join(OS, `${OFFLINE[0]}.json`), join(OS, `${WEB}.json`)]);
    assert.equal(r.complete, false);
    const l = r.levels[0]!;
    assert.equal(l.complete, false);
    assert.match(l.reason ?? '', /deadline/);
    assert.ok(l.tasks.length < 2, JSON.stringify(l.tasks));
  });
});
