import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { missingOsworldTasks, osworldTasksDir } from '../../src/testing/osworld-data.ts';
import { ROOT, skipUnlessCI, startDaemon, type TestDaemon } from '../helpers.ts';

// `drums osworld run --group N`: each task set up once, N-1 disk forks, every member scored by the real evaluator.
const TASKS = join(osworldTasksDir(), 'os');
const ORACLE = join(ROOT, 'tests/fixtures/osworld/oracle-os.json');
// Setups that write files the evaluator checks: a directory on the Desktop, a gsettings (dconf) value.
const IDS = ['e0df059f-28a6-4169-924f-b9623e7184cc', 'a4d98375-215b-4a4d-aee9-3d4370fccc41'];
type Member = { origin: string; fork_mode?: string; session: string; score: number | null; error: string | null };
type Result = {
  task: string;
  setup_ok: boolean;
  score: number | null;
  error: string | null;
  group: { size: number; setups: number; forks: number; members: Member[] };
};

describe('osworld GRPO groups', { skip: skipUnlessCI(missingOsworldTasks(['os'])) }, () => {
  let d: TestDaemon;
  let tmp: string;
  before(async () => {
    d = await startDaemon();
    tmp = mkdtempSync('/tmp/drums-oswg-');
  });
  after(async () => {
    await d.finish();
  });

  const run = (args: string[]): Result[] => {
    const out = join(tmp, `out-${Math.random().toString(16).slice(2)}.json`);
    const r = d.cli(['osworld', 'run', ...args, '--out', out]);
    assert.equal(r.status, 0, r.stderr);
    const rec = JSON.parse(readFileSync(out, 'utf8')) as { config: { group: number }; results: { tasks: Result[] } };
    return rec.results.tasks;
  };

  it('forked members score like the set-up one, before and after the oracle acts', async () => {
    const files = IDS.map((id) => join(TASKS, `${id}.json`));
    const acted = run([...files, '--group', '3', '--oracle', ORACLE]);
    const idle = run([files[0]!, '--group', '2']);
    for (const [results, want] of [
      [acted, 1],
      [idle, 0],
    ] as const) {
      for (const x of results) {
        assert.equal(x.setup_ok, true, `${x.task}: ${x.error}`);
        assert.equal(x.error, null, `${x.task}: ${x.error}`);
        assert.deepEqual([x.group.setups, x.group.forks, x.group.members.length], [1, x.group.size - 1, x.group.size]);
        assert.deepEqual(
          x.group.members.map((m) => m.origin),
          ['setup', ...Array(x.group.size - 1).fill('fork')],
        );
        assert.equal(new Set(x.group.members.map((m) => m.session)).size, x.group.size);
        for (const m of x.group.members) {
          assert.equal(m.score, want, `${x.task} ${m.origin} ${m.session}: score ${m.score} (${m.error})`);
          if (m.origin === 'fork') assert.equal(m.fork_mode, 'disk');
        }
      }
    }
    assert.deepEqual(await d.client.listSessions(), []);
  });
});
