import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { DrumsClient } from '../src/client/client.ts';
import { hostFacts } from './host-facts.ts';
import { startPrivateDaemon } from '../src/client/private-daemon.ts';
import { quantile, summary } from './stats.ts';
import { sessionsCgroup } from '../src/host/instance.ts';

/**
 * `drums bench pools`: warm-pool claims against creates, disk fork(N) against
 * N fresh creates, and what an idle pool costs, all in one run on one private
 * daemon (so the ratios share the machine's noise). Memory and CPU come from
 * the sessions' cgroups (v1 memory/cpuacct, or v2).
 */
export interface PoolsBenchOptions {
  image: string;
  url?: string;
  claims: number;
  poolSize: number;
  forkCounts: number[];
  /** An app the fork source (and each fresh create, as its setup) opens before it is timed: 'writer' (a document in LibreOffice Writer; image osworld). */
  app?: 'writer';
  idleSeconds: number;
  outDir: string;
  progress?: (msg: string) => void;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** Destroy errors seen (a destroy that left something is recorded, not fatal: the final sweep removes it). */
const destroyErrors: string[] = [];
const destroy = (c: DrumsClient, id: string) =>
  c.destroySession(id).catch((e: Error) => {
    destroyErrors.push(`${id}: ${e.message}`);
  });

/** Memory (bytes) charged to a cgroup under the instance (rel = `drums-<inst>/sessions[/<id>]`), page cache of inactive files left out. */
function memoryBytes(rel: string): number | null {
  const v1 = join('/sys/fs/cgroup/memory', rel);
  if (existsSync(join(v1, 'memory.usage_in_bytes'))) {
    const stat = Object.fromEntries(
      readFileSync(join(v1, 'memory.stat'), 'utf8')
        .trim()
        .split('\n')
        .map((l) => l.split(' '))
        .map(([k, v]) => [k, Number(v)]),
    );
    return Number(readFileSync(join(v1, 'memory.usage_in_bytes'), 'utf8')) - (stat.total_inactive_file ?? 0);
  }
  const v2 = join('/sys/fs/cgroup', rel);
  if (existsSync(join(v2, 'memory.current'))) {
    const stat = Object.fromEntries(
      readFileSync(join(v2, 'memory.stat'), 'utf8')
        .trim()
        .split('\n')
        .map((l) => l.split(' '))
        .map(([k, v]) => [k, Number(v)]),
    );
    return Number(readFileSync(join(v2, 'memory.current'), 'utf8')) - (stat.inactive_file ?? 0);
  }
  return null;
}

/** CPU seconds used by a cgroup so far. */
function cpuSeconds(rel: string): number | null {
  const v1 = join('/sys/fs/cgroup/cpuacct', rel, 'cpuacct.usage');
  if (existsSync(v1)) return Number(readFileSync(v1, 'utf8')) / 1e9;
  const v2 = join('/sys/fs/cgroup', rel, 'cpu.stat');
  if (existsSync(v2)) return Number(/usage_usec (\d+)/.exec(readFileSync(v2, 'utf8'))![1]) / 1e6;
  return null;
}

function hostLoad(): number[] {
  return readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).map(Number);
}

async function waitPool(c: DrumsClient, name: string, ready: number, ms = 600_000) {
  const end = Date.now() + ms;
  for (;;) {
    const p = await c.getPool(name);
    if (p.ready >= ready) return p;
    if (Date.now() > end) throw new Error(`pool ${name} did not reach ${ready} ready: ${JSON.stringify(p)}`);
    await sleep(100);
  }
}

const p99 = (xs: number[]) => quantile(xs, 0.99);
const round = (x: number, d = 1) => Math.round(x * 10 ** d) / 10 ** d;

/** Opens `app` in session `id` and waits for its window (the setup a memory fork's copies skip); nothing without one. */
async function setupApp(c: DrumsClient, id: string, app: PoolsBenchOptions['app']): Promise<void> {
  if (!app) return;
  // A disk-forked copy has the source's LibreOffice locks and recovery list (Writer would stop at "Document
  // Recovery" or "another instance"): cleared as the SDK's clear_app_locks does (sdk/python/drums/osworld_pool.py).
  const clear =
    "sed -i '/org.openoffice.Office.Recovery\\/RecoveryList/d' $HOME/.config/libreoffice/4/user/registrymodifications.xcu 2>/dev/null; " +
    "rm -f $HOME/.config/libreoffice/4/.lock '/home/user/.~lock.doc.txt#'";
  await c.exec(id, { shell: `${clear}; printf "bench\\n" > /home/user/doc.txt; nohup soffice --writer /home/user/doc.txt >/dev/null 2>&1 &` });
  for (const by = Date.now() + 300_000; ; await new Promise((r) => setTimeout(r, 250))) {
    if ((await c.windows(id)).windows.some((w) => /doc\.txt - LibreOffice Writer/.test(w.title ?? ''))) return;
    if (Date.now() > by) throw new Error(`session ${id}: no LibreOffice Writer window in 300 s`);
  }
}

