import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { join } from 'node:path';
import { CPU_GUARD_DEFAULTS } from '../../src/policy/cpu-guard.ts';
import { startDaemon, type TestDaemon } from '../helpers.ts';

const v2 = existsSync('/sys/fs/cgroup/cgroup.controllers') && !existsSync('/sys/fs/cgroup/memory');

/** The CPU weight, cpu.idle and quota of a session's cgroup as the guard writes them (idle undefined where the kernel has none). */
function cpuState(instance: string, id: string): { weight: number; idle: string | undefined; quota: string } | undefined {
  const dir = v2 ? `/sys/fs/cgroup/drums-${instance}/sessions/${id}` : `/sys/fs/cgroup/cpu/drums-${instance}/sessions/${id}`;
  try {
    const weight = Number(readFileSync(join(dir, v2 ? 'cpu.weight' : 'cpu.shares'), 'utf8').trim());
    const idle = existsSync(join(dir, 'cpu.idle')) ? readFileSync(join(dir, 'cpu.idle'), 'utf8').trim() : undefined;
    const quota = readFileSync(join(dir, v2 ? 'cpu.max' : 'cpu.cfs_quota_us'), 'utf8').trim();
    return { weight, idle, quota };
  } catch {
    return undefined;
  }
}
type CpuState = ReturnType<typeof cpuState>;
const LOW = v2 ? 6 : 64;
const NORMAL = v2 ? 100 : 1024;
/** The guard's cap (capCores of a 100 ms period), and a session's own quota. */
const capUs = String(Math.round(CPU_GUARD_DEFAULTS.capCores * 100_000));
const CAP = v2 ? `${capUs} 100000` : capUs;
const own = (cores: number) => (v2 ? `${cores * 100_000} 100000` : String(cores * 100_000));
// With cpu.idle 1 the kernel gives the group the idle weight (cpu.shares reads 3): the guard writes a 16th
// of the weight only where there is no cpu.idle.
const isDemoted = (s: CpuState) => !!s && (s.idle === undefined ? s.weight === LOW : s.idle === '1') && s.quota === CAP;
const isNormal = (s: CpuState, cores: number) => !!s && s.weight === NORMAL && (s.idle === undefined || s.idle === '0') && s.quota === own(cores);
/** Any sign of a demotion (for the sessions that must never have one). */
const anyDemotion = (s: CpuState) => !!s && (s.weight !== NORMAL || s.idle === '1' || s.quota === CAP);

/** CPU time of a session's cgroup (ns) and the host's busy and total jiffies, for the failure message. */
function usageNs(instance: string, id: string): number {
  try {
    return v2
      ? Number(/^usage_usec (\d+)$/m.exec(readFileSync(`/sys/fs/cgroup/drums-${instance}/sessions/${id}/cpu.stat`, 'utf8'))![1]) * 1000
      : Number(readFileSync(`/sys/fs/cgroup/cpuacct/drums-${instance}/sessions/${id}/cpuacct.usage`, 'utf8'));
  } catch {
    return NaN;
  }
}
function hostJiffies(): [number, number] {
  const f = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
  const busy = f[0]! + f[1]! + f[2]! + f[5]! + f[6]! + f[7]!;
  return [busy, busy + f[3]! + f[4]!];
}
/** What each session and the host used over 2 s, in cores, and the cgroup files: what the guard saw. */
async function cpuPicture(instance: string, ids: string[]): Promise<string> {
  const u0 = ids.map((id) => usageNs(instance, id));
  const h0 = hostJiffies();
  await new Promise((r) => setTimeout(r, 2000));
  const h1 = hostJiffies();
  const cores = ids.map((id, i) => `${id}=${((usageNs(instance, id) - u0[i]!) / 2e9).toFixed(2)} ${JSON.stringify(cpuState(instance, id))}`);
  return `host busy ${(((h1[0] - h0[0]) / (h1[1] - h0[1])) * cpus().length).toFixed(2)} cores; ${cores.join('; ')}`;
}

