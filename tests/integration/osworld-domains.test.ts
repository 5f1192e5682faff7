import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { missingOsworldTasks, osworldTasksDir } from '../../src/testing/osworld-data.ts';
import { skipUnlessCI, startDaemon, type TestDaemon } from '../helpers.ts';

// OSWorld's app domains (task files read from the shared test data, never copied into the repo)
// through `drums osworld run`: the real, unmodified desktop_env with the drums provider. Every task
// whose needs can be met here sets up, the apps its setup starts have a window, and it scores 0.0
// before acting (a 1.0 would be a broken environment, not a pass). Tasks that need the internet are
// refused at once, per task. The `os` domain has its own test (osworld-tasks.test.ts).
const TASKS = osworldTasksDir();
const DOMAINS = (process.env.DRUMS_OSWORLD_DOMAINS ?? 'chrome,gimp,libreoffice_calc,libreoffice_impress,libreoffice_writer,vlc,thunderbird,multi_apps').split(
  ',',
);
const REFUSED = /^needs the internet|that are not in the asset cache|lacks the app/;
const NEWER_DESKTOP_ENV = /module 'desktop_env\.evaluators\.(getters|metrics)' has no attribute/;
/** Tasks whose files need no network but whose instruction does (osworld-domains.md §3.2); they are not judged here. */
const WEB_BY_INSTRUCTION = new Map([['bba3381f', "VLC streams an Apple CDN m3u8; its getter reads VLC's status right after setup"]]);
type Result = {
  task: string;
  file: string;
  setup_ok: boolean;
  score: number | null;
  error: string | null;
  seconds: number;
  apps?: string[];
  windows?: Array<{ title: string; className: string }>;
  missing_windows?: string[];
};

describe('osworld app domains on Drums', { skip: skipUnlessCI(missingOsworldTasks(DOMAINS)) }, () => {
  let d: TestDaemon;
  let tmp: string;
  // A loaded 2-core machine starts LibreOffice or Chrome slowly: wait up to 300 s for each task's app windows (under a load average of 70 here, LibreOffice took over 120 s to map a window).
  before(async () => {
    d = await startDaemon({ DRUMS_OSWORLD_WINDOW_WAIT: '300' });
    tmp = mkdtempSync('/tmp/drums-oswd-');
  });
  after(async () => {
    await d.finish();
  });

  it('every task runnable here sets up, shows its apps and scores 0.0 before acting', async () => {
    const dirs = DOMAINS.map((x) => join(TASKS, x));
    const out = join(tmp, 'out.json');
    const r = d.cli(['osworld', 'run', ...dirs, '--parallel', '2', '--out', out]);
    assert.equal(r.status, 0, r.stderr);
    const results = (JSON.parse(readFileSync(out, 'utf8')) as { results: { tasks: Result[] } }).results.tasks;
    const total = dirs.reduce((n, dir) => n + readdirSync(dir).filter((f) => f.endsWith('.json')).length, 0);
    assert.equal(results.length, total);
    // Not runnable here, each refused per task at once: the internet, files not in the (here empty)
    // asset cache, an app the image lacks (VS Code).
    const refused = results.filter((x) => REFUSED.test(x.error ?? ''));
    // Tasks whose getter or metric desktop-env 1.0.2 (PyPI) lacks: they need OSWorld-Verified's own
    // desktop_env (`drums osworld run --osworld-src DIR`).
    const newer = results.filter((x) => NEWER_DESKTOP_ENV.test(x.error ?? ''));
    const web = results.filter((x) => WEB_BY_INSTRUCTION.has(x.task.slice(0, 8)));
    const ran = results.filter((x) => !refused.includes(x) && !newer.includes(x) && !web.includes(x));
    for (const x of refused) assert.ok(x.seconds < 5, `${x.task} took ${x.seconds}s to be refused`);
    // The image lacks VS Code by design (docs/osworld.md, "VS Code"); any other app missing is a broken
    // image, not a task to leave out: otherwise an image without GIMP would pass by refusing every GIMP task.
    for (const x of refused) {
      const lacking = /lacks the app\(s\) this task uses: (.*); use an image/.exec(x.error ?? '')?.[1];
      if (lacking)
        assert.deepEqual(
          lacking.split(', ').filter((a) => !/\(no 'code' command\)$/.test(a)),
          [],
          `${x.task}: ${x.error}`,
        );
    }
    assert.ok(ran.length > 0, 'no task ran');
    // Note: under load an app now and then maps no window within the wait (seen for chrome
    // 3299584d and multi_apps e1fc0df3, which pass alone). Such a task runs once more, alone,
    // and the first miss is printed; any other problem, or a second miss, fails the test.
    const final = new Map<Result, Result>();
    for (const [i, x] of ran.entries()) {
      if (!x.setup_ok || !x.missing_windows?.length) continue;
      console.log(`retrying ${x.task} alone: no window for ${x.missing_windows.join(', ')} at --parallel 2`);
      const again = join(tmp, `again-${i}.json`);
      const r2 = d.cli(['osworld', 'run', x.file, '--out', again]);
      assert.equal(r2.status, 0, r2.stderr);
      final.set(x, (JSON.parse(readFileSync(again, 'utf8')) as { results: { tasks: Result[] } }).results.tasks[0]!);
    }
    const problems: string[] = [];
    for (const x of ran.map((y) => final.get(y) ?? y)) {
      const dom = x.file.split('/').at(-2);
      if (!x.setup_ok) problems.push(`${dom}/${x.task}: setup failed: ${x.error}`);
      else if (x.missing_windows?.length)
        problems.push(
          `${dom}/${x.task}: no window for ${x.missing_windows.join(', ')} (windows: ${x.windows?.map((w) => `${w.title} [${w.className}]`).join('; ')})`,
        );
      else if (x.score !== 0) problems.push(`${dom}/${x.task}: scored ${x.score} before acting (${x.error})`);
    }
    assert.deepEqual(problems, []);
    // Per domain, for the record (docs/osworld.md's table).
    const byDomain: Record<string, Record<string, number>> = {};
    for (const x of results) {
      const e = (byDomain[x.file.split('/').at(-2)!] ??= { total: 0, ran: 0, cache: 0, internet: 0, app: 0, newer: 0, web: 0 });
      e.total!++;
      if (ran.includes(x)) e.ran!++;
      else if (newer.includes(x)) e.newer!++;
      else if (web.includes(x)) e.web!++;
      else if (/asset cache/.test(x.error ?? '')) e.cache!++;
      else if (/lacks the app/.test(x.error ?? '')) e.app!++;
      else e.internet!++;
    }
    console.log(`per domain: ${JSON.stringify(byDomain)}`);
    assert.deepEqual(await d.client.listSessions(), []);
  });
});
