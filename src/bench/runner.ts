import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { DrumsClient, SessionInfo } from '../client/client.ts';
import { getArm, type Arm, type ArmCtx, type ArmOptions } from './arms.ts';
import { judge, loadBars } from './bars.ts';
import { gitState, hostFacts, REPO_ROOT } from './host-facts.ts';
import { cgroupCpuNs, pssByKind, sampleUsed, sleep, upperMiB, type Kind } from './measure.ts';
import { recoverHostKnobs, restoreHostKnobs } from './host-knobs.ts';
import { hostThreadsCpuNs, sessionSwapPss } from './memory-arms.ts';
import { startPrivateDaemon, type PrivateDaemon } from '../client/private-daemon.ts';
import { RECORD_SCHEMA_VERSION, validateRecord, type ArmRecord, type BenchRecord, type ResultRow, type TrialRecord, type Verdict } from './record.ts';
import { bootstrap, linearFit, quantile } from './stats.ts';

export interface Experiment {
  name: string;
  description: string;
  arms: string[];
  /** bench/bars/<bars>.json */
  bars: string;
  /** In full mode, hold this many browser sessions at once once per run (baseline arm only). */
  capacity?: number;
  /** Overrides of the quick mode's parameters for this experiment. */
  quick?: Partial<Params>;
  /** At the largest N, time each session's first step after the idle reading (wake-up) and a second one. */
  wake?: boolean;
}

export const EXPERIMENTS: Record<string, Experiment> = {
  baseline: {
    name: 'baseline',
    description:
      'Session core on the default image: create→desktop-ready, create→browser-ready, reset and destroy latencies; memory per added Chromium session (host slope and PSS by kind); writable layer; idle CPU; aggregate steps/s.',
    arms: ['baseline'],
    bars: 'baseline',
    capacity: 50,
  },
  density: {
    name: 'density',
    description:
      'Every arm interleaved against the baseline and the peer-vnc stack: memory per added session, latencies and steps/s, each next to its isolation verdict; headline ratios against peer-vnc from the same run.',
    arms: ['baseline', 'peer-vnc', 'zram-idle', 'ksm-aslr-on', 'ksm-aslr-off', 'shared-browser', 'seed-guest-server'],
    bars: 'density',
    capacity: 50,
    wake: true,
  },
  'memory-arms': {
    name: 'memory-arms',
    description:
      'The memory-saving arms interleaved with the baseline in the same run: KSM with ASLR on and off (pages merged across sessions; readings once merging settles; ksmd CPU), zram-idle (idle sessions pushed into a zram swap device through their own cgroup; wake-up latency and CPU) and shared-browser (one Chromium on the host, a profile per session; in-run probe of its DevTools endpoint). Each saving is shown next to its isolation verdict; a saving bought with isolation is marked.',
    arms: ['baseline', 'ksm-aslr-on', 'ksm-aslr-off', 'zram-idle', 'shared-browser'],
    bars: 'density',
    quick: { ns: [1, 2, 4, 6] },
    wake: true,
  },
  'osworld-image': {
    name: 'osworld-image',
    description:
      'Memory per added session and latencies of OSWorld environments on Drums: the osworld image with Chromium open (and its host-side guest endpoint), interleaved with the baseline.',
    arms: ['baseline', 'osworld'],
    bars: 'osworld',
  },
  'osworld-apps': {
    name: 'osworld-apps',
    description:
      'Memory per added session and app-ready latencies (after create, after reset) of OSWorld environments with each desktop app open, interleaved with the osworld image with Chromium open: LibreOffice Calc with a sheet, Writer with a document, Impress with a deck, GIMP with an image, VLC paused on a video, Thunderbird with a profile.',
    arms: ['osworld', 'osworld-calc', 'osworld-writer', 'osworld-impress', 'osworld-gimp', 'osworld-vlc', 'osworld-thunderbird'],
    bars: 'osworld',
    quick: { ns: [1, 2, 4] },
  },
  'vs-peer': {
    name: 'vs-peer',
    description: 'Baseline and the peer-vnc stack only, interleaved: the headline ratios.',
    arms: ['baseline', 'peer-vnc'],
    bars: 'baseline',
  },
};

export function getExperiment(name: string): Experiment {
  const e = EXPERIMENTS[name];
  if (!e) throw new Error(`unknown experiment '${name}'; experiments: ${Object.keys(EXPERIMENTS).join(', ')} (the isolation audit is 'drums audit')`);
  return e;
}

