import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium, type Browser } from 'playwright-core';
import { validateRecord, type BenchRecord } from '../../bench/record.ts';
import { runExperiment } from '../../bench/runner.ts';
import { buildSite, barsFlag } from '../../src/site/build.ts';
import { DRUMS, ROOT } from '../helpers.ts';

const run = (args: string[]) => {
  try {
    return { status: 0, stdout: execFileSync(DRUMS, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], cwd: ROOT }), stderr: '' };
  } catch (e) {
    const x = e as { status: number; stdout: string; stderr: string };
    return { status: x.status, stdout: x.stdout, stderr: x.stderr };
  }
};

// `drums bench run baseline --quick` end to end: a valid record, a site built
// from it, and the site checked in a real headless Chromium (Debian's binary).
describe('DrumsBench quick run, record and site', () => {
  const out = mkdtempSync('/var/tmp/drums-bench-test-');
  const recDir = join(out, 'records');
  const siteDir = join(out, 'site');
  let record: BenchRecord;
  let browser: Browser | undefined;
  before(() => {
    const r = run(['bench', 'run', 'baseline', '--quick', '--out', recDir]);
    assert.ok(r.status === 0 || r.status === 4, `bench run failed (${r.status}): ${r.stderr}\n${r.stdout}`);
    const files = readdirSync(recDir);
    assert.equal(files.length, 1, String(files));
    record = JSON.parse(readFileSync(join(recDir, files[0]!), 'utf8')) as BenchRecord;
  });
  after(async () => {
    await browser?.close();
    rmSync(out, { recursive: true, force: true });
  });

  it('writes a record that validates, with measured numbers and verdicts against the frozen bars', () => {
    assert.deepEqual(validateRecord(record), []);
    assert.equal(record.experiment, 'baseline');
    assert.equal(record.mode, 'quick');
    const bars = readFileSync(join(ROOT, 'bench/bars/baseline.json'), 'utf8');
    assert.equal(record.bars?.fixedAt, (JSON.parse(bars) as { fixedAt: string }).fixedAt);
    const arm = record.arms.find((a) => a.name === 'baseline')!;
    assert.equal(arm.status, 'measured', arm.reason);
    const v = (m: string) => record.results.find((x) => x.arm === 'baseline' && x.metric === m)?.value;
    for (const m of ['create_desktop_ready_ms.p50', 'create_browser_ready_ms.p50', 'reset_ms.p50', 'destroy_ms.p50', 'action_screenshot_ms.p50', 'steps_per_s'])
      assert.ok((v(m) ?? 0) > 0, `${m} = ${v(m)}`);
    assert.ok((v('pss_browser_mib') ?? 0) > 10, 'Chromium PSS per session');
    assert.ok((v('pss_xvfb_mib') ?? 0) > 1, 'Xvfb PSS per session');
    assert.ok((v('upper_mib') ?? 0) > 0, 'writable layer');
    assert.ok(Number.isFinite(v('mem_per_session_mib')), 'memory slope');
    assert.equal(record.verdicts.length, 5);
    const conc = record.verdicts.find((x) => x.barId === 'concurrent-chromium-sessions')!;
    assert.equal(conc.pass, null, 'quick mode cannot judge the 50-session bar');
    assert.notEqual(record.status, 'passed', 'a quick run with an unmeasured bar is never passed');
    assert.equal(record.plots.memory!.length, 1);
    assert.deepEqual(
      record.plots.memory![0]!.points.map((p) => p.n),
      [0, 1, 2, 3],
    );
  });

  it('builds a self-contained site that loads in a real Chromium with rendered plots and working links', async () => {
    const r = buildSite({ out: siteDir, records: recDir });
    assert.equal(r.bad.length, 0);
    for (const p of r.pages) assert.doesNotMatch(readFileSync(join(siteDir, p), 'utf8'), /<script|https?:\/\/(?!www\.w3\.org)/, `${p} is not self-contained`);
    browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: ['--no-sandbox'] });
    const page = await browser.newPage();
    const failed: string[] = [];
    page.on('requestfailed', (q) => failed.push(q.url()));
    await page.goto(`file://${siteDir}/index.html`);
    assert.match(await page.title(), /DrumsBench/);
    const link = page.locator('table.records a').first();
    assert.equal(await link.count(), 1);
    await link.click();
    await page.waitForLoadState('load');
    assert.match(page.url(), /baseline-quick-.*\.html$/);
    assert.match(await page.locator('h1').innerText(), /baseline/);
    for (const cls of ['memory', 'latency']) {
      const svg = page.locator(`svg.plot.${cls}`);
      assert.equal(await svg.count(), 1, `${cls} plot`);
      const box = await svg.boundingBox();
      assert.ok(box && box.width > 100 && box.height > 100, `${cls} plot size ${JSON.stringify(box)}`);
    }
    assert.equal(await page.locator('svg.memory circle.pt').count(), 4);
    const fit = await page.locator('svg.memory line.fit').first().boundingBox();
    assert.ok(fit && fit.width > 10, 'fitted line drawn');
    assert.ok((await page.locator('svg.latency line.tick').count()) >= 10);
    assert.match(await page.locator('p.provenance').innerText(), /Bars fixed in \w+ at .*; measured in \w+/);
    // Every link on the page resolves.
    const hrefs = await page.locator('a').evaluateAll((as) => as.map((a) => (a as HTMLAnchorElement).href));
    assert.ok(hrefs.length >= 2);
    const p2 = await browser.newPage();
    for (const h of hrefs) {
      assert.ok(h.startsWith('file://') && existsSync(fileURLToPath(h)), `broken link ${h}`);
      await p2.goto(h);
      assert.ok(!p2.url().startsWith('chrome-error'), `link ${h} did not load`);
    }
    await p2.close();
    await page.goto(`file://${siteDir}/index.html`);
    assert.deepEqual(failed, []);
  });

  it('flags a record whose bars were edited after measuring, on the page and the index', async () => {
    const bars = join(out, 'bars');
    cpSync(join(ROOT, 'bench/bars'), bars, { recursive: true });
    assert.equal(barsFlag(record, bars), null);
    const f = join(bars, 'baseline.json');
    const j = JSON.parse(readFileSync(f, 'utf8')) as { bars: { id: string; value: number }[] };
    j.bars.find((b) => b.id === 'browser-ready-p50')!.value = 5000;
    writeFileSync(f, JSON.stringify(j, null, 2));
    assert.match(barsFlag(record, bars) ?? '', /changed after this record was measured/);
    const site2 = join(out, 'site2');
    buildSite({ out: site2, records: recDir, barsDir: bars });
    const html = readFileSync(join(site2, readdirSync(site2).find((x) => x.startsWith('baseline'))!), 'utf8');
    assert.match(html, /Bars changed/);
    assert.match(readFileSync(join(site2, 'index.html'), 'utf8'), /bars changed/);
  });

  it('refuses unknown experiments and arms, and re-registering frozen bars, with clear messages', () => {
    const a = run(['bench', 'run', 'nope', '--quick']);
    assert.notEqual(a.status, 0);
    assert.match(a.stderr, /unknown experiment 'nope'; experiments: baseline, density/);
    const b = run(['bench', 'run', 'baseline', '--quick', '--arms', 'bogus']);
    assert.match(b.stderr, /unknown arm 'bogus'; arms: baseline, peer-vnc/);
    const c = run(['bench', 'run', 'baseline', '--quick', '--arms', 'peer-vnc']);
    assert.match(c.stderr, /arm 'peer-vnc' is not part of experiment 'baseline'/);
    const d = run(['bench', 'preregister', 'baseline']);
    assert.match(d.stderr, /already fixed .* pass --force/);
  });

  it('marks a trial invalid when a session dies mid-trial, and the record incomplete, never passed', async () => {
    const dir = join(out, 'killed');
    const { record: r } = await runExperiment({
      experiment: 'baseline',
      quick: true,
      outDir: dir,
      killAt: 'memory',
      params: { cycles: 0, ns: [1, 2], warmups: 0, settleMs: 1500, stepsAtN1: 0 },
    });
    assert.deepEqual(validateRecord(r), []);
    const t = r.trials.find((x) => !x.warmup)!;
    assert.equal(t.valid, false);
    assert.match(t.reason!, /is 'broken' mid-trial|disappeared/);
    assert.equal(r.arms[0]!.status, 'invalid');
    assert.equal(r.complete, false);
    assert.notEqual(r.status, 'passed');
    assert.match(r.summary, /no valid trial/);
  });

  it('skips an arm whose host feature or image is missing with the reason in the record', async () => {
    // No OSWorld checkout given, and (through an empty image dir) no peer-vnc image built.
    const emptyImages = mkdtempSync('/var/tmp/drums-noimages-');
    const prev = process.env.DRUMS_IMAGE_DIR;
    process.env.DRUMS_IMAGE_DIR = emptyImages;
    let r: BenchRecord;
    try {
      r = (await runExperiment({ experiment: 'density', quick: true, arms: ['seed-guest-server', 'peer-vnc'], outDir: join(out, 'skip') })).record;
    } finally {
      if (prev === undefined) delete process.env.DRUMS_IMAGE_DIR;
      else process.env.DRUMS_IMAGE_DIR = prev;
      rmSync(emptyImages, { recursive: true, force: true });
    }
    assert.deepEqual(validateRecord(r), []);
    for (const a of r.arms) {
      assert.equal(a.status, 'skipped');
      assert.ok(a.reason && a.reason.length > 10);
    }
    assert.match(r.arms[0]!.reason!, /--osworld-src/);
    assert.match(r.arms[1]!.reason!, /image 'peer-vnc' is not built; run 'drums image build peer-vnc'/);
    assert.equal(r.complete, false);
    assert.equal(r.status, 'inconclusive');
  });
});
