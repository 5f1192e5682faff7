import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { missingOsworldCheckout, missingOsworldTasks, osworldCheckoutDir, osworldTasksDir } from '../../src/testing/osworld-data.ts';
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
type CheckoutRec = {
  complete: boolean;
  config: { checkout: string };
  levels: {
    observation: string;
    reason?: string;
    tasks: {
      task: string;
      domain: string;
      outcome: string;
      error: string | null;
      observation?: { ok: boolean; error: string | null; seconds: number } | null;
      live: boolean;
      startedSolved: boolean | null;
      apps: string[];
      lost: string[];
      needs: { files: number; vs_code: boolean };
    }[];
  }[];
};

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

// `drums bench osworld-run --checkout`: an OSWorld checkout's own task files and desktop_env, once per
// observation type, and the per-domain table it writes. A lean sample, a task per domain: five that
// run offline, three of them starting an app (Chrome, VLC, LibreOffice in multi_apps; GIMP's and
// Impress's offline tasks are slow to start and the bench's full record covers them), and three
// refused at once (Impress and Calc tasks whose files are not in the empty cache; a VS Code task).
const EX = join(osworldCheckoutDir(), 'evaluation_examples', 'examples');
const SAMPLE: Record<string, string> = {
  os: 'c288e301-e626-4b98-a1ab-159dcb162af5',
  chrome: '12086550-11c0-466b-b367-1d9e75b3910e',
  gimp: '5ca86c6f-f317-49d8-b6a7-b527541caae8',
  vlc: '7882ed6e-bece-4bf0-bada-c32dc1ddae72',
  multi_apps: 'e1fc0df3-c8b9-4ee7-864c-d0b590d3aa56',
  libreoffice_impress: '04578141-1d42-4146-b9cf-6fab4ce5fd74',
  libreoffice_calc: '01b269ae-2111-4a07-81fd-3fcd711993b0',
  vs_code: '0512bb38-d531-4acf-9e7e-0add90816068',
};
const RUNS = ['os', 'chrome', 'gimp', 'vlc', 'multi_apps'];
const APPS: Record<string, string> = { chrome: 'chrome', vlc: 'vlc', multi_apps: 'libreoffice' };

describe('DrumsBench osworld-run --checkout', { skip: skipUnlessCI(missingOsworldCheckout()) }, () => {
  it('runs the sample under every observation type: each runnable task live, none started solved, none lost an app; and writes the table', () => {
    const out = mkdtempSync('/var/tmp/drums-bench-oswr-test-');
    try {
      const doc = join(out, 'doc.md');
      writeFileSync(doc, 'before\n<!-- osworld-run-table: begin none -->\n<!-- osworld-run-table: end -->\nafter\n');
      const files = Object.entries(SAMPLE).map(([dom, id]) => join(EX, dom, `${id}.json`));
      const rec = join(out, 'rec');
      execFileSync(DRUMS, ['bench', 'osworld-run', '--checkout', '--parallel', '3', '--docs', doc, '--out', rec, ...files], {
        cwd: ROOT,
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'pipe'],
        timeout: 600_000,
      });
      const r = JSON.parse(readFileSync(join(rec, readdirSync(rec)[0]!), 'utf8')) as CheckoutRec;
      assert.equal(r.complete, true, JSON.stringify(r.levels.map((l) => l.reason)));
      assert.equal(r.config.checkout, osworldCheckoutDir());
      assert.deepEqual(
        r.levels.map((l) => l.observation),
        ['screenshot', 'a11y_tree', 'screenshot_a11y_tree', 'som'],
      );
      const problems: string[] = [];
      for (const l of r.levels) {
        const by = new Map(l.tasks.map((t) => [t.domain, t]));
        assert.equal(l.tasks.length, files.length);
        for (const dom of RUNS) {
          const t = by.get(dom)!;
          if (APPS[dom] && !t.apps.includes(APPS[dom])) problems.push(`${dom}/${t.task}: apps ${t.apps}, not ${APPS[dom]}`);
          if (!t.live || t.startedSolved !== false || t.lost.length)
            problems.push(
              `${l.observation} ${dom}/${t.task}: ${t.outcome} live=${t.live} startedSolved=${t.startedSolved} lost=${t.lost} error=${t.error} observation=${JSON.stringify(t.observation)}`,
            );
        }
        for (const dom of ['libreoffice_calc', 'libreoffice_impress']) {
          assert.equal(by.get(dom)!.outcome, 'refused');
          assert.ok(by.get(dom)!.needs.files > 0);
        }
        assert.equal(by.get('vs_code')!.needs.vs_code, true);
      }
      assert.deepEqual(problems, []);
      const md = readFileSync(doc, 'utf8');
      assert.match(md, /^before\n<!-- osworld-run-table: begin \S+osworld-run-\S+\.json -->\n/);
      assert.match(md, /\n<!-- osworld-run-table: end -->\nafter\n$/);
      assert.match(md, /\| vlc \| 1 \| 1 \(1 live\) \| 0 \(not run\) \| 0 \| 0 \| 0 \| 1 \/ 0 \/ 0 \| 1 \/ 0 \/ 0 \| 1 \/ 0 \/ 0 \| 1 \/ 0 \/ 0 \|/);
      assert.match(md, /\| vs_code \| 1 \| 0 \(0 live\) \| 0 \(not run\) \| 0 \| 0 \| 1 \| 0 \/ 0 \/ 0 \|/);
      assert.match(
        md,
        /\| \*\*all\*\* \| \*\*8\*\* \| \*\*5 \(5 live\)\*\* \| \*\*2 \(not run\)\*\* \| \*\*0\*\* \| \*\*0\*\* \| \*\*1\*\* \| \*\*5 \/ 0 \/ 0\*\* \|/,
      );
    } finally {
      rmSync(out, { recursive: true, force: true });
    }
  });

  it('refuses an observation type that is not one of the four, naming them', () => {
    const r = (() => {
      try {
        execFileSync(
          DRUMS,
          ['bench', 'osworld-run', '--checkout', '--observations', 'screenshot,tree', '--out', '/nonexistent', join(EX, 'os', `${SAMPLE.os}.json`)],
          {
            cwd: ROOT,
            encoding: 'utf8',
            stdio: ['ignore', 'pipe', 'pipe'],
          },
        );
        return { status: 0, stderr: '' };
      } catch (e) {
        return e as { status: number; stderr: string };
      }
    })();
    assert.notEqual(r.status, 0);
    assert.match(r.stderr, /observation type "tree" is not one of screenshot, a11y_tree, screenshot_a11y_tree, som/);
  });
});
