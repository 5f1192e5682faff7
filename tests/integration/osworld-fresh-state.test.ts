import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { osworldCheckoutDir, missingOsworldCheckout } from '../../src/testing/osworld-data.ts';
import { DRUMS, skipUnlessCI, startDaemon, type TestDaemon } from '../helpers.ts';

// No task starts solved because of what a fresh `osworld` session holds (issue 28, item 3), scored by
// the user's own OSWorld checkout (`drums osworld run --osworld-src`), whose getters desktop-env 1.0.2
// lacks. Each check has a positive control: the same getter, with the state the task asks for, scores
// 1.0, so a 0.0 cannot come from a getter that reads nothing.
const SRC = osworldCheckoutDir();
const EXAMPLES = join(SRC, 'evaluation_examples', 'examples');
const DARK_MODE = join(EXAMPLES, 'chrome', '93eabf48-6a27-4cb6-b963-7d5fe1e0d3a9.json');
const missing = skipUnlessCI(missingOsworldCheckout() ?? (existsSync(DARK_MODE) ? null : `the OSWorld checkout at ${SRC} has no chrome task 93eabf48`));

type Result = { task: string; setup_ok: boolean; score: number | null; error: string | null };

describe('osworld: a fresh session starts no task solved (the checkout’s evaluators)', { skip: missing }, () => {
  let d: TestDaemon;
  let tmp: string;
  before(async () => {
    d = await startDaemon();
    tmp = mkdtempSync('/tmp/drums-osw-fresh-');
  });
  after(async () => {
    try {
      await d.finish();
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  });

  /** `drums osworld run --osworld-src SRC` (async, so the test can watch the daemon meanwhile). */
  const run = async (files: string[], extra: string[] = [], watch?: () => Promise<void>): Promise<Result[]> => {
    const out = join(tmp, `out-${Date.now()}.json`);
    const child = spawn(DRUMS, ['osworld', 'run', '--osworld-src', SRC, ...files, '--parallel', '2', '--out', out, ...extra], {
      env: d.env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let log = '';
    child.stdout.on('data', (b: Buffer) => (log += b.toString()));
    child.stderr.on('data', (b: Buffer) => (log = (log + b.toString()).slice(-20000)));
    const done = new Promise<number | null>((res) => child.on('close', res));
    let stop = false;
    const watching = (async () => {
      while (watch && !stop) {
        await watch();
        await new Promise((r) => setTimeout(r, 300));
      }
    })();
    const code = await done;
    stop = true;
    await watching;
    assert.equal(code, 0, log);
    const results = (JSON.parse(readFileSync(out, 'utf8')) as { results: { tasks: Result[] } }).results.tasks;
    return results;
  };
  const byId = (rs: Result[]) => Object.fromEntries(rs.map((r) => [r.task, r]));
  const write = (task: Record<string, unknown>) => {
    const f = join(tmp, `${String(task.id)}.json`);
    writeFileSync(f, JSON.stringify(task));
    return f;
  };

  it('chrome 93eabf48 (turn dark mode off) scores 0.0 set up, 1.0 with the Classic theme', async () => {
    // The real task, and a control: its own setup plus extensions.theme.system_theme 0, what a click on
    // Settings > Appearance > Theme "Classic" writes (with GTK, Chromium follows the desktop's colour
    // scheme; with Classic, the getter reads light).
    const task = JSON.parse(readFileSync(DARK_MODE, 'utf8')) as { id: string; config: { type: string; parameters: { command: unknown } }[] };
    const cmd = task.config[0]!.parameters.command as string;
    const dump = "json.dump(d, open(p, 'w'))";
    assert.ok(cmd.includes("['color_scheme2'] = 2") && cmd.includes(dump), 'the task sets dark mode as it did when this test was written');
    const classic = structuredClone(task);
    classic.id = 'classic-theme-control';
    classic.config[0]!.parameters.command = cmd.replace(dump, `d.setdefault('extensions', {}).setdefault('theme', {})['system_theme'] = 0; ${dump}`);
    const r = byId(await run([DARK_MODE, write(classic)]));
    const dark = r[task.id]!;
    assert.equal(dark.setup_ok, true, dark.error ?? '');
    // Chromium takes its default theme from the desktop: on an unknown one (openbox) "Classic", which
    // the getter reads as light; on the VM's GNOME, GTK (docs/osworld.md, "Fresh state").
    assert.equal(dark.score, 0, `93eabf48 scored ${dark.score} before any action (${dark.error})`);
    const c = r['classic-theme-control']!;
    assert.equal(c.setup_ok, true, c.error ?? '');
    assert.equal(c.score, 1, `the Classic theme scored ${c.score}: the getter did not read the settings page`);
  });

  it('Chrome writes no default content setting at first start (get_data_delete_automacally is "false")', async () => {
    // A task like OSWorld's held-back "delete browsing data on exit" one: Chrome started by the task,
    // stopped by the postconfig (so Preferences is flushed), the checkout's getter and exact_match "true".
    const task = (id: string, pre: string) => ({
      id,
      snapshot: 'chrome',
      instruction: 'fresh-state check',
      config: [
        { type: 'execute', parameters: { command: pre, shell: true } },
        { type: 'launch', parameters: { command: ['google-chrome', '--remote-debugging-port=1337'] } },
        { type: 'sleep', parameters: { seconds: 8 } },
      ],
      related_apps: ['chrome'],
      evaluator: {
        postconfig: [{ type: 'execute', parameters: { command: 'pkill chrome; sleep 4', shell: true } }],
        func: 'exact_match',
        result: { type: 'data_delete_automacally' },
        expected: { type: 'rule', rules: { expected: 'true' } },
      },
    });
    // The control sets "block cookies by default" (what the settings page writes) before Chrome starts.
    const block =
      `python3 -c "import json; p='/home/user/.config/google-chrome/Default/Preferences'; d=json.load(open(p)); ` +
      `d.setdefault('profile', {}).setdefault('default_content_setting_values', {})['cookies'] = 2; json.dump(d, open(p, 'w'))"`;
    const r = byId(await run([write(task('fresh-profile', 'true')), write(task('content-setting-control', block))]));
    assert.equal(r['fresh-profile']!.setup_ok, true, r['fresh-profile']!.error ?? '');
    assert.equal(r['fresh-profile']!.score, 0, 'a fresh profile has profile.default_content_setting_values: the task would start solved');
    assert.equal(r['content-setting-control']!.score, 1, `the control scored ${r['content-setting-control']!.score}`);
  });

  it('--allow-internet gives the sessions egress (chrome 7b6c7e24 needs amazon.com to set cookies)', async () => {
    // Offline, a web page sets no cookie, and "delete the amazon.com cookies" scores 1.0 before acting.
    // A session of a --allow-internet run must be able to reach the web; this host has none, so the
    // test checks the sessions the run makes, with a task that only waits.
    const f = write({
      id: 'egress-check',
      instruction: 'x',
      config: [{ type: 'sleep', parameters: { seconds: 6 } }],
      evaluator: { func: 'infeasible' },
    });
    const seen = new Map<string, boolean>();
    const watch = async () => {
      for (const s of await d.client.listSessions().catch(() => [])) seen.set(s.id, s.network.egress);
    };
    const offline = await run([f], [], watch);
    assert.equal(offline[0]!.setup_ok, true, offline[0]!.error ?? '');
    assert.ok(seen.size >= 1 && [...seen.values()].every((e) => !e), `without --allow-internet: ${JSON.stringify([...seen])}`);
    seen.clear();
    const online = await run([f], ['--allow-internet'], watch);
    assert.equal(online[0]!.setup_ok, true, online[0]!.error ?? '');
    assert.ok(seen.size >= 1 && [...seen.values()].every((e) => e), `with --allow-internet: ${JSON.stringify([...seen])}`);
    assert.deepEqual(await d.client.listSessions(), []);
  });
});
