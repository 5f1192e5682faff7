import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { DrumsClient } from '../src/client/client.ts';
import { startPrivateDaemon } from '../src/client/private-daemon.ts';
import { sessionsCgroup } from '../src/host/instance.ts';
import { hostFacts } from './host-facts.ts';
import { quantile, summary } from './stats.ts';

/**
 * `drums bench standby`: reset latency of a session served by a standby (spec `standbys: 1`,
 * docs/pools.md "Standbys") against the same session without one, resets interleaved one by one
 * on one private daemon (so both arms share the machine's noise), optionally with `held` more
 * sessions held open; and what a standby costs while it waits (memory, CPU at idle), read from its
 * cgroup. Between two resets of the standby arm the bench waits for the new standby to be ready:
 * what is timed is a reset that finds one (the refill's time is recorded beside it).
 */
export interface StandbyBenchOptions {
  image: string;
  url?: string;
  resets: number;
  held: number;
  heldImage: string;
  /**
   * The held sessions' diskMb: they only wait, and admission counts each one's whole quota against the free disk,
   * so the default 512 MiB stopped `--held 100` at admission on a host with less than 50 GiB free.
   */
  heldDiskMb: number;
  idleSeconds: number;
  /** The wait after a refill, for the old generation's teardown to end (ms). */
  settleMs: number;
  outDir: string;
  progress?: (msg: string) => void;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const round = (x: number, d = 1) => Math.round(x * 10 ** d) / 10 ** d;

/** The cgroup directory of a session key under the instance (v2, or v1's memory and cpuacct hierarchies). */
function cgroupFile(rel: string, v1: 'memory' | 'cpuacct', v1File: string, v2File: string): string | undefined {
  const a = join('/sys/fs/cgroup', v1, rel, v1File);
  if (existsSync(a)) return a;
  const b = join('/sys/fs/cgroup', rel, v2File);
  return existsSync(b) ? b : undefined;
}

/** Memory (bytes) charged to a cgroup, inactive page cache left out. */
function memoryBytes(rel: string): number | null {
  const usage = cgroupFile(rel, 'memory', 'memory.usage_in_bytes', 'memory.current');
  const statFile = cgroupFile(rel, 'memory', 'memory.stat', 'memory.stat');
  if (!usage || !statFile) return null;
  const stat = Object.fromEntries(
    readFileSync(statFile, 'utf8')
      .trim()
      .split('\n')
      .map((l) => l.split(' '))
      .map(([k, v]) => [k, Number(v)]),
  );
  return Number(readFileSync(usage, 'utf8').trim()) - (stat.total_inactive_file ?? stat.inactive_file ?? 0);
}

/** CPU seconds a cgroup used so far. */
function cpuSeconds(rel: string): number | null {
  const v1 = cgroupFile(rel, 'cpuacct', 'cpuacct.usage', 'cpu.stat');
  if (!v1) return null;
  const text = readFileSync(v1, 'utf8');
  return v1.endsWith('cpuacct.usage') ? Number(text) / 1e9 : Number(/usage_usec (\d+)/.exec(text)![1]) / 1e6;
}

/** The session keys (cgroup names) under the instance that start with `<id>-`: a session's standbys, and its own slot after a swap. */
function keysOf(instCgroup: string, id: string): string[] {
  for (const base of [join('/sys/fs/cgroup/memory', instCgroup), join('/sys/fs/cgroup', instCgroup)]) {
    if (existsSync(base)) return readdirSync(base).filter((k) => k.startsWith(`${id}-`));
  }
  return [];
}

const hostLoad = () => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).map(Number);

type View = { id: string; timings: Record<string, number>; standbys?: { ready: number; making: number; lastError?: string } };

async function waitStandby(c: DrumsClient, id: string, ms = 600_000): Promise<number> {
  const t = performance.now();
  const end = Date.now() + ms;
  for (;;) {
    const v = (await c.getSession(id)) as unknown as View;
    if (v.standbys && v.standbys.ready >= 1 && v.standbys.making === 0) return performance.now() - t;
    if (Date.now() > end) throw new Error(`session ${id} has no standby ready after ${ms} ms: ${JSON.stringify(v.standbys)}`);
    await sleep(50);
  }
}