async function until<T>(what: string, fn: () => Promise<T | undefined> | T | undefined, ms: number): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** The guard's series in /metrics: the total, and per session whether demoted now and how often. */
async function guardMetrics(d: TestDaemon) {
  const text = await (await fetch(`${d.url}/metrics`, { headers: { authorization: `Bearer ${d.token}` } })).text();
  const total = /^drums_cpu_guard_demotions_total (\d+)$/m.exec(text);
  assert.ok(total, 'drums_cpu_guard_demotions_total in /metrics');
  const per = (name: string) =>
    Object.fromEntries([...text.matchAll(new RegExp(`^${name}\\{session="([^"]+)"\\} (\\d+)$`, 'gm'))].map((m) => [m[1]!, Number(m[2])]));
  return { total: Number(total[1]), demotedNow: per('drums_session_cpu_demoted'), demotions: per('drums_session_cpu_demotions') };
}

// The CPU guard (src/policy/cpu-guard.ts) on a real daemon and real sessions: a session that spins is
// demoted (cpu.idle, a 16th of the weight, a small quota) and restored once it stops; sessions driven in bursts
// (clicks and screenshots, and one with a real CPU burst every few seconds) beside it never are.
describe('CPU guard', () => {
  let d: TestDaemon;
  before(async () => {
    d = await startDaemon();
  });
  after(async () => {
    await d.finish();
  });

  it('demotes a spinning session and restores it after it stops; bursty neighbours are never demoted', { timeout: 600_000 }, async () => {
    const c = d.client;
    const made: string[] = [];
    let stop = false;
    const drivers: Promise<void>[] = [];
    const execs: Promise<unknown>[] = [];
    const seenDemoted = new Set<string>();
    let watch: NodeJS.Timeout | undefined;
    try {
      // The hog may use every core (its quota is the host's cores): with its neighbours' work the host is
      // contended, which the guard wants before it demotes anyone.
      const cores = cpus().length;
      const spin = await c.createSession({ image: 'minimal', cpus: cores });
      const calmCores = Math.max(1, cores / 2);
      made.push(spin.id);
      const steps = [await c.createSession({ image: 'minimal' }), await c.createSession({ image: 'minimal' })];
      made.push(...steps.map((s) => s.id));
      const burst = await c.createSession({ image: 'minimal' });
      made.push(burst.id);
      const calm = [...steps.map((s) => s.id), burst.id];
      // Every 100 ms: has the guard demoted a session that should not be?
      watch = setInterval(() => {
        for (const id of calm) if (anyDemotion(cpuState(d.instance, id))) seenDemoted.add(id);
      }, 100);
      // Two sessions driven like an agent's: a click and a screenshot, a short pause, again.
      let stepsDone = 0;
      for (const s of steps)
        drivers.push(
          (async () => {
            for (let i = 0; !stop; i++) {
              await c.act(s.id, { actions: [{ type: 'click', x: 10 + ((i * 37) % 600), y: 10 + ((i * 53) % 400) }] });
              await c.screenshot(s.id, 'png');
              stepsDone++;
              await new Promise((r) => setTimeout(r, 100));
            }
          })(),
        );
      // One with real CPU bursts: 0.8 s of spinning, then 2 s idle (a page load, say). Its mean over the
      // guard's 2 s window reaches 0.3-0.4 core, ten times the step-driven ones: the mean-based rule
      // called that a hog; the floor (a quiet tick in every window) does not.
      const stopFile = '/tmp/drums-cpu-guard-stop';
      execs.push(
        c.exec(burst.id, {
          shell: `end=$(($(date +%s)+280)); while [ ! -e ${stopFile} ] && [ $(date +%s) -lt $end ]; do timeout 0.8 sh -c 'while :; do :; done'; sleep 2; done; echo bursts-done`,
          timeoutMs: 290_000,
        }),
      );
      // The hog: four busy loops (more than its 1-core quota can run), until told to stop.
      const spinning = c.exec(spin.id, {
        shell: `for i in 1 2 3 4; do timeout 280 sh -c 'while [ ! -e ${stopFile} ]; do :; done' & done; wait; echo spin-done`,
        timeoutMs: 290_000,
      });
      execs.push(spinning);
      const before = await guardMetrics(d);
      // Demoted: after its 10 s grace and a 2 s window, on a loaded host maybe later.
      await until('the spinning session demoted (cgroup files)', () => (isDemoted(cpuState(d.instance, spin.id)) ? true : undefined), 180_000).catch(
        async (e: Error) => {
          throw new Error(`${e.message}; ${await cpuPicture(d.instance, [spin.id, ...calm])}`);
        },
      );
      const m = await until(
        'the demotion in /metrics',
        async () => {
          const g = await guardMetrics(d);
          return g.total > before.total && (g.demotions[spin.id] ?? 0) >= 1 ? g : undefined;
        },
        30_000,
      );
      assert.ok(m.total >= 1);
      // Stop the spinner (its exec returns), then it is restored after the hold and stays so.
      await c.exec(spin.id, { shell: `touch ${stopFile}` });
      assert.match((await spinning).stdout, /spin-done/);
      await until(
        'the stopped session restored to its quota and the normal weight',
        () => (isNormal(cpuState(d.instance, spin.id), cores) ? true : undefined),
        90_000,
      );
      const restored = await guardMetrics(d);
      assert.equal(restored.demotedNow[spin.id], 0);
      // Judged again on probation, idle now: not demoted again over the next windows.
      const quietUntil = Date.now() + 6000;
      while (Date.now() < quietUntil) {
        assert.ok(isNormal(cpuState(d.instance, spin.id), cores), 'the stopped session was demoted again');
        await new Promise((r) => setTimeout(r, 200));
      }
      assert.equal((await guardMetrics(d)).demotions[spin.id], restored.demotions[spin.id]);
      // The bursty neighbours ran the whole time and were never demoted.
      await c.exec(burst.id, { shell: `touch ${stopFile}` });
      stop = true;
      await Promise.all([...drivers, ...execs]);
      assert.ok(stepsDone >= 10, `the step-driven sessions made ${stepsDone} steps`);
      assert.deepEqual([...seenDemoted], [], 'bursty sessions seen demoted in their cgroup files');
      for (const id of calm) assert.ok(isNormal(cpuState(d.instance, id), calmCores), `${id}: ${JSON.stringify(cpuState(d.instance, id))}`);
      const end = await guardMetrics(d);
      for (const id of calm) assert.equal(end.demotions[id], 0, `demotions of ${id} in /metrics`);
    } finally {
      stop = true;
      clearInterval(watch);
      await Promise.allSettled(drivers);
      for (const id of made) await c.destroySession(id).catch(() => {});
      await Promise.allSettled(execs);
    }
  });
  it('resets and destroys a demoted session full of processes at once: its demotion is lifted before they are killed', { timeout: 180_000 }, async () => {
    const c = d.client;
    const s = await c.createSession({ image: 'minimal' });
    let holding: Promise<unknown> | undefined;
    try {
      // 800 sleeping processes, then a cap far below the guard's (cpu.idle 1, 1 ms of CPU a second):
      // killed at that cap, they take minutes to exit, and runc's delete gives up after 10 s.
      holding = c
        .exec(s.id, { shell: 'for i in $(seq 800); do sleep 600 </dev/null >/dev/null 2>&1 & done; echo started; wait', timeoutMs: 170_000 })
        .catch((e: Error) => e);
      await until(
        '800 processes in the session',
        () => {
          const pids = Number(
            readFileSync(
              v2 ? `/sys/fs/cgroup/drums-${d.instance}/sessions/${s.id}/pids.current` : `/sys/fs/cgroup/pids/drums-${d.instance}/sessions/${s.id}/pids.current`,
              'utf8',
            ),
          );
          return pids >= 800 ? pids : undefined;
        },
        60_000,
      );
      const dir = v2 ? `/sys/fs/cgroup/drums-${d.instance}/sessions/${s.id}` : `/sys/fs/cgroup/cpu/drums-${d.instance}/sessions/${s.id}`;
      if (existsSync(join(dir, 'cpu.idle'))) writeFileSync(join(dir, 'cpu.idle'), '1');
      if (v2) writeFileSync(join(dir, 'cpu.max'), '1000 1000000');
      else {
        writeFileSync(join(dir, 'cpu.cfs_period_us'), '1000000');
        writeFileSync(join(dir, 'cpu.cfs_quota_us'), '1000');
      }
      const t0 = Date.now();
      const r = await c.resetSession(s.id);
      assert.equal(r.state, 'ready');
      assert.ok(Date.now() - t0 < 30_000, `reset took ${Date.now() - t0} ms`);
      const ended = (await holding) as { exitCode?: number; signal?: string } | Error;
      assert.ok(ended instanceof Error || ended.exitCode !== 0, `the exec ended with the old generation: ${JSON.stringify(ended)}`);
      const after = await c.exec(s.id, { shell: 'ps -e --no-headers | wc -l' });
      assert.ok(Number(after.stdout.trim()) < 50, `${after.stdout.trim()} processes after the reset`);
    } finally {
      await c.destroySession(s.id).catch(() => {});
      await holding;
    }
  });
});
