import type { BenchRecord } from './record.ts';

/** A record's prose: the method, limitations, one-paragraph summary and surprises. */
export const METHOD: Record<string, string> = {
  memory:
    "host MemTotal − MemAvailable averaged over 3 readings 0.5 s apart after settling, at N = 0 and each N of the ladder (browser sessions created one at a time); least-squares slope over N ≥ 1; the harness process's own RSS is subtracted from every reading (the daemon runs in its own process and stays counted, as part of the system under test); mem_per_session_raw_mib is the slope without that subtraction",
  fixedCost: 'intercept of the fit minus the N=0 reading',
  pss: "per session at the largest N: sum of Pss from /proc/PID/smaps_rollup over the processes in the session's memory cgroup, by kind (comm/cmdline): xvfb, browser (chromium + crashpad), wm (openbox), buses (dbus-daemon, at-spi), vnc (x11vnc/websockify), other",
  upper: "du -sk of the session's overlay upper dir at the largest N",
  latency:
    "client wall time of the API call, sequential, one session alive at a time; create includes the arm's post-start hook (peer-vnc: starting x11vnc + websockify until both listen); reset includes it again",
  cpu: 'cgroup cpuacct.usage (v1) or cpu.stat usage_usec (v2) of each session over an idle interval at the largest N, in % of one core',
  steps:
    "every session at the largest N runs its arm's step in a closed loop for a fixed time; steps/s is the total over all sessions divided by the wall time",
  intervals:
    'bootstrap 95% (1000 resamples, fixed seed): slopes over trials (over ladder points when there is one trial); p50s over pooled samples; ratios by resampling both arms',
  interleaving: 'each trial runs every arm, the arm order rotated per trial; warm-up trials (one create/destroy per arm) are discarded',
};

export const LIMITATIONS = (quick: boolean) => [
  ...(quick ? ['quick mode: small N, one trial, short intervals; not a measurement, only a check that the harness works'] : []),
  'the browser page is a trivial static data: URL; real sites cost far more memory per renderer',
  'host-wide memory readings include every other process on the host; on a shared machine the slope carries their noise (see the R² and the intervals)',
  'latencies are measured one session at a time; under concurrent creates they are longer',
];

export function summarize(r: BenchRecord): string {
  const parts: string[] = [];
  const v = (arm: string, m: string) => r.results.find((x) => x.arm === arm && x.metric === m);
  for (const a of r.arms) {
    if (a.status === 'skipped') {
      parts.push(`${a.name} was skipped (${a.reason}).`);
      continue;
    }
    if (a.status === 'invalid') {
      parts.push(`${a.name} produced no valid trial (${a.reason}).`);
      continue;
    }
    const mem = v(a.name, 'mem_per_session_mib'),
      br = v(a.name, 'create_browser_ready_ms.p50'),
      rs = v(a.name, 'reset_ms.p50');
    const dm = v(a.name, 'diff.mem_per_session_mib'),
      wk = v(a.name, 'wake_step_ms.p50');
    const ks = v(a.name, 'ksm_saved_mib_per_session'),
      zs = v(a.name, 'zram_saved_mib_per_session'),
      kc = v(a.name, 'ksmd_cpu_pct_idle'),
      zc = v(a.name, 'zram_push_cpu_ms_at_n'),
      zr = v(a.name, 'zram_ratio');
    const direct = ks
      ? ` (KSM merged ${ks.value} MiB per added session; ksmd ${kc?.value ?? '–'} % of a core at idle)`
      : zs
        ? ` (zram took ${zs.value} MiB per added idle session out of memory, net of its own ${zr?.value ?? '–'}× compressed copy; push ${zc?.value ?? '–'} ms CPU for all sessions at the largest N)`
        : '';
    parts.push(
      `${a.name}: ${mem ? `${mem.value} MiB per added browser session${mem.ci ? ` (95% ${mem.ci[0]}–${mem.ci[1]})` : ''}${dm?.value != null ? ` (${dm.value >= 0 ? '+' : ''}${dm.value} vs baseline)` : ''}${direct}` : 'memory not measured'} — isolation ${a.isolation.verdict.toUpperCase()}${a.isolation.failedProbes.length ? ` (${a.isolation.failedProbes.join(', ')})` : ''}${a.tradeoff ? '; saving bought with isolation' : ''}${a.unsafe ? '; UNSAFE: ' + a.unsafe : ''}; create→browser-ready p50 ${br?.value ?? '–'} ms, reset p50 ${rs?.value ?? '–'} ms${wk ? `, first step after idle p50 ${wk.value} ms` : ''}.`,
    );
  }
  const failed = r.verdicts.filter((x) => x.pass === false).map((x) => x.barId);
  const open = r.verdicts.filter((x) => x.pass === null).map((x) => x.barId);
  parts.push(
    `Bars: ${r.verdicts.filter((x) => x.pass).length} met, ${failed.length} missed${failed.length ? ` (${failed.join(', ')})` : ''}, ${open.length} not measured${open.length ? ` (${open.join(', ')})` : ''}.`,
  );
  if (!r.complete) parts.push(`Incomplete: ${r.incompleteReasons.join('; ')}.`);
  return `${r.mode === 'quick' ? 'Quick run (harness check, not a measurement). ' : ''}${parts.join(' ')}`;
}

export function addSurprises(r: BenchRecord): void {
  for (const x of r.results) {
    if (x.metric === 'mem_per_session_mib' && x.note) {
      const r2s = [...x.note.matchAll(/(\d\.\d{3})/g)].map((m) => Number(m[1]));
      if (r2s.some((q) => q < 0.95))
        r.surprises.push(`${x.arm}: a memory fit has R² below 0.95 (${x.note}); other activity on the host likely moved the readings`);
    }
    if (x.metric === 'mem_per_session_mib' && x.ci && x.ci[1] - x.ci[0] > 0.3 * Math.abs(x.value ?? 0))
      r.surprises.push(`${x.arm}: the memory slope's interval is wide (${x.ci[0]}–${x.ci[1]} MiB)`);
  }
  for (const t of r.trials) if (!t.valid) r.surprises.push(`${t.arm} ${t.warmup ? 'warm-up' : `trial ${t.trial}`} invalid: ${t.reason}`);
}