export interface Params {
  cycles: number;
  ns: number[];
  settleMs: number;
  stepSeconds: number;
  cpuSeconds: number;
  trials: number;
  warmups: number;
  stepsAtN1: number;
}

export const QUICK: Params = { cycles: 2, ns: [1, 2, 3], settleMs: 1500, stepSeconds: 3, cpuSeconds: 3, trials: 1, warmups: 1, stepsAtN1: 5 };
export const FULL: Params = { cycles: 10, ns: [1, 4, 8, 12, 16, 20], settleMs: 5000, stepSeconds: 15, cpuSeconds: 15, trials: 3, warmups: 1, stepsAtN1: 30 };

/** The page every browser session opens: small, static, no network. */
export const PAGE = 'data:text/html,<title>bench</title><body style="background:%23336699;margin:0"><h1>Drums bench</h1><form><input name=q></form></body>';

export interface RunOptions {
  experiment: string;
  quick: boolean;
  trials?: number;
  arms?: string[];
  outDir?: string;
  armOptions?: ArmOptions;
  /** Overrides of the mode's parameters (tests). */
  params?: Partial<Params>;
  progress?: (line: string) => void;
  command?: string;
  /** Test hook: kill every process of the first session of this stage ('memory'), to check that the trial is marked invalid. */
  killAt?: string;
}

class TrialInvalid extends Error {}

interface Ctx {
  d: PrivateDaemon;
  c: DrumsClient;
  p: Params;
  o: RunOptions;
  exp: Experiment;
  status: (s: string) => void;
  /** What the arm's hooks see (its data is the trial's data). */
  armCtx: ArmCtx;
}

async function createFor(ctx: Ctx, arm: Arm, url?: string): Promise<SessionInfo> {
  const s = await ctx.c.createSession({ ...arm.spec(url), labels: { ...arm.hooks?.labels, 'drums.bench.arm': arm.name } });
  try {
    await arm.afterStart?.(ctx.c, s, url);
  } catch (e) {
    await destroyFor(ctx, arm, s).catch(() => {});
    throw e;
  }
  return s;
}

async function destroyFor(ctx: Ctx, arm: Arm, s: SessionInfo): Promise<void> {
  try {
    await ctx.c.destroySession(s.id);
  } finally {
    await arm.afterDestroy?.(s);
  }
}

async function checkAlive(ctx: Ctx, ids: string[]): Promise<void> {
  const list = await ctx.c.listSessions();
  for (const id of ids) {
    const s = list.find((x) => x.id === id);
    if (!s) throw new TrialInvalid(`session ${id} disappeared mid-trial`);
    if (s.state !== 'ready') throw new TrialInvalid(`session ${id} is '${s.state}' mid-trial${s.brokenReason ? `: ${s.brokenReason}` : ''}`);
  }
}

async function latencyCycles(ctx: Ctx, arm: Arm, data: Record<string, unknown>): Promise<void> {
  const lat: Record<string, number[]> = {
    create_desktop_ready_ms: [],
    create_browser_ready_ms: [],
    reset_ms: [],
    reset_browser_ms: [],
    destroy_ms: [],
    server_desktop_ready_ms: [],
    server_browser_ready_ms: [],
  };
  data.latency = lat;
  for (let i = 0; i < ctx.p.cycles; i++) {
    for (const browser of [false, true]) {
      ctx.status(`latency ${browser ? 'browser' : 'desktop'} ${i + 1}/${ctx.p.cycles}`);
      let t = performance.now();
      const s = await createFor(ctx, arm, browser ? PAGE : undefined);
      try {
        lat[browser ? 'create_browser_ready_ms' : 'create_desktop_ready_ms']!.push(performance.now() - t);
        const srv = browser ? s.timings.browserReadyMs : s.timings.desktopReadyMs;
        if (typeof srv === 'number') lat[browser ? 'server_browser_ready_ms' : 'server_desktop_ready_ms']!.push(srv);
        t = performance.now();
        const r = await ctx.c.resetSession(s.id);
        await arm.afterStart?.(ctx.c, r, browser ? PAGE : undefined);
        lat[browser ? 'reset_browser_ms' : 'reset_ms']!.push(performance.now() - t);
      } finally {
        t = performance.now();
        await destroyFor(ctx, arm, s);
        lat.destroy_ms!.push(performance.now() - t);
      }
    }
  }
}