export async function runStandbyBench(o: StandbyBenchOptions) {
  const started = new Date().toISOString();
  const loadBefore = hostLoad();
  const d = await startPrivateDaemon();
  const c = d.client;
  const inst = sessionsCgroup(d.instance);
  const template = { image: o.image, ...(o.url ? { url: o.url } : {}) };
  const made: string[] = [];
  try {
    if (o.held > 0) {
      o.progress?.(`holding ${o.held} ${o.heldImage} sessions of ${o.heldDiskMb} MiB disk`);
      // Four creates in flight at a time: admission reserves memory for every create in flight, and 100 at once
      // were refused with 503 insufficient_memory on a 24 GiB host that holds them one after another.
      let left = o.held;
      await Promise.all(
        Array.from({ length: Math.min(4, o.held) }, async () => {
          while (left > 0) {
            left--;
            made.push((await c.createSession({ image: o.heldImage, diskMb: o.heldDiskMb, labels: { bench: 'held' } })).id);
          }
        }),
      );
    }
    const withSb = (await c.createSession({ ...template, standbys: 1, labels: { bench: 'standby' } } as never)) as unknown as View;
    made.push(withSb.id);
    const without = (await c.createSession({ ...template, labels: { bench: 'no-standby' } })) as unknown as View;
    made.push(without.id);
    o.progress?.(`sessions ${withSb.id} (standbys: 1) and ${without.id}; waiting for the standby`);
    await waitStandby(c, withSb.id);
    // What a standby costs while it waits: its own cgroup, over an idle window (the session beside it for scale).
    await sleep(3000);
    const sbKey = keysOf(inst, withSb.id)[0];
    let idle: Record<string, unknown> = { error: 'the standby cgroup was not found' };
    if (sbKey) {
      const cpu0 = cpuSeconds(`${inst}/${sbKey}`);
      const own0 = cpuSeconds(`${inst}/${without.id}`);
      const t0 = performance.now();
      await sleep(o.idleSeconds * 1000);
      const s = (performance.now() - t0) / 1000;
      const cpu1 = cpuSeconds(`${inst}/${sbKey}`);
      const own1 = cpuSeconds(`${inst}/${without.id}`);
      const mem = memoryBytes(`${inst}/${sbKey}`);
      const memOwn = memoryBytes(`${inst}/${without.id}`);
      idle = {
        seconds: round(s),
        standbyMemoryMiB: mem === null ? null : round(mem / 2 ** 20),
        standbyCpuCores: cpu0 !== null && cpu1 !== null ? round((cpu1 - cpu0) / s, 4) : null,
        sessionMemoryMiB: memOwn === null ? null : round(memOwn / 2 ** 20),
        sessionCpuCores: own0 !== null && own1 !== null ? round((own1 - own0) / s, 4) : null,
      };
    }
    o.progress?.(`idle standby: ${JSON.stringify(idle)}; ${o.resets} resets per arm, interleaved`);
    const arms = { standby: { ms: [] as number[], serverMs: [] as number[], served: 0 }, none: { ms: [] as number[], serverMs: [] as number[], served: 0 } };
    const refillMs: number[] = [];
    for (let i = 0; i < o.resets; i++) {
      // The standby arm's refill (a create) and recycle (a destroy) run after its reset: both are over
      // before the other arm's reset starts, so neither arm's reset shares the machine with them.
      if (i > 0) {
        refillMs.push(await waitStandby(c, withSb.id));
        await sleep(o.settleMs);
      }
      const t = performance.now();
      const b = (await c.resetSession(without.id)) as unknown as View;
      arms.none.ms.push(performance.now() - t);
      arms.none.serverMs.push(b.timings.resetMs ?? NaN);
      await waitStandby(c, withSb.id);
      const ta = performance.now();
      const a = (await c.resetSession(withSb.id)) as unknown as View;
      arms.standby.ms.push(performance.now() - ta);
      arms.standby.serverMs.push(a.timings.resetMs ?? NaN);
      if ('reset.standbyMs' in a.timings) arms.standby.served++;
      o.progress?.(`reset ${i + 1}/${o.resets}: standby ${round(arms.standby.ms.at(-1)!)} ms, none ${round(arms.none.ms.at(-1)!)} ms`);
    }
    const view = (a: { ms: number[]; serverMs: number[]; served: number }) => ({
      ms: { ...summary(a.ms), p99: quantile(a.ms, 0.99) },
      serverMs: { ...summary(a.serverMs), p99: quantile(a.serverMs, 0.99) },
      servedByStandby: a.served,
    });
    const sb = view(arms.standby),
      none = view(arms.none);
    const record = {
      schemaVersion: 1,
      kind: 'standby',
      started,
      image: o.image,
      url: o.url ?? null,
      held: { n: o.held, image: o.heldImage, diskMb: o.heldDiskMb },
      host: hostFacts(),
      noise: {
        loadavgBefore: loadBefore,
        loadavgAfter: hostLoad(),
        note: 'resets interleaved one by one (no standby, then standby) on one daemon; load averages taken before and after',
      },
      idle,
      resets: {
        n: o.resets,
        standby: sb,
        none,
        p50Ratio: round(none.ms.p50 / sb.ms.p50, 1),
        refillMs: { ...summary(refillMs), p99: quantile(refillMs, 0.99) },
      },
      bars: { standbyResetP50Ms: { value: round(sb.ms.p50, 1), bar: '<= 150', pass: sb.ms.p50 <= 150 } },
    };
    mkdirSync(o.outDir, { recursive: true });
    const file = join(o.outDir, `standby-${started.replace(/[:.]/g, '-')}.json`);
    writeFileSync(file, JSON.stringify(record, null, 2) + '\n');
    return { record, file };
  } finally {
    for (const id of made) await c.destroySession(id).catch(() => {});
    await d.stop();
  }
}
