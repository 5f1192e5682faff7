import type { DrumsClient, SessionInfo } from '../src/client/client.ts';
import type { Arm, ArmCtx } from './arm.ts';
import { cgroupCpuNs, pssByKind, sampleUsed, sleep, upperMiB, type Kind } from './measure.ts';
import { hostThreadsCpuNs, sessionSwapPss } from './memory-arms.ts';
import type { PrivateDaemon } from '../src/client/private-daemon.ts';
import { type Experiment, PAGE, type Params, type RunOptions, WAKE_CPU_TAIL_MS } from './experiments.ts';
import { mean } from './stats.ts';

/** One trial of one arm: sessions created through the arm's hooks, the latency cycles and the memory ladder. */
export class TrialInvalid extends Error {}

export interface Ctx {
  d: PrivateDaemon;
  c: DrumsClient;
  p: Params;
  o: RunOptions;
  exp: Experiment;
  status: (s: string) => void;
  /** What the arm's hooks see (its data is the trial's data). */
  armCtx: ArmCtx;
}

export async function createFor(ctx: Ctx, arm: Arm, url?: string): Promise<SessionInfo> {
  const s = await ctx.c.createSession({ ...arm.spec(url), labels: { ...arm.hooks?.labels, 'drums.bench.arm': arm.name } });
  try {
    await arm.afterStart?.(ctx.c, s, url);
  } catch (e) {
    await destroyFor(ctx, arm, s).catch(() => {});
    throw e;
  }
  return s;
}

export async function destroyFor(ctx: Ctx, arm: Arm, s: SessionInfo): Promise<void> {
  try {
    await ctx.c.destroySession(s.id);
  } finally {
    await arm.afterDestroy?.(s);
  }
}

export async function checkAlive(ctx: Ctx, ids: string[]): Promise<void> {
  const list = await ctx.c.listSessions();
  for (const id of ids) {
    const s = list.find((x) => x.id === id);
    if (!s) throw new TrialInvalid(`session ${id} disappeared mid-trial`);
    if (s.state !== 'ready') throw new TrialInvalid(`session ${id} is '${s.state}' mid-trial${s.brokenReason ? `: ${s.brokenReason}` : ''}`);
  }
}

export async function latencyCycles(ctx: Ctx, arm: Arm, data: Record<string, unknown>): Promise<void> {
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

export async function memoryLadder(ctx: Ctx, arm: Arm, data: Record<string, unknown>, capacity: number | undefined): Promise<void> {
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