async function memoryLadder(ctx: Ctx, arm: Arm, data: Record<string, unknown>, capacity: number | undefined): Promise<void> {
  const sessions: SessionInfo[] = [];
  const points: { n: number; usedMiB: number; rawMiB: number; harnessRssMiB: number; daemonRssMiB: number; arm?: Record<string, unknown> }[] = [];
  data.memoryPoints = points;
  const { rssMiB } = await import('./measure.ts');
  const sample = async (n: number) => {
    ctx.status(`memory: settling at N=${n}`);
    await sleep(ctx.p.settleMs);
    const armData = await arm.hooks?.settle?.(ctx.armCtx, sessions, n);
    await checkAlive(
      ctx,
      sessions.map((s) => s.id),
    );
    const u = await sampleUsed();
    points.push({ n, ...u, daemonRssMiB: rssMiB(ctx.d.pid), ...(armData && Object.keys(armData).length ? { arm: armData } : {}) });
    lastReading = performance.now();
  };
  let lastReading = performance.now();
  const maxN = Math.max(...ctx.p.ns);
  try {
    await sample(0);
    for (const n of ctx.p.ns) {
      while (sessions.length < n) {
        ctx.status(`memory: creating session ${sessions.length + 1}/${maxN}`);
        sessions.push(await createFor(ctx, arm, PAGE));
        if (ctx.o.killAt === 'memory' && sessions.length === 1) {
          await ctx.c.exec(sessions[0]!.id, { shell: 'kill -9 -1', root: true }).catch(() => {});
        }
      }
      await sample(n);
      if (n === 1 && ctx.p.stepsAtN1 > 0) {
        const xs: number[] = [];
        for (let i = 0; i < ctx.p.stepsAtN1; i++) {
          const t = performance.now();
          await arm.step(ctx.c, sessions[0]!);
          xs.push(performance.now() - t);
        }
        data.stepMsN1 = xs;
      }
    }
    await arm.hooks?.collect?.(ctx.armCtx, sessions);
    // At the largest N: PSS by kind, writable layer, (wake-up,) idle CPU, then steps/s.
    ctx.status(`memory: PSS and upper at N=${maxN}`);
    const kinds: Record<string, number[]> = {};
    const uppers: number[] = [];
    const totals: number[] = [];
    for (const s of sessions) {
      const p = pssByKind(ctx.d.instance, s.id);
      for (const [k, v] of Object.entries(p.byKind)) (kinds[k] ??= []).push(v);
      totals.push(p.total);
      uppers.push(upperMiB(ctx.d.stateDir, s.id));
    }
    data.pssByKind = Object.fromEntries(Object.entries(kinds).map(([k, v]) => [k, mean(v)])) as Record<Kind, number>;
    data.pssTotal = mean(totals);
    data.upperMiB = uppers;
    if (ctx.exp.wake) {
      data.swapPssMiB = sessions.map((s) => sessionSwapPss(ctx.d.instance, s.id));
      // Wake-up: each session's first step after the idle reading, then a second one; CPU of the session's cgroup for each.
      ctx.status(`wake-up: first step of each of ${sessions.length} idle sessions`);
      const idleMs = performance.now() - lastReading;
      const wake: { wakeMs: number; warmMs: number; wakeCpuMs: number; warmCpuMs: number }[] = [];
      const th0 = hostThreadsCpuNs();
      for (const s of sessions) {
        const w0 = cgroupCpuNs(ctx.d.instance, s.id);
        let t = performance.now();
        await arm.step(ctx.c, s);
        const wakeMs = performance.now() - t;
        await sleep(WAKE_CPU_TAIL_MS);
        const w1 = cgroupCpuNs(ctx.d.instance, s.id);
        t = performance.now();
        await arm.step(ctx.c, s);
        const warmMs = performance.now() - t;
        await sleep(WAKE_CPU_TAIL_MS);
        const w2 = cgroupCpuNs(ctx.d.instance, s.id);
        wake.push({ wakeMs, warmMs, wakeCpuMs: (w1 - w0) / 1e6, warmCpuMs: (w2 - w1) / 1e6 });
      }
      const th1 = hostThreadsCpuNs();
      data.wake = {
        idleBeforeMs: Math.round(idleMs),
        sessions: wake,
        hostThreadsCpuMs: Object.fromEntries(Object.keys(th1).map((k) => [k, (th1[k]! - (th0[k] ?? th1[k]!)) / 1e6])),
      };
    }
    ctx.status(`idle CPU over ${ctx.p.cpuSeconds}s at N=${maxN}`);
    const c0 = sessions.map((s) => cgroupCpuNs(ctx.d.instance, s.id));
    const h0 = hostThreadsCpuNs();
    const t0 = performance.now();
    await sleep(ctx.p.cpuSeconds * 1000);
    const c1 = sessions.map((s) => cgroupCpuNs(ctx.d.instance, s.id));
    const h1 = hostThreadsCpuNs();
    const wallNs = (performance.now() - t0) * 1e6;
    data.cpuIdlePct = c1.map((c, i) => ((c - c0[i]!) / wallNs) * 100);
    data.hostThreadsIdlePct = Object.fromEntries(Object.keys(h1).map((k) => [k, ((h1[k]! - (h0[k] ?? h1[k]!)) / wallNs) * 100]));
    ctx.status(`steps/s at N=${maxN} for ${ctx.p.stepSeconds}s`);
    const end = performance.now() + ctx.p.stepSeconds * 1000;
    const stepMs: number[] = [];
    const tStart = performance.now();
    await Promise.all(
      sessions.map(async (s) => {
        while (performance.now() < end) {
          const t = performance.now();
          await arm.step(ctx.c, s);
          stepMs.push(performance.now() - t);
        }
      }),
    );
    data.steps = { n: sessions.length, steps: stepMs.length, seconds: (performance.now() - tStart) / 1000, stepMs };
    await checkAlive(
      ctx,
      sessions.map((s) => s.id),
    );
    if (capacity && capacity > maxN) {
      while (sessions.length < capacity) {
        ctx.status(`capacity: session ${sessions.length + 1}/${capacity}`);
        try {
          sessions.push(await createFor(ctx, arm, PAGE));
        } catch (e) {
          data.capacityError = (e as Error).message;
          break;
        }
      }
      await sleep(ctx.p.settleMs);
      const list = await ctx.c.listSessions();
      const ok = sessions.filter((s) => list.find((x) => x.id === s.id)?.state === 'ready');
      let stepOk = 0;
      await Promise.all(
        ok.map(async (s) => {
          try {
            await arm.step(ctx.c, s);
            stepOk++;
          } catch {}
        }),
      );
      data.capacity = { target: capacity, ready: ok.length, steppedOk: stepOk, usedMiB: (await sampleUsed()).usedMiB };
    }
  } finally {
    ctx.status('destroying sessions');
    for (const s of sessions) await destroyFor(ctx, arm, s).catch(() => {});
  }
}

