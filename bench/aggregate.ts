import type { ArmRecord, BenchRecord, ResultRow, TrialRecord } from './record.ts';
import { bootstrap, linearFit, mean, quantile, r1 } from './stats.ts';
import { type Params, WAKE_CPU_TAIL_MS } from './experiments.ts';

/** Trials → result rows and plots (medians, slopes, bootstrap intervals, ratios, the memory arms' own rows). */
export function aggregate(arms: ArmRecord[], trials: TrialRecord[], p: Params): { results: ResultRow[]; plots: BenchRecord['plots'] } {
  const results: ResultRow[] = [];
  const plots: BenchRecord['plots'] = { memory: [], latency: [] };
  const pooled = (arm: string, key: string): number[] =>
    trials.filter((t) => t.arm === arm && !t.warmup && t.valid).flatMap((t) => (t.data.latency as Record<string, number[]> | undefined)?.[key] ?? []);
  const perTrial = (arm: string) => trials.filter((t) => t.arm === arm && !t.warmup && t.valid);
  const slopes: Record<string, number[]> = {};
  const latencyKeys = [
    'create_desktop_ready_ms',
    'create_browser_ready_ms',
    'reset_ms',
    'reset_browser_ms',
    'destroy_ms',
    'server_desktop_ready_ms',
    'server_browser_ready_ms',
  ];
  const medianCi = (xs: number[]) =>
    xs.length >= 2
      ? bootstrap(xs.length, (idx) =>
          quantile(
            idx.map((i) => xs[i]!),
            0.5,
          ),
        )
      : null;
  for (const a of arms) {
    if (a.status === 'skipped' || a.status === 'invalid') continue;
    const arm = a.name;
    for (const k of latencyKeys) {
      const xs = pooled(arm, k);
      if (!xs.length) continue;
      results.push({
        arm,
        metric: `${k}.p50`,
        value: r1(quantile(xs, 0.5)),
        ci: (medianCi(xs)?.map(r1) as [number, number]) ?? null,
        unit: 'ms',
        n: xs.length,
      });
      results.push({ arm, metric: `${k}.p95`, value: r1(quantile(xs, 0.95)), ci: null, unit: 'ms', n: xs.length });
      plots.latency!.push({ arm, metric: k, samples: xs.map(r1) });
    }
    const ts = perTrial(arm);
    const fits = ts
      .map((t) => {
        const pts = (t.data.memoryPoints as { n: number; usedMiB: number; rawMiB: number }[] | undefined) ?? [];
        const fp = pts.filter((x) => x.n > 0);
        if (fp.length < 2) return null;
        const fit = linearFit(
          fp.map((x) => x.n),
          fp.map((x) => x.usedMiB),
        );
        const raw = linearFit(
          fp.map((x) => x.n),
          fp.map((x) => x.rawMiB),
        );
        plots.memory!.push({ arm, trial: t.trial, points: pts.map((x) => ({ n: x.n, usedMiB: r1(x.usedMiB) })), slope: fit.slope, intercept: fit.intercept });
        return { fit, raw, n0: pts.find((x) => x.n === 0)?.usedMiB, pts: fp };
      })
      .filter((x) => x !== null);
    if (fits.length) {
      const ss = fits.map((f) => f.fit.slope);
      slopes[arm] = ss;
      let ci: [number, number];
      let note: string;
      if (ss.length >= 2) {
        ci = bootstrap(ss.length, (idx) => mean(idx.map((i) => ss[i]!)));
        note = `mean of ${ss.length} trial slopes; interval over trials`;
      } else {
        const pts = fits[0]!.pts;
        ci = bootstrap(
          pts.length,
          (idx) =>
            linearFit(
              idx.map((i) => pts[i]!.n),
              idx.map((i) => pts[i]!.usedMiB),
            ).slope,
        );
        note = 'one trial: interval over ladder points';
      }
      results.push({
        arm,
        metric: 'mem_per_session_mib',
        value: r1(mean(ss)),
        ci: ci.map(r1) as [number, number],
        unit: 'MiB',
        n: ss.length,
        note: `${note}; R² ${fits.map((f) => f.fit.r2.toFixed(3)).join(', ')}`,
      });
      results.push({
        arm,
        metric: 'mem_per_session_raw_mib',
        value: r1(mean(fits.map((f) => f.raw.slope))),
        ci: null,
        unit: 'MiB',
        n: fits.length,
        note: 'harness RSS not subtracted',
      });
      const fixed = fits.filter((f) => f.n0 !== undefined).map((f) => f.fit.intercept - f.n0!);
      results.push({
        arm,
        metric: 'mem_fixed_cost_mib',
        value: r1(mean(fixed)),
        ci: null,
        unit: 'MiB',
        n: fixed.length,
        note: 'fit intercept minus the N=0 reading',
      });
    }
    const kinds = ts.map((t) => t.data.pssByKind as Record<string, number> | undefined).filter((x) => x) as Record<string, number>[];
    if (kinds.length) {
      for (const k of Object.keys(kinds[0]!))
        results.push({
          arm,
          metric: `pss_${k}_mib`,
          value: r1(mean(kinds.map((x) => x[k]!))),
          ci: null,
          unit: 'MiB',
          n: kinds.length,
          note: 'per session at the largest N',
        });
      results.push({
        arm,
        metric: 'pss_total_mib',
        value: r1(mean(ts.map((t) => t.data.pssTotal as number).filter(Number.isFinite))),
        ci: null,
        unit: 'MiB',
        n: kinds.length,
        note: 'per session at the largest N',
      });
    }
    const uppers = ts.flatMap((t) => (t.data.upperMiB as number[] | undefined) ?? []);
    if (uppers.length)
      results.push({ arm, metric: 'upper_mib', value: r1(mean(uppers)), ci: null, unit: 'MiB', n: uppers.length, note: `max ${r1(Math.max(...uppers))}` });
    const cpu = ts.flatMap((t) => (t.data.cpuIdlePct as number[] | undefined) ?? []);
    if (cpu.length)
      results.push({
        arm,
        metric: 'cpu_idle_pct_per_session',
        value: r1(mean(cpu)),
        ci: bootstrap(cpu.length, (idx) => mean(idx.map((i) => cpu[i]!))).map(r1) as [number, number],
        unit: '% of a core',
        n: cpu.length,
        note: `over ${p.cpuSeconds} s at N=${Math.max(...p.ns)}`,
      });
    const steps = ts.map((t) => t.data.steps as { n: number; steps: number; seconds: number; stepMs: number[] } | undefined).filter((x) => x) as {
      n: number;
      steps: number;
      seconds: number;
      stepMs: number[];
    }[];
    if (steps.length) {
      results.push({
        arm,
        metric: 'steps_per_s',
        value: r1(mean(steps.map((s) => s.steps / s.seconds))),
        ci: null,
        unit: 'steps/s',
        n: steps.length,
        note: `${steps[0]!.n} concurrent sessions`,
      });
      const sm = steps.flatMap((s) => s.stepMs);
      results.push({
        arm,
        metric: 'step_ms_at_n.p50',
        value: r1(quantile(sm, 0.5)),
        ci: (medianCi(sm)?.map(r1) as [number, number]) ?? null,
        unit: 'ms',
        n: sm.length,
        note: `one step under load at N=${steps[0]!.n}`,
      });
    }
    const n1 = ts.flatMap((t) => (t.data.stepMsN1 as number[] | undefined) ?? []);
    if (n1.length) {
      results.push({
        arm,
        metric: 'action_screenshot_ms.p50',
        value: r1(quantile(n1, 0.5)),
        ci: (medianCi(n1)?.map(r1) as [number, number]) ?? null,
        unit: 'ms',
        n: n1.length,
        note: 'one step (act + screenshot) at N=1, sequential',
      });
      plots.latency!.push({ arm, metric: 'action_screenshot_ms', samples: n1.map(r1) });
    }
    const wk = ts.flatMap((t) => ((t.data.wake as { sessions: { wakeMs: number }[] } | undefined)?.sessions ?? []).map((x) => x.wakeMs));
    if (wk.length) plots.latency!.push({ arm, metric: 'wake_step_ms', samples: wk.map(r1) });
    const cap = ts.map((t) => t.data.capacity as { target: number; ready: number; steppedOk: number } | undefined).find((x) => x);
    if (cap)
      results.push({
        arm,
        metric: 'concurrent_sessions_ok',
        value: Math.min(cap.ready, cap.steppedOk),
        ci: null,
        unit: 'sessions',
        n: 1,
        note: `target ${cap.target}: ${cap.ready} ready, ${cap.steppedOk} answered a step`,
      });
  }
  for (const a of arms) {
    if (a.status === 'skipped' || a.status === 'invalid') continue;
    results.push(
      ...memoryArmRows(
        a.name,
        trials.filter((t) => t.arm === a.name && !t.warmup && t.valid),
      ),
    );
  }
  // Ratios and differences against the baseline, from the same run.
  const get = (arm: string, m: string) => results.find((r) => r.arm === arm && r.metric === m);
  for (const a of arms) {
    if (a.name === 'baseline' || !results.some((r) => r.arm === a.name)) continue;
    const sb = slopes.baseline,
      sa = slopes[a.name];
    if (sb && sa) {
      const n = Math.min(sb.length, sa.length);
      const diff = bootstrap(n, (idx) => mean(idx.map((i) => sa[i]! - sb[i]!)));
      results.push({
        arm: a.name,
        metric: 'diff.mem_per_session_mib',
        value: r1(mean(sa) - mean(sb)),
        ci: n >= 2 ? (diff.map(r1) as [number, number]) : null,
        unit: 'MiB',
        n,
        note: `${a.name} − baseline, paired by trial; isolation ${a.isolation.verdict}${a.tradeoff ? ' (saving bought with isolation)' : ''}${a.unsafe ? ' (UNSAFE)' : ''}`,
      });
    }
    for (const [m, key] of [
      ['mem_per_session_mib', null],
      ['create_browser_ready_ms.p50', 'create_browser_ready_ms'],
      ['reset_ms.p50', 'reset_ms'],
      ['action_screenshot_ms.p50', 'action_screenshot_ms'],
      ['wake_step_ms.p50', 'wake_step_ms'],
    ] as const) {
      const x = get(a.name, m),
        y = get('baseline', m);
      if (!x?.value || !y?.value) continue;
      let ci: [number, number] | null = null;
      if (key) {
        const fromPlot = key === 'action_screenshot_ms' || key === 'wake_step_ms';
        const xa = fromPlot ? (plots.latency!.find((l) => l.arm === a.name && l.metric === key)?.samples ?? []) : pooled(a.name, key);
        const ya = fromPlot ? (plots.latency!.find((l) => l.arm === 'baseline' && l.metric === key)?.samples ?? []) : pooled('baseline', key);
        if (xa.length >= 2 && ya.length >= 2) ci = ratioCi(xa, ya).map((v) => r1(v)) as [number, number];
      }
      results.push({ arm: a.name, metric: `ratio.${m}`, value: r1(x.value / y.value), ci, unit: '×', n: Math.min(x.n, y.n), note: `${a.name} ÷ baseline` });
    }
  }
  return { results, plots };
}

