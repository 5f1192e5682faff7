import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { JOURNAL } from '../../bench/host-knobs.ts';
import { sessionPids } from '../../bench/measure.ts';
import { validateRecord } from '../../bench/record.ts';
import { runExperiment } from '../../bench/runner.ts';
import { startDaemon } from '../helpers.ts';

const mergeAny = (instance: string, id: string) =>
  sessionPids(instance, id)
    .map((p) => {
      try {
        return /ksm_merge_any: yes/.test(readFileSync(`/proc/${p}/ksm_stat`, 'utf8'));
      } catch {
        return undefined;
      }
    })
    .filter((x) => x !== undefined);

const hostState = () => ({
  swaps: readFileSync('/proc/swaps', 'utf8'),
  zram: readdirSync('/sys/block')
    .filter((d) => d.startsWith('zram'))
    .sort()
    .join(','),
  ksm: ['run', 'pages_to_scan', 'sleep_millisecs'].map((k) => readFileSync(`/sys/kernel/mm/ksm/${k}`, 'utf8').trim()).join(','),
  aslr: readFileSync('/proc/sys/kernel/randomize_va_space', 'utf8').trim(),
});

// The memory arms (docs/bench.md): the KSM opt-in is a bench-only label, and
// each arm's trial leaves the host as it found it. About 45 s on 2 cores.
describe('memory arms (ksm, zram-idle, shared-browser)', () => {
  const out = mkdtempSync('/var/tmp/drums-memarms-test-');
  after(() => rmSync(out, { recursive: true, force: true }));

  it('label drums.bench.ksm=1 opts the whole session into KSM only on a daemon with DRUMS_BENCH_HOOKS=1', async () => {
    for (const hooks of [false, true]) {
      const d = await startDaemon(hooks ? { DRUMS_BENCH_HOOKS: '1' } : { DRUMS_BENCH_HOOKS: '' });
      try {
        const s = await d.client.createSession({ image: 'default', labels: { 'drums.bench.ksm': '1' } });
        const m = mergeAny(d.instance, s.id);
        assert.ok(m.length >= 3, `session processes: ${m.length}`);
        // Everything the init started (tini itself, PID 1, is outside the opt-in).
        if (hooks) assert.ok(m.filter(Boolean).length >= m.length - 1, `merge_any on ${m.filter(Boolean).length}/${m.length}`);
        else assert.equal(m.filter(Boolean).length, 0);
      } finally {
        await d.stop();
        rmSync(d.stateDir, { recursive: true, force: true });
      }
    }
  });

  it('ksm-aslr-on and zram-idle measure, FAIL/inherit isolation as declared, and restore every host knob', async () => {
    const before = hostState();
    const { record } = await runExperiment({
      experiment: 'memory-arms',
      quick: true,
      arms: ['ksm-aslr-on', 'zram-idle'],
      outDir: out,
      params: { ns: [2], cycles: 0, settleMs: 500, stepSeconds: 1, cpuSeconds: 1, warmups: 0, stepsAtN1: 0 },
    });
    assert.deepEqual(validateRecord(record), []);
    assert.deepEqual(hostState(), before, 'host knobs, swaps and zram devices restored');
    assert.equal(existsSync(JOURNAL), false);
    const v = (arm: string, m: string) => record.results.find((x) => x.arm === arm && x.metric === m)?.value;
    const ksm = record.arms.find((a) => a.name === 'ksm-aslr-on')!;
    assert.equal(ksm.status, 'measured', ksm.reason);
    assert.equal(ksm.isolation.verdict, 'fail');
    assert.ok(ksm.isolation.failedProbes.includes('ksm.cross-session-merge'), ksm.isolation.source);
    assert.ok(ksm.tradeoff);
    assert.ok((v('ksm-aslr-on', 'ksm_pages_sharing_mib') ?? 0) > 0);
    assert.ok(Number.isFinite(v('ksm-aslr-on', 'ksmd_cpu_pct_trial')));
    const zr = record.arms.find((a) => a.name === 'zram-idle')!;
    assert.equal(zr.status, 'measured', zr.reason);
    assert.notEqual(zr.isolation.verdict, 'fail');
    assert.ok((v('zram-idle', 'zram_orig_mib') ?? 0) > 10, 'memory went to zram');
    assert.ok((v('zram-idle', 'wake_step_ms.p50') ?? 0) > 0);
  });

  it("shared-browser measures one host Chromium with a profile per session, and its in-run probe catches A driving B's page", async () => {
    const chromiumTree = () =>
      readdirSync('/proc')
        .filter((p) => /^\d+$/.test(p))
        .filter((p) => {
          try {
            return readFileSync(`/proc/${p}/cmdline`, 'utf8').includes('drums-bench-shared-browser-');
          } catch {
            return false;
          }
        });
    const { record } = await runExperiment({
      experiment: 'memory-arms',
      quick: true,
      arms: ['shared-browser'],
      outDir: out,
      params: { ns: [2], cycles: 1, settleMs: 500, stepSeconds: 1, cpuSeconds: 1, warmups: 0, stepsAtN1: 0 },
    });
    assert.deepEqual(validateRecord(record), []);
    const arm = record.arms.find((a) => a.name === 'shared-browser')!;
    assert.equal(arm.status, 'measured', arm.reason);
    assert.equal(record.trials.filter((t) => !t.valid).length, 0, JSON.stringify(record.failures));
    assert.equal(arm.isolation.verdict, 'fail');
    assert.deepEqual(arm.isolation.failedProbes, ['shared-browser.cross-session-devtools'], arm.isolation.source);
    assert.match(arm.isolation.source ?? '', /Target activated/);
    const v = (m: string) => record.results.find((x) => x.arm === 'shared-browser' && x.metric === m)?.value;
    assert.ok((v('shared_browser_pss_mib') ?? 0) > 50, "the shared browser's PSS is measured");
    assert.ok((v('create_browser_ready_ms.p50') ?? 0) > 0);
    assert.deepEqual(chromiumTree(), [], 'the shared Chromium is gone');
    assert.equal(readdirSync('/tmp').filter((f) => f.startsWith('drums-bench-shared-browser-')).length, 0);
  });
});