/** The wake-up CPU window runs this long past each step (the page repaints after a click returns); also keeps the two clicks from making a double-click. */
const WAKE_CPU_TAIL_MS = 600;

const mean = (xs: number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : NaN);
const r1 = (x: number) => Math.round(x * 100) / 100;

/** Runs an experiment end to end and writes its record. */
export async function runExperiment(o: RunOptions): Promise<{ record: BenchRecord; file: string }> {
  const exp = getExperiment(o.experiment);
  const armNames = o.arms?.length ? o.arms : exp.arms;
  for (const a of armNames) {
    getArm(a);
    if (!exp.arms.includes(a)) throw new Error(`arm '${a}' is not part of experiment '${exp.name}' (its arms: ${exp.arms.join(', ')})`);
  }
  const bars = loadBars(exp.bars);
  o = { ...o, killAt: o.killAt ?? process.env.DRUMS_BENCH_TEST_KILL_AT };
  const p: Params = { ...(o.quick ? { ...QUICK, ...exp.quick } : FULL), ...(o.trials ? { trials: o.trials } : {}), ...o.params };
  const started = new Date().toISOString();
  const g = gitState();
  const progress = o.progress ?? (() => {});
  const recovered = recoverHostKnobs();
  if (recovered) progress(recovered);
  const arms: ArmRecord[] = [];
  const runnable: Arm[] = [];
  for (const name of armNames) {
    const arm = getArm(name);
    const why = arm.unavailable(o.armOptions ?? {});
    const iso = armIsolation(arm, o.outDir);
    arms.push({
      name,
      description: arm.description,
      image: arm.image,
      status: why ? 'skipped' : 'measured',
      ...(why ? { reason: why } : {}),
      ...(arm.unsafe ? { unsafe: arm.unsafe } : {}),
      ...(arm.tradeoff ? { tradeoff: arm.tradeoff } : {}),
      stepNote: arm.stepNote,
      isolation: iso,
    });
    if (!why) runnable.push(arm);
    else progress(`skip arm ${name}: ${why}`);
  }
  const trials: TrialRecord[] = [];
  const failures: string[] = [];
  const incompleteReasons: string[] = [];
  let interrupted = false;
  const onSig = () => {
    interrupted = true;
    progress('interrupted: finishing the current step, then writing a partial record');
  };
  process.once('SIGINT', onSig);
  const daemonEnv = Object.assign({}, ...runnable.map((a) => a.hooks?.daemonEnv ?? {})) as Record<string, string>;
  const d = runnable.length ? await startPrivateDaemon(daemonEnv) : undefined;
  try {
    const total = p.warmups + p.trials;
    for (let t = 0; t < total && !interrupted; t++) {
      const warmup = t < p.warmups;
      // Interleave: every trial runs every arm, in an order rotated per trial.
      const order = runnable.map((_, i) => runnable[(i + t) % runnable.length]!);
      for (const arm of order) {
        if (interrupted) break;
        const trialNo = t - p.warmups + 1;
        const label = warmup ? `warm-up ${t + 1}/${p.warmups}` : `trial ${trialNo}/${p.trials}`;
        const data: Record<string, unknown> = {};
        const status = (s: string) => progress(`[${label} · ${arm.name}] ${s}`);
        const ctx: Ctx = { d: d!, c: d!.client, p, o, exp, status, armCtx: { c: d!.client, instance: d!.instance, quick: o.quick, status, data } };
        const t0 = performance.now();
        const at = new Date().toISOString();
        let entered = false;
        try {
          entered = true;
          await arm.hooks?.enter?.(ctx.armCtx);
          if (warmup) {
            ctx.status('warm-up create/destroy (discarded)');
            const s = await createFor(ctx, arm, PAGE);
            await destroyFor(ctx, arm, s);
          } else {
            await latencyCycles(ctx, arm, data);
            const cap = !o.quick && exp.capacity && arm.name === 'baseline' && trialNo === p.trials ? exp.capacity : undefined;
            await memoryLadder(ctx, arm, data, cap);
          }
          if (entered) {
            entered = false;
            await arm.hooks?.exit?.(ctx.armCtx);
          }
          trials.push({ arm: arm.name, trial: trialNo, warmup, valid: true, startedAt: at, durationMs: performance.now() - t0, data });
        } catch (e) {
          if (entered)
            await arm.hooks?.exit?.(ctx.armCtx).catch((x) => {
              failures.push(`${arm.name} ${label}: exit hook: ${(x as Error).message}`);
            });
          const reason = e instanceof TrialInvalid ? e.message : `error: ${(e as Error).message}`;
          failures.push(`${arm.name} ${label}: ${reason}`);
          trials.push({ arm: arm.name, trial: trialNo, warmup, valid: false, reason, startedAt: at, durationMs: performance.now() - t0, data });
          progress(`[${label} · ${arm.name}] INVALID: ${reason}`);
        }
      }
    }
  } finally {
    process.removeListener('SIGINT', onSig);
    await d?.stop();
    const left = restoreHostKnobs();
    if (left.length) failures.push(`host knobs not restored: ${left.join('; ')}`);
  }
  if (interrupted) incompleteReasons.push('interrupted (SIGINT) before all trials ran');

  // Arm status from its trials.
  for (const a of arms) {
    if (a.status === 'skipped') {
      incompleteReasons.push(`arm ${a.name} skipped: ${a.reason}`);
      continue;
    }
    const ts = trials.filter((t) => t.arm === a.name && !t.warmup);
    const ok = ts.filter((t) => t.valid).length;
    if (ok === 0) {
      a.status = 'invalid';
      a.reason =
        ts
          .map((t) => t.reason)
          .filter(Boolean)
          .join('; ') || 'no trial ran';
      incompleteReasons.push(`arm ${a.name} has no valid trial`);
    } else if (ok < p.trials) {
      a.status = 'partial';
      a.reason = `${ok}/${p.trials} valid trials: ${ts
        .filter((t) => !t.valid)
        .map((t) => t.reason)
        .join('; ')}`;
      incompleteReasons.push(`arm ${a.name}: ${a.reason}`);
    }
  }
  applyProbes(arms, trials);
  const { results, plots } = aggregate(arms, trials, p);
  const verdicts = bars.bars.bars
    .filter((b) => !b.measuredBy)
    .map((b): Verdict => {
      const row = results.find((r) => r.arm === b.arm && r.metric === b.metric);
      let v = row?.value ?? null;
      let implausible: string | undefined;
      if (v !== null && b.unit === 'MiB' && v <= 0) {
        implausible = `implausible value ${v} MiB (host noise swamped the slope); no verdict`;
        v = null;
      }
      return {
        barId: b.id,
        arm: b.arm,
        metric: b.metric,
        op: b.op,
        bar: b.value,
        unit: b.unit,
        value: v,
        ci: row?.ci ?? null,
        pass: judge(b, v),
        ...(implausible
          ? { note: implausible }
          : row
            ? {}
            : { note: o.quick && b.metric === 'concurrent_sessions_ok' ? 'not measured in quick mode (needs the full run)' : 'not measured in this run' }),
      };
    });
  const complete = incompleteReasons.length === 0;
  const status: BenchRecord['status'] = verdicts.some((v) => v.pass === false)
    ? 'failed'
    : !complete || verdicts.some((v) => v.pass === null)
      ? 'inconclusive'
      : 'passed';
  const record: BenchRecord = {
    schemaVersion: RECORD_SCHEMA_VERSION,
    kind: 'drums-bench-record',
    experiment: exp.name,
    description: exp.description,
    mode: o.quick ? 'quick' : 'full',
    status,
    complete,
    incompleteReasons,
    command:
      o.command ??
      `bin/drums bench run ${exp.name}${o.quick ? ' --quick' : ''}${o.trials ? ` --trials ${o.trials}` : ''}${o.arms?.length ? ` --arms ${o.arms.join(',')}` : ''}`,
    commit: g.commit,
    dirty: g.dirty,
    started,
    finished: new Date().toISOString(),
    bars: { file: `bench/bars/${exp.bars}.json`, sha256: bars.sha256, fixedAt: bars.bars.fixedAt, fixedCommit: bars.bars.fixedCommit },
    host: hostFacts(),
    method: METHOD,
    config: { params: p, page: PAGE, arms: armNames, capacity: o.quick ? null : (exp.capacity ?? null) },
    arms,
    trials,
    results,
    verdicts,
    summary: '',
    surprises: [],
    limitations: LIMITATIONS(o.quick),
    failures,
    plots,
  };
  record.summary = summarize(record);
  addSurprises(record);
  const errs = validateRecord(record);
  if (errs.length) throw new Error(`internal: the record does not validate: ${errs.join('; ')}`);
  const outDir = o.outDir ?? join(REPO_ROOT, 'bench', 'records');
  mkdirSync(outDir, { recursive: true });
  const file = join(outDir, `${exp.name}-${o.quick ? 'quick-' : ''}${started.replace(/[:.]/g, '-')}.json`);
  writeFileSync(file, JSON.stringify(record, null, 2) + '\n');
  return { record, file };
}

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