export function ratioCi(a: number[], b: number[]): [number, number] {
  let state = 7;
  const rand = () => (state = (state * 1664525 + 1013904223) >>> 0) / 2 ** 32;
  const vals: number[] = [];
  for (let i = 0; i < 1000; i++) {
    const ma = quantile(
      a.map(() => a[Math.floor(rand() * a.length)]!),
      0.5,
    );
    const mb = quantile(
      b.map(() => b[Math.floor(rand() * b.length)]!),
      0.5,
    );
    vals.push(ma / mb);
  }
  return [quantile(vals, 0.025), quantile(vals, 0.975)];
}

/** Result rows of the memory arms' own data (KSM counters and ksmd CPU; zram stats, push CPU; wake-up). */
export function memoryArmRows(arm: string, ts: TrialRecord[]): ResultRow[] {
  const rows: ResultRow[] = [];
  const add = (metric: string, xs: number[], unit: string, note: string, withCi = false) => {
    const v = xs.filter(Number.isFinite);
    if (!v.length) return;
    rows.push({
      arm,
      metric,
      value: r1(mean(v)),
      ci: withCi && v.length >= 2 ? (bootstrap(v.length, (idx) => mean(idx.map((i) => v[i]!))).map(r1) as [number, number]) : null,
      unit,
      n: v.length,
      note,
    });
  };
  // Direct savings, per added session: slope over the ladder (N >= 1) of a counter read at each reading. Unlike the host slope they don't carry other processes' noise.
  const slopeOf = (metric: string, unit: string, note: string, f: (p: { n: number; arm?: Record<string, unknown> }) => number | undefined) => {
    const ss = ts.map((t) => {
      const pts = ((t.data.memoryPoints as { n: number; arm?: Record<string, unknown> }[] | undefined) ?? [])
        .filter((p) => p.n > 0)
        .map((p) => [p.n, f(p)] as const)
        .filter((x): x is readonly [number, number] => Number.isFinite(x[1]));
      return pts.length >= 2
        ? linearFit(
            pts.map((x) => x[0]),
            pts.map((x) => x[1]),
          ).slope
        : NaN;
    });
    add(metric, ss, unit, note);
  };
  slopeOf(
    'ksm_saved_mib_per_session',
    'MiB',
    'slope over N of host pages_sharing × 4 KiB read once merging settled: memory KSM saves per added session (direct; cf. diff.mem_per_session_mib from host readings)',
    (p) => {
      const c = (p.arm?.ksm as { counters?: Record<string, number> } | undefined)?.counters;
      return c ? (c.pages_sharing! * 4096) / 1024 ** 2 : undefined;
    },
  );
  slopeOf(
    'zram_saved_mib_per_session',
    'MiB',
    'slope over N of zram orig_data_size − mem_used_total after each push: anonymous memory zram-idle saves per added idle session (direct; page cache dropped by the push is not counted)',
    (p) => {
      const z = (p.arm?.zram as { stat?: { origMiB: number; memUsedMiB: number } } | undefined)?.stat;
      return z ? z.origMiB - z.memUsedMiB : undefined;
    },
  );
  slopeOf(
    'shared_browser_pss_mib_per_session',
    'MiB',
    "slope over N of the PSS of the shared Chromium's process tree (on the host, outside the sessions): what one more profile and page cost in the shared browser",
    (p) => (p.arm?.sharedBrowser as { pssMiB?: number } | undefined)?.pssMiB,
  );
  const sb = ts.map((t) => t.data.sharedBrowserPss as { pssMiB: number; processes: number; contexts: number } | undefined).filter((x) => x);
  if (sb.length) {
    add(
      'shared_browser_pss_mib',
      sb.map((x) => x!.pssMiB),
      'MiB',
      `PSS of the shared Chromium's whole process tree at the largest N (${sb[0]!.processes} processes, ${sb[0]!.contexts} profiles)`,
    );
  }
  const lastPoint = (t: TrialRecord) => {
    const pts = (t.data.memoryPoints as { n: number; arm?: Record<string, unknown> }[] | undefined) ?? [];
    return pts[pts.length - 1];
  };
  // KSM
  const ksm = ts
    .map((t) => ({ t, k: t.data.ksm as { counters: Record<string, number>; perSession: { mergingPages: number; profitMiB: number }[] } | undefined }))
    .filter((x) => x.k);
  if (ksm.length) {
    add(
      'ksm_pages_sharing_mib',
      ksm.map((x) => (x.k!.counters.pages_sharing! * 4096) / 1024 ** 2),
      'MiB',
      'host-wide pages_sharing × 4 KiB at the largest N (memory saved by merging)',
    );
    add(
      'ksm_pages_shared',
      ksm.map((x) => x.k!.counters.pages_shared!),
      'pages',
      'host-wide KSM pages at the largest N',
    );
    add(
      'ksm_general_profit_mib',
      ksm.map((x) => (x.k!.counters.general_profit ?? NaN) / 1024 ** 2),
      'MiB',
      'host-wide general_profit (saving minus rmap metadata) at the largest N',
    );
    add(
      'ksm_merging_mib_per_session',
      ksm.flatMap((x) => x.k!.perSession.map((p) => (p.mergingPages * 4096) / 1024 ** 2)),
      'MiB',
      "sum of /proc/PID/ksm_merging_pages over a session's processes, at the largest N",
    );
    const settle = ts.flatMap((t) =>
      ((t.data.memoryPoints as { arm?: { ksm?: { settle?: { ms: number; stable: boolean } } } }[] | undefined) ?? [])
        .map((p) => p.arm?.ksm?.settle)
        .filter((x) => x),
    ) as { ms: number; stable: boolean }[];
    if (settle.length)
      rows.push({
        arm,
        metric: 'ksm_settle_s',
        value: r1(Math.max(...settle.map((x) => x.ms)) / 1000),
        ci: null,
        unit: 's',
        n: settle.length,
        note: `longest wait for pages_sharing to settle at a reading; ${settle.filter((x) => !x.stable).length} of ${settle.length} readings hit the bound before settling`,
      });
    add(
      'ksmd_cpu_pct_trial',
      ts.map((t) => (t.data.ksmdTrial as { pctOfCore?: number } | undefined)?.pctOfCore ?? NaN),
      '% of a core',
      'ksmd utime+stime over the whole trial (creates, merging, steps) / wall time',
    );
  }
  const idleThreads = ts.map((t) => t.data.hostThreadsIdlePct as Record<string, number> | undefined).filter((x) => x) as Record<string, number>[];
  if (idleThreads.length && idleThreads.some((x) => (x.ksmd ?? 0) > 0 || ksm.length))
    add(
      'ksmd_cpu_pct_idle',
      idleThreads.map((x) => x.ksmd ?? 0),
      '% of a core',
      'ksmd over the idle-CPU interval at the largest N (steady-state scanning cost; host-wide, for all sessions together)',
    );
  // zram
  const zr = ts
    .map(
      (t) =>
        lastPoint(t)?.arm?.zram as
          | {
              stat: { origMiB: number; comprMiB: number; memUsedMiB: number };
              pushes: { beforeMiB: number; afterMiB: number; reclaimCpuMs: number; ms: number }[];
              reclaimCpuMs: number;
              kswapdCpuMs: number;
              sessionCpuMs: number;
              wallMs: number;
            }
          | undefined,
    )
    .filter((x) => x);
  if (zr.length) {
    add(
      'zram_orig_mib',
      zr.map((z) => z!.stat.origMiB),
      'MiB',
      'data swapped into zram at the largest N (all sessions)',
    );
    add(
      'zram_mem_used_mib',
      zr.map((z) => z!.stat.memUsedMiB),
      'MiB',
      'memory zram holds for it (mem_used_total; counted in host used)',
    );
    add(
      'zram_ratio',
      zr.map((z) => z!.stat.origMiB / Math.max(z!.stat.comprMiB, 1e-9)),
      '×',
      'orig_data_size / compr_data_size',
    );
    add(
      'zram_pushed_mib_per_session',
      zr.flatMap((z) => z!.pushes.map((p) => p.beforeMiB - p.afterMiB)),
      'MiB',
      'cgroup usage before − after the push at the largest N (already-pushed sessions move little)',
    );
    add(
      'zram_resident_mib_per_session',
      zr.flatMap((z) => z!.pushes.map((p) => p.afterMiB)),
      'MiB',
      'cgroup usage after the push at the largest N',
    );
    const ladderCpu = ts.map((t) =>
      (
        (t.data.memoryPoints as { arm?: { zram?: { reclaimCpuMs: number; kswapdCpuMs: number; sessionCpuMs: number; pushes: unknown[] } } }[] | undefined) ?? []
      ).reduce((a, p) => a + (p.arm?.zram ? p.arm.zram.reclaimCpuMs + p.arm.zram.kswapdCpuMs + p.arm.zram.sessionCpuMs : 0), 0),
    );
    add(
      'zram_push_cpu_ms_at_n',
      zr.map((z) => z!.reclaimCpuMs + z!.kswapdCpuMs + z!.sessionCpuMs),
      'ms',
      "CPU of one push of every session at the largest N: reclaim+compression in the writer of the cgroup limit, kswapd, and the sessions' cgroups",
    );
    add('zram_push_cpu_ms_total', ladderCpu, 'ms', 'the same summed over every reading of the ladder');
    add(
      'zram_push_wall_ms_at_n',
      zr.map((z) => z!.wallMs),
      'ms',
      'wall time of the push at the largest N',
    );
  }
  const swapPss = ts.flatMap((t) => (t.data.swapPssMiB as number[] | undefined) ?? []);
  if (swapPss.some((x) => x > 0))
    add('swap_pss_mib_per_session', swapPss, 'MiB', "SwapPss summed over a session's processes at the largest N, before the wake-up");
  // Wake-up (every arm of an experiment with wake: true)
  const wk = ts.flatMap(
    (t) => (t.data.wake as { sessions: { wakeMs: number; warmMs: number; wakeCpuMs: number; warmCpuMs: number }[] } | undefined)?.sessions ?? [],
  );
  if (wk.length) {
    const xs = wk.map((x) => x.wakeMs),
      ws = wk.map((x) => x.warmMs);
    const ci = (v: number[]) =>
      v.length >= 2
        ? (bootstrap(v.length, (idx) =>
            quantile(
              idx.map((i) => v[i]!),
              0.5,
            ),
          ).map(r1) as [number, number])
        : null;
    rows.push({
      arm,
      metric: 'wake_step_ms.p50',
      value: r1(quantile(xs, 0.5)),
      ci: ci(xs),
      unit: 'ms',
      n: xs.length,
      note: 'first step (act + screenshot) of each session after the idle reading at the largest N, sequential',
    });
    rows.push({ arm, metric: 'wake_step_ms.max', value: r1(Math.max(...xs)), ci: null, unit: 'ms', n: xs.length });
    rows.push({ arm, metric: 'warm_step_ms.p50', value: r1(quantile(ws, 0.5)), ci: ci(ws), unit: 'ms', n: ws.length, note: 'the step right after it' });
    add(
      'wake_cpu_ms_per_session',
      wk.map((x) => x.wakeCpuMs),
      'ms',
      `session cgroup CPU during the first step after idle and ${WAKE_CPU_TAIL_MS} ms after it (swap-in and decompression run in the faulting task)`,
    );
    add(
      'warm_cpu_ms_per_session',
      wk.map((x) => x.warmCpuMs),
      'ms',
      `session cgroup CPU during the second step and ${WAKE_CPU_TAIL_MS} ms after it`,
    );
  }
  return rows;
}