export async function runPoolsBench(o: PoolsBenchOptions) {
  const started = new Date().toISOString();
  const loadBefore = hostLoad();
  const d = await startPrivateDaemon();
  const c = d.client;
  const inst = sessionsCgroup(d.instance);
  // Chromium without its sandbox and zygote, so the memory fork arm can checkpoint it (docs/pools.md); every arm uses the same template.
  const template = { image: o.image, ...(o.url ? { url: o.url, browserSandbox: false } : {}) };
  const made: string[] = [];
  try {
    // 1. Idle cost of a full pool, then claims (each a hit: the pool is refilled between claims) against creates.
    o.progress?.(`filling pool of ${o.poolSize} (${o.image})`);
    const tFill = performance.now();
    await c.putPool('bench', { size: o.poolSize, template });
    await waitPool(c, 'bench', o.poolSize);
    const fillS = (performance.now() - tFill) / 1000;
    await sleep(3000); // let the last refill settle before measuring idle
    const cpu0 = cpuSeconds(inst),
      t0 = performance.now();
    await sleep(o.idleSeconds * 1000);
    const cpu1 = cpuSeconds(inst),
      idleS = (performance.now() - t0) / 1000;
    const idle = {
      sessions: o.poolSize,
      seconds: round(idleS),
      cpuCoresUsed: cpu0 !== null && cpu1 !== null ? round((cpu1 - cpu0) / idleS, 4) : null,
      memoryMiB: memoryBytes(inst) !== null ? round(memoryBytes(inst)! / 2 ** 20) : null,
      memoryMiBPerSession: memoryBytes(inst) !== null ? round(memoryBytes(inst)! / 2 ** 20 / o.poolSize) : null,
    };
    o.progress?.(`idle pool: ${JSON.stringify(idle)}; ${o.claims} claims`);
    const claimMs: number[] = [];
    const claimServerMs: number[] = [];
    let misses = 0;
    for (let i = 0; i < o.claims; i++) {
      await waitPool(c, 'bench', 1);
      const t = performance.now();
      const s = await c.claimSession({ pool: 'bench' });
      claimMs.push(performance.now() - t);
      claimServerMs.push(s.timings.poolClaimMs ?? NaN);
      if (!s.poolHit) misses++;
      await c.releaseSession(s.id, { mode: 'destroy' });
    }
    await c.deletePool('bench');
    o.progress?.(`claims p50 ${round(quantile(claimMs, 0.5))} ms; ${o.claims} creates`);
    const createMs: number[] = [];
    for (let i = 0; i < o.claims; i++) {
      const t = performance.now();
      const s = await c.createSession({ ...template, labels: { bench: 'create' } });
      createMs.push(performance.now() - t);
      await destroy(c, s.id);
    }

    // 2. fork(N) of a session with state on disk (and, with --app, an app's window with a document), against N fresh creates (and setups), per N.
    const src = await c.createSession({ ...template, labels: { bench: 'fork-source' } });
    made.push(src.id);
    await setupApp(c, src.id, o.app);
    await c.exec(src.id, {
      shell: 'head -c 20000000 /dev/urandom > /home/user/state.bin; mkdir -p /home/user/work; for i in $(seq 200); do echo $i > /home/user/work/f$i; done',
    });
    const forks = [];
    for (const n of o.forkCounts) {
      o.progress?.(`fork ${n}`);
      const t = performance.now();
      const r = await c.forkSession(src.id, { count: n });
      // A disk fork's copies start their apps afresh: with --app, each is ready once it has set its app up again.
      let firstSetupMs = Infinity;
      await Promise.all(r.copies.map((x) => setupApp(c, x.id, o.app).then(() => (firstSetupMs = Math.min(firstSetupMs, performance.now() - t)))));
      const allMs = performance.now() - t;
      const firstMs = o.app ? firstSetupMs : r.timings.snapshotMs + Math.min(...r.copies.map((x) => x.timings.createMs ?? Infinity));
      const mem = r.copies.map((x) => memoryBytes(`${inst}/${x.id}`)).filter((m): m is number => m !== null);
      for (const x of r.copies) await destroy(c, x.id);
      o.progress?.(`memory fork ${n}`);
      const tm = performance.now();
      let memFork: Record<string, unknown>;
      try {
        const rm = await c.forkSession(src.id, { count: n, mode: 'memory' });
        const allMemMs = performance.now() - tm;
        const memM = rm.copies.map((x) => memoryBytes(`${inst}/${x.id}`)).filter((m): m is number => m !== null);
        for (const x of rm.copies) await destroy(c, x.id);
        memFork = {
          firstReadyMs: round(rm.timings.snapshotMs + Math.min(...rm.copies.map((x) => x.timings.createMs ?? Infinity))),
          allReadyMs: round(allMemMs),
          snapshotMs: rm.timings.snapshotMs,
          sourcePausedMs: rm.timings.pausedMs,
          memoryMiBPerCopy: memM.length ? round(memM.reduce((a, b) => a + b, 0) / memM.length / 2 ** 20) : null,
        };
      } catch (e) {
        memFork = { error: (e as Error).message };
      }
      o.progress?.(`${n} fresh creates`);
      const tc = performance.now();
      let firstCreate = Infinity;
      const fresh = await Promise.all(
        Array.from({ length: n }, () =>
          c.createSession({ ...template, labels: { bench: 'fresh' } }).then(async (s) => {
            await setupApp(c, s.id, o.app);
            firstCreate = Math.min(firstCreate, performance.now() - tc);
            return s;
          }),
        ),
      );
      const allCreate = performance.now() - tc;
      const memFresh = fresh.map((x) => memoryBytes(`${inst}/${x.id}`)).filter((m): m is number => m !== null);
      for (const x of fresh) await destroy(c, x.id);
      const avg = (xs: number[]) => (xs.length ? round(xs.reduce((a, b) => a + b, 0) / xs.length / 2 ** 20) : null);
      forks.push({
        n,
        mode: r.mode,
        fork: {
          firstReadyMs: round(firstMs),
          allReadyMs: round(allMs),
          snapshotMs: r.timings.snapshotMs,
          sourcePausedMs: r.timings.pausedMs,
          memoryMiBPerCopy: avg(mem),
        },
        memoryFork: memFork,
        fresh: { firstReadyMs: round(firstCreate), allReadyMs: round(allCreate), memoryMiBPerSession: avg(memFresh) },
        allReadyRatio: round(allMs / allCreate, 3),
        memoryAllReadyRatio: typeof memFork.allReadyMs === 'number' ? round(memFork.allReadyMs / allCreate, 3) : null,
      });
    }
    await destroy(c, src.id);
    made.length = 0;

    const claim = summary(claimMs),
      create = summary(createMs);
    const loadAfter = hostLoad();
    const record = {
      schemaVersion: 1,
      kind: 'pools',
      started,
      image: o.image,
      url: o.url ?? null,
      host: hostFacts(),
      noise: {
        loadavgBefore: loadBefore,
        loadavgAfter: loadAfter,
        note: 'a 2-core machine shared with six other engineers running tests and benches; load averages taken before and after',
      },
      pool: { size: o.poolSize, fillSeconds: round(fillS), idle },
      claims: {
        n: o.claims,
        misses,
        claimMs: { ...claim, p99: p99(claimMs) },
        claimServerMs: {
          ...summary(claimServerMs),
          note: "the daemon's own time in the claim (timings.poolClaimMs, whole ms); the rest is HTTP and waiting for a CPU",
        },
        createMs: { ...create, p99: p99(createMs) },
        p50Ratio: round(create.p50 / claim.p50, 1),
      },
      forks,
      destroyErrors,
      bars: {
        claimP50Ms: { value: round(claim.p50, 2), bar: '<= 20', pass: claim.p50 <= 20 },
      },
    };
    mkdirSync(o.outDir, { recursive: true });
    const file = join(o.outDir, `pools-${started.replace(/[:.]/g, '-')}.json`);
    writeFileSync(file, JSON.stringify(record, null, 2) + '\n');
    return { record, file };
  } finally {
    for (const id of made) await c.destroySession(id).catch(() => {});
    await d.stop();
  }
}
