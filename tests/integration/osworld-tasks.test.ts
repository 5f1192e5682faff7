import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { missingOsworldTasks, osworldTasksDir } from '../../src/testing/osworld-data.ts';
import { DRUMS, ROOT, skipUnlessCI, startDaemon, type TestDaemon } from '../helpers.ts';

// OSWorld's `os` tasks (read from the shared test data, never copied into the repo) through
// `drums osworld run`, i.e. the real desktop_env DesktopEnv with the drums provider.
const TASKS = join(osworldTasksDir(), 'os');
const ORACLE = join(ROOT, 'tests/fixtures/osworld/oracle-os.json');
type Result = { task: string; file: string; setup_ok: boolean; score: number | null; error: string | null; seconds: number; reset_s: number | null };

describe('osworld os tasks on Drums', { skip: skipUnlessCI(missingOsworldTasks(['os'])) }, () => {
  let d: TestDaemon;
  let tmp: string;
  before(async () => {
    d = await startDaemon();
    tmp = mkdtempSync('/tmp/drums-osw-');
  });
  after(async () => {
    await d.finish();
  });

  const run = (args: string[]) => {
    const r = d.cli(['osworld', 'run', ...args]);
    const out = existsSync(join(tmp, 'out.json'))
      ? (JSON.parse(readFileSync(join(tmp, 'out.json'), 'utf8')) as {
          schemaVersion: number;
          config: { parallel: number };
          results: { summary: { tasks: number; wall_seconds: number }; tasks: Result[] };
        })
      : undefined;
    if (out) {
      assert.equal(out.schemaVersion, 1);
      assert.equal(out.results.summary.tasks, out.results.tasks.length);
      assert.ok(out.results.summary.wall_seconds > 0);
    }
    return { ...r, results: out?.results.tasks ?? [] };
  };

  it('offline tasks set up and score 0.0 before acting; tasks needing the web or uncached files fail fast', async () => {
    const r = run([TASKS, '--parallel', '2', '--out', join(tmp, 'out.json')]);
    assert.equal(r.status, 0, r.stderr);
    const all = r.results;
    assert.equal(all.length, readdirSync(TASKS).filter((f) => f.endsWith('.json')).length);
    // The test's daemon has its own (empty) asset cache: cache tasks are refused, naming the URLs.
    const refused = (x: Result) => /^needs the internet|^needs \d+ file\(s\) that are not in the asset cache/.test(x.error ?? '');
    const internet = all.filter(refused);
    const offline = all.filter((x) => !refused(x));
    assert.equal(offline.length, 15);
    assert.equal(internet.length, 9);
    for (const x of internet) assert.ok(x.seconds < 2, `${x.task} took ${x.seconds}s to fail`);
    // A task refused for its uncached files names every URL it would fetch.
    for (const x of internet.filter((y) => /not in the asset cache/.test(y.error ?? ''))) {
      const urls: string[] = [];
      // Every `download` step, in the setup or in the evaluator's postconfig.
      JSON.parse(readFileSync(x.file, 'utf8'), (_k, v: { type?: string; parameters?: { files?: { url: string }[] } }) => {
        if (v?.type === 'download') urls.push(...(v.parameters?.files?.map((f) => f.url) ?? []));
        return v;
      });
      assert.ok(urls.length > 0, x.task);
      for (const u of urls) assert.ok(x.error!.includes(u), `${x.task}: ${x.error} does not name ${u}`);
    }
    for (const x of offline) {
      assert.equal(x.setup_ok, true, `${x.task}: ${x.error}`);
      assert.equal(x.score, 0, `${x.task} scored ${x.score} before acting (${x.error})`);
    }
    assert.deepEqual(await d.client.listSessions(), []);
  });

  it('oracle actions through env.step score 1.0', () => {
    const oracle = JSON.parse(readFileSync(ORACLE, 'utf8')) as Record<string, unknown>;
    const files = Object.keys(oracle).map((id) => join(TASKS, `${id}.json`));
    assert.ok(files.includes(join(TASKS, 'e0df059f-28a6-4169-924f-b9623e7184cc.json')) && files.length >= 5);
    const r = run([...files, '--parallel', '2', '--oracle', ORACLE, '--out', join(tmp, 'out.json')]);
    assert.equal(r.status, 0, r.stderr);
    for (const x of r.results) assert.equal(x.score, 1, `${x.task}: score ${x.score} (${x.error})`);
  });

  it('an observation type that is not one of the four is refused at once, before any session', async () => {
    const r = d.cli(['osworld', 'run', '--observation', 'a11y', join(TASKS, '13584542-872b-42d8-b299-866967b5c3ef.json')]);
    assert.equal(r.status, 2, r.stderr);
    assert.match(r.stderr, /--observation: observation type "a11y" is not one of screenshot, a11y_tree, screenshot_a11y_tree, som/);
    assert.deepEqual(await d.client.listSessions(), []);
  });

  it('an app whose window is gone after the first observation is recorded as lost, and the task is not live', async () => {
    // VLC set up by `launch`, and a watcher the setup starts that ends VLC 4 s after its window maps:
    // after the runner has seen the window (it polls every 0.5 s) and before it looks again, the
    // observation plus DRUMS_OSWORLD_OBSERVE_SETTLE (8 s here) later. The same record marks an app
    // that dies when its tree is read (VLC before 8e7f05d).
    const task = {
      id: 'lost-after-observing',
      instruction: 'x',
      config: [
        { type: 'launch', parameters: { command: ['vlc'] } },
        {
          type: 'execute',
          parameters: {
            command: ['sh', '-c', "setsid -f sh -c 'while ! wmctrl -lx | grep -qi vlc; do sleep 0.2; done; sleep 4; pkill -x vlc' >/dev/null 2>&1 </dev/null"],
          },
        },
      ],
      evaluator: { func: 'infeasible' },
    };
    writeFileSync(join(tmp, 'lost.json'), JSON.stringify(task));
    const out = join(tmp, 'lost-out.json');
    execFileSync(DRUMS, ['osworld', 'run', '--observation', 'screenshot', join(tmp, 'lost.json'), '--out', out], {
      env: { ...d.env, DRUMS_OSWORLD_OBSERVE_SETTLE: '8' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const rec = JSON.parse(readFileSync(out, 'utf8')) as {
      config: { observation: string };
      results: {
        summary: { live: number; lost_app: number };
        tasks: (Result & { missing_windows: string[]; lost: string[]; live: boolean; observation: { ok: boolean } })[];
      };
    };
    const x = rec.results.tasks[0]!;
    assert.equal(rec.config.observation, 'screenshot');
    assert.equal(x.setup_ok, true, x.error ?? '');
    assert.deepEqual(x.missing_windows, [], 'VLC had its window after setup');
    assert.equal(x.observation.ok, true);
    assert.deepEqual(x.lost, ['vlc']);
    assert.equal(x.live, false);
    assert.deepEqual([rec.results.summary.live, rec.results.summary.lost_app], [0, 1]);
    assert.deepEqual(await d.client.listSessions(), []);
  });

  it('malformed tasks and unknown setup types are reported per task; the daemon carries on', async () => {
    writeFileSync(join(tmp, 'bad.json'), '{"id": "bad", ');
    writeFileSync(
      join(tmp, 'unknown.json'),
      JSON.stringify({ id: 'unknown-setup', instruction: 'x', config: [{ type: 'frobnicate', parameters: {} }], evaluator: { func: 'infeasible' } }),
    );
    const r = run([join(tmp, 'bad.json'), join(tmp, 'unknown.json'), '--out', join(tmp, 'out.json')]);
    assert.equal(r.status, 0, r.stderr);
    const [bad, unk] = r.results;
    assert.match(bad!.error ?? '', /malformed task JSON/);
    assert.match(unk!.error ?? '', /frobnicate/);
    assert.equal(unk!.setup_ok, false);
    assert.deepEqual(await d.client.listSessions(), []);
    assert.equal((await fetch(d.url + '/healthz')).status, 200);
  });
});