const LIMITATIONS = (quick: boolean) => [
  ...(quick ? ['quick mode: small N, one trial, short intervals; not a measurement, only a check that the harness works'] : []),
  'the browser page is a trivial static data: URL; real sites cost far more memory per renderer',
  'host-wide memory readings include every other process on the host; on a shared machine the slope carries their noise (see the R² and the intervals)',
  'latencies are measured one session at a time; under concurrent creates they are longer',
];

function aggregate(arms: ArmRecord[], trials: TrialRecord[], p: Params): { results: ResultRow[]; plots: BenchRecord['plots'] } {
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

function ratioCi(a: number[], b: number[]): [number, number] {
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

function summarize(r: BenchRecord): string {
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

function addSurprises(r: BenchRecord): void {
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

/** An arm's isolation verdict: its own audit record, or what the arm declares (fail by design; the baseline's verdict). */
export function armIsolation(arm: Arm, dir?: string): ArmRecord['isolation'] {
  const decl = arm.isolation;
  if (!decl) return isolationOf(arm.name, dir);
  if (decl.kind === 'fail-by-design') return { verdict: 'fail', failedProbes: [`${decl.probe} (by design)`], source: decl.why };
  const b = isolationOf('baseline', dir);
  return {
    verdict: b.verdict,
    failedProbes: b.failedProbes,
    source: `${b.verdict === 'not-audited' ? '' : `the baseline's audit (${b.source}); `}${decl.why}`,
  };
}

/** Puts the result of an arm's in-run isolation probe (ksmProbe, or a generic isolationProbe) into its verdict: observed = the named probe failed. */
function applyProbes(arms: ArmRecord[], trials: TrialRecord[]): void {
  for (const a of arms) {
    const generic = trials
      .filter((t) => t.arm === a.name && !t.warmup)
      .map((t) => t.data.isolationProbe as { id: string; observed: boolean; detail: string } | undefined)
      .filter((x) => x);
    if (generic.length) {
      const hit = generic.find((x) => x!.observed);
      a.isolation = hit
        ? {
            verdict: 'fail',
            failedProbes: [hit.id],
            source: `in-run probe (${generic.filter((x) => x!.observed).length} of ${generic.length} trials observed it): ${hit.detail}. ${a.isolation.source ?? ''}`,
          }
        : {
            ...a.isolation,
            verdict: 'fail',
            source: `in-run probe ${generic[0]!.id} did not observe the path (${generic[0]!.detail}); FAIL by design regardless: ${a.isolation.source ?? ''}`,
          };
      continue;
    }
    const probes = trials
      .filter((t) => t.arm === a.name && !t.warmup)
      .map(
        (t) =>
          t.data.ksmProbe as
            | {
                crossSessionMerge?: boolean;
                cowTimingVisible?: boolean;
                guess?: { mergedPages?: number; medianWriteNs?: number };
                control?: { mergedPages?: number; medianWriteNs?: number };
                pages?: number;
              }
            | undefined,
      )
      .filter((x) => x);
    if (!probes.length) continue;
    const hit = probes.find((x) => x!.crossSessionMerge);
    if (hit) {
      const ids = ['ksm.cross-session-merge', ...(hit.cowTimingVisible ? ['ksm.cow-write-timing'] : [])];
      a.isolation = {
        verdict: 'fail',
        failedProbes: ids,
        source: `in-run probe: session A's guess of session B's pages merged ${hit.guess?.mergedPages}/${hit.pages} (control ${hit.control?.mergedPages}/${hit.pages}); a one-byte write took ${hit.guess?.medianWriteNs} ns median on the guessed pages vs ${hit.control?.medianWriteNs} ns on the control (copy-on-write of merged pages): A learns which contents B holds. ${a.isolation.source ?? ''}`,
      };
    } else {
      a.isolation = {
        ...a.isolation,
        verdict: 'fail',
        source: `in-run probe did not observe a cross-session merge in time (${JSON.stringify(probes[0]).slice(0, 300)}); FAIL by design regardless: ${a.isolation.source ?? ''}`,
      };
    }
  }
}

/** Result rows of the memory arms' own data (KSM counters and ksmd CPU; zram stats, push CPU; wake-up). */
function memoryArmRows(arm: string, ts: TrialRecord[]): ResultRow[] {
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

/** The isolation verdict of an arm from the newest audit record that covers it. */
export function isolationOf(arm: string, dir?: string): ArmRecord['isolation'] {
  const dirs = [...new Set([dir, join(REPO_ROOT, 'bench', 'records')].filter((x): x is string => !!x))];
  let best: { at: string; iso: ArmRecord['isolation'] } | undefined;
  for (const d of dirs) {
    if (!existsSync(d)) continue;
    for (const f of readdirSync(d).filter((x) => x.startsWith('audit-') && x.endsWith('.json'))) {
      try {
        const rec = JSON.parse(readFileSync(join(d, f), 'utf8')) as BenchRecord;
        const a = rec.arms.find((x) => x.name === arm && x.status !== 'skipped');
        if (a && a.isolation.verdict !== 'not-audited' && (!best || rec.started > best.at))
          best = { at: rec.started, iso: { ...a.isolation, source: join(d, f).replace(REPO_ROOT + '/', '') } };
      } catch {
        /* not a record */
      }
    }
  }
  return best?.iso ?? { verdict: 'not-audited', failedProbes: [], source: 'no audit record for this arm; run drums audit --arms ' + arm };
}
