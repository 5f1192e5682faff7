import { type ChildProcess, spawn } from 'node:child_process';
import { cpus } from 'node:os';
import { fileURLToPath } from 'node:url';
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { constants, monitorEventLoopDelay, PerformanceObserver } from 'node:perf_hooks';
import { Worker } from 'node:worker_threads';
import { bucketCounts } from '../src/common/prom-text.ts';
import { instanceCgroup, sessionCgroup, sessionsCgroup } from '../src/host/instance.ts';
import { daemonCgroupName, enterClientCgroup, joinClientCgroupFor, leaveClientCgroup, moveOutOfClientCgroup } from '../src/host/resources.ts';
import type { DriverData } from './noisy-driver.ts';
import type { SessionInfo } from '../src/client/client.ts';
import { hostFacts } from './host-facts.ts';
import { procCpuNs, sleep } from './measure.ts';
import { startPrivateDaemon, type PrivateDaemon } from '../src/client/private-daemon.ts';
import { PAGE } from './experiments.ts';
import { quantile, summary } from './stats.ts';
import { runUsernsBench } from './userns-bench.ts';

/**
 * Noisy neighbour: `victims` Chromium sessions are driven in a closed loop
 * (one client each: a click, then a PNG screenshot = one step; each client's
 * loop runs through all phases, and a step counts in the phase it started in) while one
 * abuser session, in turn, runs a CPU hog, a memory hog against its limit, a
 * fork bomb, a disk fill to its quota, and a flood of API calls on its own id
 * (from a separate process). Quiet phases (no abuse) sit between all abuse
 * phases (quiet, cpu, quiet, memory, quiet, ...), and each abuse runs `rounds`
 * times. The host is shared and its load drifts by minutes, so each abuse
 * phase is compared only with the two quiet phases next to it: its ratio =
 * victim p50 (p99) in the phase / the same over those two quiet phases. The
 * record gives, per abuse, the median of its per-round ratios with their
 * spread (min, max), and the pooled ratio; quietVsQuiet (every quiet phase
 * against its two quiet neighbours) is the run's noise floor.
 * Bar: each median ratio ≤ 1.2, and 0 errors in the victims.
 *
 * The host is shared: the record says how much CPU went to processes other
 * than this bench's (daemon, sessions, harness, flood) in each phase.
 */
export interface NoisyOptions {
  quick: boolean;
  outDir: string;
  victims: number;
  seconds: number;
  /** Each abuse runs this many times (quiet phases between all of them); the record gives the median ratio over the rounds. */
  rounds: number;
  /** Sessions per arm of the user-namespace cost measured after the phases, in the same run (0: not measured). */
  usernsSessions: number;
  /** The abuses to run, in this order (default: all). */
  abuses?: readonly Abuse[];
  /** The warm-up before the first phase (s): the victims' loop runs at least warmupMinS and until its step rate stops rising, or warmupS at most. */
  warmupS: number;
  warmupMinS: number;
  /** Where the harness (and the victims' driver threads) runs: the instance's client CPU cgroup (default), or the host's root cgroup, where a user's trainer runs. */
  harness?: 'root' | 'client';
  progress?: (m: string) => void;
}

export const ABUSES = ['cpu', 'memory', 'fork', 'disk', 'flood'] as const;
/** Also known to --abuses, not run by default: `idle`, a control (the abuser's exec runs `sleep`), which tells what starting an abuse costs by itself. */
const KNOWN = [...ABUSES, 'idle'] as const;
export type Abuse = (typeof KNOWN)[number];
type Phase = 'quiet' | Abuse;

/** The abuser's shell for each phase (each ends by itself after `s` seconds). */
function abuseShell(phase: Exclude<Phase, 'quiet' | 'flood'>, s: number): string {
  switch (phase) {
    case 'cpu':
      return `for i in 1 2 3 4 5 6 7 8; do timeout ${s} sh -c 'while :; do :; done' & done; wait; echo done`;
    // tail buffers a line that never ends: it grows to the session's memory limit and is OOM-killed, again and again.
    case 'memory':
      return `n=0; end=$(($(date +%s)+${s})); while [ $(date +%s) -lt $end ]; do timeout $((end-$(date +%s)+1)) tail /dev/zero; n=$((n+1)); done; echo kills=$n`;
    // The bomb's processes outlive the phase (they are the session's, up to pids.max) until the reset after it.
    case 'fork':
      return `(timeout -s KILL ${s} bash -c 'b(){ b|b& }; b') >/dev/null 2>&1 & sleep ${s}; echo pids=$(cat /sys/fs/cgroup/pids/pids.current 2>/dev/null || cat /sys/fs/cgroup/pids.current)`;
    case 'idle':
      return `sleep ${s}; echo slept`;
    case 'disk':
      return `n=0; end=$(($(date +%s)+${s})); while [ $(date +%s) -lt $end ]; do dd if=/dev/zero of=/home/user/fill bs=1M count=100000 2>/dev/null; rm -f /home/user/fill; n=$((n+1)); done; echo fills=$n`;
  }
}

/** Whether the CPU guard has this session demoted now (cpu.idle or a weight below the default). */
function isDemoted(instance: string, id: string): boolean {
  for (const [dir, weight, normal] of [
    [`/sys/fs/cgroup/cpu/${sessionCgroup(instance, id)}`, 'cpu.shares', 1024],
    [`/sys/fs/cgroup/${sessionCgroup(instance, id)}`, 'cpu.weight', 100],
  ] as const) {
    try {
      if (readFileSync(join(dir, 'cpu.idle'), 'utf8').trim() === '1') return true;
    } catch {}
    try {
      return Number(readFileSync(join(dir, weight), 'utf8')) < normal;
    } catch {}
  }
  return false;
}

/** The kernel's monotonic clock (CLOCK_MONOTONIC, the wake-up probes' clock), in seconds. */
const monoS = () => Number(process.hrtime.bigint()) / 1e9;

type Place = 'root' | 'client';

/**
 * Wake-up probes (scripts/wakeup-probe.py: sleeps 1 ms in a loop pinned to one CPU and logs each
 * wake-up more than 30 ms late, on CLOCK_MONOTONIC), one per CPU (two at most) in the host's root
 * cgroup, where a trainer runs, and one per CPU in the instance's client cgroup, whatever --harness
 * says: so every run reports how late a root-level task and a client-cgroup task woke in each phase,
 * side by side. They cost ~0.02 core each (docs/bench.md, day 11).
 */
class WakeProbes {
  private readonly probes: { where: Place; child: ChildProcess; late: [number, number][] }[] = [];
  constructor(instance: string) {
    const script = fileURLToPath(new URL('../scripts/wakeup-probe.py', import.meta.url));
    for (const where of ['root', 'client'] as const)
      for (let cpu = 0; cpu < Math.min(2, cpus().length); cpu++) {
        const child = spawn('python3', [script, '--cpu', String(cpu), '--seconds', '86400', '--late-ms', '30'], { stdio: ['ignore', 'pipe', 'ignore'] });
        const p = { where, child, late: [] as [number, number][] };
        let tail = '';
        child.stdout!.on('data', (b: Buffer) => {
          const lines = (tail + b.toString()).split('\n');
          tail = lines.pop() ?? '';
          for (const l of lines) {
            const m = /^([\d.]+) (\d+)$/.exec(l.trim());
            if (m && p.late.length < 100_000) p.late.push([Number(m[1]), Number(m[2])]);
          }
        });
        this.probes.push(p);
        // A child starts in its parent's cgroup (the harness's): each is put where it belongs.
        try {
          if (where === 'client') joinClientCgroupFor(instance, child.pid!, 0);
          else moveOutOfClientCgroup(instance, child.pid!);
        } catch {}
      }
  }
  /** Per placement, the latest wake-up (ms; 0: none over 30 ms) and how many were over 30 ms, in [t0, t1) on CLOCK_MONOTONIC. */
  within(t0: number, t1: number): Record<Place, { maxMs: number; over30ms: number }> {
    const out = { root: { maxMs: 0, over30ms: 0 }, client: { maxMs: 0, over30ms: 0 } };
    for (const p of this.probes)
      for (const [t, ms] of p.late)
        if (t >= t0 && t < t1) {
          out[p.where].maxMs = Math.max(out[p.where].maxMs, ms);
          out[p.where].over30ms++;
        }
    return out;
  }
  /** Stops them (ours, by handle) and waits until they are gone, so that the client cgroup can go. */
  async stop(): Promise<void> {
    await Promise.all(
      this.probes.map((p) =>
        p.child.exitCode !== null || p.child.signalCode !== null ? undefined : new Promise((r) => (p.child.once('close', r), p.child.kill('SIGKILL'))),
      ),
    );
  }
}

const WARMUP_WINDOW_S = 10;

/** Steps one victim's worker can record (a victim takes ~75 steps/s; a default run lasts ~20 minutes). */
const MAX_STEPS = 1 << 18;

/**
 * The victims' closed loops, a worker thread each (bench/noisy-driver.ts), and their steps on the
 * harness's clock (performance.now()). In the harness's own event loop, the steps' objects and the PNG
 * bodies drove its major GCs to 150-320 ms late in a run, each a stall of every victim at once (the
 * slowest second of the phase it fell in, quiet phases too: noisy-2026-12-05T00-02-18).
 */
class Drivers {
  private readonly _w: { steps: Float64Array; state: Int32Array; inflight: Float64Array; done: Promise<void> }[] = [];
  readonly errors: { t: number; e: string }[] = [];
  constructor(url: string, token: string, ids: string[]) {
    for (const [k, id] of ids.entries()) {
      const data: DriverData = { url, token, id, k, steps: new SharedArrayBuffer(8 * 2 * MAX_STEPS), state: new SharedArrayBuffer(16) };
      const state = new Int32Array(data.state, 0, 2);
      state[1] = 1;
      const inflight = new Float64Array(data.state, 8, 1);
      inflight[0] = Number.NaN;
      const worker = new Worker(new URL('./noisy-driver.ts', import.meta.url), { workerData: data });
      const done = new Promise<void>((resolve) => {
        worker.on('message', (m: { t?: number; e?: string; done?: boolean }) => {
          if (m.e !== undefined) this.errors.push({ t: m.t! - performance.timeOrigin, e: m.e });
          if (m.done) void worker.terminate(); // its client's keep-alive sockets would hold it open
        });
        worker.on('error', (e) => this.errors.push({ t: performance.now(), e: `driver: ${String(e)}` }));
        worker.on('exit', () => resolve());
      });
      this._w.push({ steps: new Float64Array(data.steps), state, inflight, done });
    }
  }
  /** The steps that started in [from, to) (performance.now() ms): their starts and latencies. */
  within(from: number, to: number): { t: number[]; ms: number[] } {
    const out = { t: [] as number[], ms: [] as number[] };
    for (const w of this._w) {
      const n = Atomics.load(w.state, 0);
      for (let i = 0; i < n; i++) {
        const t = w.steps[2 * i]! - performance.timeOrigin;
        if (t < from || t >= to) continue;
        out.t.push(t);
        out.ms.push(w.steps[2 * i + 1]!);
      }
    }
    return out;
  }
  /** Whether a step that started before `t` is still running. */
  inflightBefore(t: number): boolean {
    return this._w.some((w) => !Number.isNaN(w.inflight[0]!) && w.inflight[0]! - performance.timeOrigin < t);
  }
  async stop(): Promise<void> {
    for (const w of this._w) Atomics.store(w.state, 1, 0);
    await Promise.all(this._w.map((w) => w.done));
  }
}

/**
 * Runs for at least `minS` and until the closed loop's step rate over the last two WARMUP_WINDOW_S
 * windows is no more than 10% above its rate over the two before them, or for `maxS` seconds. (Window
 * against window stopped too early: a dip of a window while the rate still rose, 236 -> 220 -> 289 ->
 * 457 steps/s in a probe. Without a minimum, a plateau of 30 s at ~200 steps/s ended one warm-up at
 * 50 s, and the rate rose to ~600 in the first round: noisy-2026-12-04T23-41-59. The rate settled 90-140 s
 * after the victims' create in three runs on this host.)
 */
async function warmUp(loop: Drivers, minS: number, maxS: number) {
  const t0 = performance.now();
  const rates: number[] = [];
  const settled = () => (performance.now() - t0) / 1000 >= minS && rates.length >= 4 && rates.at(-1)! + rates.at(-2)! <= (rates.at(-3)! + rates.at(-4)!) * 1.1;
  while (!settled() && (performance.now() - t0) / 1000 < maxS) {
    const from = performance.now();
    await sleep(WARMUP_WINDOW_S * 1000);
    const to = performance.now();
    rates.push(Math.round((loop.within(from, to).ms.length / (to - from)) * 1000 * 10) / 10);
  }
  return { seconds: Math.round((performance.now() - t0) / 1000), stepsPerSec: rates, settled: settled() };
}

const load1 = () => Number(readFileSync('/proc/loadavg', 'utf8').split(' ')[0]);

/** Median, min and max of some ratios, rounded. */
function spread(xs: number[]) {
  const r = (x: number) => Math.round(x * 1000) / 1000;
  return { median: r(quantile(xs, 0.5)), min: r(Math.min(...xs)), max: r(Math.max(...xs)), n: xs.length };
}

/** CPU busy time of the whole host (ns), from /proc/stat. */
function hostBusyNs(): number {
  const f = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
  const [user, nice, system, , , irq, softirq, steal] = f as number[];
  return (user! + nice! + system! + irq! + softirq! + steal!) * (1e9 / 100);
}

/** CPU (ns) used by this bench's own processes: daemon (with its children: its own CPU cgroup where it has one), the instance's session cgroups, this harness. */
function ownCpuNs(d: PrivateDaemon, daemonPid: number, floodPid?: number): number {
  let ns = 0;
  const daemonCg = `/sys/fs/cgroup/cpuacct/${daemonCgroupName(d.instance)}/cpuacct.usage`;
  try {
    ns += existsSync(daemonCg) ? Number(readFileSync(daemonCg, 'utf8').trim()) : procCpuNs(daemonPid);
  } catch {}
  if (floodPid)
    try {
      ns += procCpuNs(floodPid);
    } catch {}
  const v1 = `/sys/fs/cgroup/cpuacct/${sessionsCgroup(d.instance)}/cpuacct.usage`;
  const v2 = `/sys/fs/cgroup/${sessionsCgroup(d.instance)}/cpu.stat`;
  try {
    if (existsSync(v1)) ns += Number(readFileSync(v1, 'utf8').trim());
    else ns += Number(/usage_usec (\d+)/.exec(readFileSync(v2, 'utf8'))![1]) * 1000;
  } catch {}
  const u = process.cpuUsage();
  return ns + (u.user + u.system) * 1000;
}

/** Every process's CPU time (ns) and name, by PID (kernel threads included). */
function taskCpu(): Map<number, { comm: string; ns: number }> {
  const m = new Map<number, { comm: string; ns: number }>();
  for (const p of readdirSync('/proc')) {
    if (!/^\d+$/.test(p)) continue;
    try {
      const st = readFileSync(`/proc/${p}/stat`, 'utf8');
      const f = st.slice(st.lastIndexOf(')') + 2).split(' ');
      m.set(Number(p), { comm: st.slice(st.indexOf('(') + 1, st.lastIndexOf(')')), ns: (Number(f[11]) + Number(f[12])) * (1e9 / 100) });
    } catch {}
  }
  return m;
}

/**
 * What used the CPU outside this bench during a phase: processes (and kernel threads) not in the
 * instance's cgroups, by name with digits folded (kworker/1:2 → kworker/N:N), in cores, largest first.
 * Processes that started and ended within the phase are not seen (their CPU is in othersUnseenCores).
 */
function othersByName(
  before: Map<number, { comm: string; ns: number }>,
  after: Map<number, { comm: string; ns: number }>,
  instance: string,
  skip: number[],
  seconds: number,
) {
  const by = new Map<string, number>();
  for (const [pid, t] of after) {
    const ns = t.ns - (before.get(pid)?.ns ?? 0);
    if (ns <= 0 || skip.includes(pid)) continue;
    let cg = '';
    try {
      cg = /^\d+:[^:]*cpuacct[^:]*:(.*)$/m.exec(readFileSync(`/proc/${pid}/cgroup`, 'utf8'))?.[1] ?? '';
    } catch {}
    if (cg.startsWith(`/${instanceCgroup(instance)}/`)) continue;
    const name = t.comm.replace(/\d+/g, 'N');
    by.set(name, (by.get(name) ?? 0) + ns);
  }
  return Object.fromEntries(
    [...by]
      .sort((a, b) => b[1] - a[1])
      .slice(0, 8)
      .map(([k, ns]) => [k, Math.round((ns / 1e9 / seconds) * 1000) / 1000]),
  );
}

/** The daemon's event-loop lag histogram (/metrics): cumulative tick counts by upper bound (s). */
async function daemonLoopLag(url: string, token: string): Promise<Map<string, number>> {
  const text = await (await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${token}` } })).text();
  return bucketCounts(text, 'drums_daemon_event_loop_lag_seconds');
}

/** Ticks of the daemon's loop-lag timer in a phase that ran later than 50, 100, 250 and 500 ms (from two scrapes). */
function lateTicks(a: Map<string, number>, b: Map<string, number>): Record<string, number> {
  const n = (m: Map<string, number>, le: string) => m.get(le) ?? 0;
  const over = (le: string) => n(b, '+Inf') - n(b, le) - (n(a, '+Inf') - n(a, le));
  return { over50ms: over('0.05'), over100ms: over('0.1'), over250ms: over('0.25'), over500ms: over('0.5') };
}

/** A flood of screenshot requests on one session id from a separate process (so the harness's timing stays clean). */
function startFlood(instance: string, url: string, token: string, id: string, seconds: number, clients: number) {
  const code = `
    const [url, token, id, seconds, clients] = process.argv.slice(1);
    const end = Date.now() + Number(seconds) * 1000;
    const counts = {};
    await Promise.all(Array.from({ length: Number(clients) }, async () => {
      while (Date.now() < end) {
        let k;
        try {
          const r = await fetch(url + '/v1/sessions/' + id + '/screenshot?format=png', { headers: { authorization: 'Bearer ' + token } });
          await r.arrayBuffer();
          k = String(r.status);
        } catch { k = 'neterr'; }
        counts[k] = (counts[k] ?? 0) + 1;
      }
    }));
    process.stdout.write(JSON.stringify(counts));
  `;
  const child = spawn(process.execPath, ['--input-type=module', '-e', code, url, token, id, String(seconds), String(clients)], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  // Not in the harness's cgroup: the flood is an abuser.
  moveOutOfClientCgroup(instance, child.pid!);
  let out = '';
  child.stdout!.on('data', (b: Buffer) => {
    out += b.toString();
  });
  const done = new Promise<Record<string, number>>((resolve) =>
    child.on('exit', () => {
      try {
        resolve(JSON.parse(out));
      } catch {
        resolve({ parseError: 1 });
      }
    }),
  );
  return { pid: child.pid!, done };
}

interface PhaseResult {
  phase: Phase;
  /** The phase's time window (performance.now ms): its steps are those that started in it. */
  window: [number, number];
  /** The same in seconds since the bench started (the clock of guardLog). */
  windowS: [number, number];
  seconds: number;
  steps: number;
  errors: number;
  errorSamples: string[];
  stepsPerSec: number;
  stepMs: ReturnType<typeof summary> & { p99: number };
  /** Per second of the phase (by when a step started): steps, p50 and p99 (ms): where in the phase the slow steps fall. */
  bySecond: { steps: number; p50: number; p99: number }[];
  /** Share of the host's 100%·cores busy with processes other than this bench's, during the phase. */
  othersCpuCores: number;
  /** How late the harness's main event loop ran its timers in the phase (ms): p99 and max. The victims' clients run in worker threads of their own; this tells of the host's stalls and the harness's own work (phase set-up, /proc reads). */
  harnessLoopDelayMs: { p99: number; max: number };
  /** The harness main thread's garbage collections in the phase: how many, their total and longest pause (ms), and the major (mark-compact) ones (before the victims had worker threads, these stalled all of them at once). */
  harnessGc: { count: number; totalMs: number; maxMs: number; major: number; majorMs: number };
  /** The daemon's event loop in the phase: how many of its 20 ms timer's ticks ran more than 50/100/250/500 ms late (a stall there delays every victim at once). */
  daemonLateTicks: Record<string, number>;
  /** The 8 largest users of othersCpuCores by process name (cores), and the rest of othersCpuCores (smaller names, processes that came and went within the phase). */
  othersTop: Record<string, number>;
  othersUnseenCores: number;
  ownCpuCores: number;
  /** Wake-up probes in the root cgroup and in the client cgroup: their latest wake-up in the phase (ms; 0: none over 30 ms) and how many were over 30 ms. */
  wakeup: Record<Place, { maxMs: number; over30ms: number }>;
  /** The host's 1-minute load average at the phase's start and end. */
  loadavg: [number, number];
  /** Share of the phase the CPU guard had the abuser demoted, and each victim on average. */
  demoted: { abuser: number; victimsMean: number };
  abuser?: Record<string, unknown>;
}

export async function runNoisyBench(o: NoisyOptions) {
  const started = new Date().toISOString();
  // The CPU guard's demotions and restores as the daemon logs them (session, reason), with when (s since the start).
  const guardLog: { t: number; line: string }[] = [];
  const t00 = performance.now();
  let tail = '';
  const d = await startPrivateDaemon(
    {},
    {
      onStderr: (b) => {
        const lines = (tail + b.toString()).split('\n');
        tail = lines.pop() ?? '';
        for (const line of lines)
          if (/session (demoted|restored)/.test(line)) guardLog.push({ t: Math.round((performance.now() - t00) / 100) / 10, line: line.slice(0, 200) });
      },
    },
  );
  // The harness is the instrument, and its stalls count as the victims': it runs in a CPU cgroup of its
  // own beside the daemon's, with the same weight, joined after the daemon's start (a child starts in its
  // parent's cgroup). Clients of a real deployment run elsewhere. Its nice would not do: where autogroups
  // are on (this host) a root-cgroup task's nice counts only inside its autogroup (docs/bench.md, day 10).
  // With --harness root it stays where it started (the root cgroup, in its autogroup): a trainer's place.
  const harnessCgroup = o.harness === 'root' ? undefined : enterClientCgroup(d.instance);
  const wake = new WakeProbes(d.instance);
  const daemonPid = (JSON.parse(readFileSync(join(d.stateDir, 'daemon.json'), 'utf8')) as { pid: number }).pid;
  const c = d.client;
  const url = c.url;
  const victims: SessionInfo[] = [];
  let abuser: SessionInfo | undefined;
  const phases: PhaseResult[] = [];
  /** Every phase's step latencies (ms), for the pooled ratios. */
  const raw: number[][] = [];
  let drivers: Drivers | undefined;
  let gapErrors = 0;
  let warmup: Awaited<ReturnType<typeof warmUp>> = { seconds: 0, stepsPerSec: [], settled: false };
  try {
    o.progress?.(`creating ${o.victims} victim sessions (Chromium) and the abuser`);
    for (let i = 0; i < o.victims; i++) victims.push(await c.createSession({ image: 'default', url: PAGE, screen: '1280x800' }));
    abuser = await c.createSession({ image: 'minimal', memoryMb: 512, diskMb: 1024 });
    const abuserId = abuser.id;
    // Warm-up: every victim's first steps (JIT, first paint) are not measured.
    await Promise.all(
      victims.map(async (v) => {
        for (let i = 0; i < 5; i++) {
          await c.act(v.id, { actions: [{ type: 'click', x: 100, y: 100 }] });
          await c.screenshot(v.id, 'png');
        }
      }),
    );
    // The victims' closed loop runs through every phase and the gaps between them (the abuser's
    // reset), so that no phase starts with all of them stepping in lockstep: a loop restarted per
    // phase made every phase's first second 2-3 times slower than the rest, quiet ones too, and
    // those steps were most of each phase's p99. Each step belongs to the phase it started in.
    const loop = (drivers = new Drivers(
      url,
      d.token,
      victims.map((v) => v.id),
    ));
    // Off the clock until the victims' step rate stops rising: new Chromium sessions do start-up work for
    // seconds each, and with eight of them sharing two cores their rate rose 3.5-fold over the first 100 s
    // (probe 2026-12-04: Chromium 0.87 core in the first 20 s, ~0 after 100 s; quiet p50 71 -> 20 ms over
    // the first round of noisy-2026-12-02T01-19-27), so the first round's abuse phases were compared with
    // quiet neighbours of another regime. This also spreads the loop out before the first phase.
    warmup = await warmUp(loop, Math.min(o.warmupMinS, o.warmupS), o.warmupS);
    o.progress?.(`warm-up: ${warmup.seconds} s, steps/s per ${WARMUP_WINDOW_S} s window: ${warmup.stepsPerSec.join(' ')}`);
    const order: Phase[] = ['quiet'];
    const abuses = o.abuses ?? ABUSES;
    for (let r = 0; r < o.rounds; r++) for (const a of abuses) order.push(a, 'quiet');
    for (const phase of order) {
      o.progress?.(`phase ${phases.length + 1}/${order.length}: ${phase} (${o.seconds} s)`);
      let abuse: Promise<Record<string, unknown>> | undefined;
      let floodPid: number | undefined;
      if (phase === 'flood') {
        const f = startFlood(d.instance, url, d.token, abuserId, o.seconds, 16);
        floodPid = f.pid;
        abuse = f.done.then((counts) => ({ requests: counts }));
      } else if (phase !== 'quiet') {
        const id = abuserId;
        abuse = c.exec(id, { shell: abuseShell(phase, o.seconds), timeoutMs: (o.seconds + 30) * 1000 }).then(
          (r) => ({ exitCode: r.exitCode, stdoutTail: r.stdout.trim().split('\n').slice(-2).join(' | '), stderrTail: r.stderr.trim().slice(-200) }),
          (e) => ({ error: String(e) }),
        );
      }
      const load0 = load1();
      // How often the CPU guard had the abuser and the victims demoted during the phase.
      const demo = { samples: 0, abuser: 0, victims: 0 };
      const lag = monitorEventLoopDelay({ resolution: 10 });
      lag.enable();
      const gc = { count: 0, totalMs: 0, maxMs: 0, major: 0, majorMs: 0 };
      const gcObs = new PerformanceObserver((list) => {
        for (const e of list.getEntries()) {
          gc.count++;
          gc.totalMs += e.duration;
          gc.maxMs = Math.max(gc.maxMs, e.duration);
          if ((e as { detail?: { kind?: number } }).detail?.kind === constants.NODE_PERFORMANCE_GC_MAJOR) {
            gc.major++;
            gc.majorMs += e.duration;
          }
        }
      });
      gcObs.observe({ entryTypes: ['gc'] });
      const watch = setInterval(() => {
        demo.samples++;
        if (isDemoted(d.instance, abuserId)) demo.abuser++;
        for (const v of victims) if (isDemoted(d.instance, v.id)) demo.victims++;
      }, 500);
      const lag0 = await daemonLoopLag(url, d.token);
      const tasks0 = taskCpu();
      const busy0 = hostBusyNs(),
        own0 = ownCpuNs(d, daemonPid, floodPid);
      const t0 = performance.now();
      const m0 = monoS();
      const end = t0 + o.seconds * 1000;
      // The phase is every step that starts in [t0, end); the loop runs on, and the phase waits for
      // its last steps to finish.
      await sleep(end - performance.now());
      while (loop.inflightBefore(end)) await sleep(5);
      const mine = loop.within(t0, end);
      const lat = mine.ms;
      /** Each step's start, in seconds since the phase began (parallel to lat). */
      const at = mine.t.map((x) => (x - t0) / 1000);
      const failed = loop.errors.filter((x) => x.t >= t0 && x.t < end);
      const errors = failed.length;
      const errorSamples = failed.slice(0, 5).map((x) => x.e);
      clearInterval(watch);
      lag.disable();
      gcObs.disconnect();
      const elapsed = (performance.now() - t0) / 1000;
      const busy = hostBusyNs() - busy0,
        own = ownCpuNs(d, daemonPid, floodPid) - own0;
      const othersTop = othersByName(tasks0, taskCpu(), d.instance, [process.pid, ...(floodPid ? [floodPid] : [])], elapsed);
      const othersCpuCores = Math.max(0, (busy - own) / 1e9 / elapsed);
      const daemonLateTicks = lateTicks(lag0, await daemonLoopLag(url, d.token));
      const abuserResult = abuse ? await abuse : undefined;
      raw.push(lat);
      phases.push({
        phase,
        window: [t0, end],
        windowS: [Math.round((t0 - t00) / 100) / 10, Math.round((end - t00) / 100) / 10],
        seconds: elapsed,
        steps: lat.length,
        errors,
        errorSamples,
        stepsPerSec: lat.length / elapsed,
        stepMs: { ...summary(lat), p99: quantile(lat, 0.99) },
        bySecond: Array.from({ length: Math.ceil(o.seconds) }, (_, sec) => {
          const xs = lat.filter((_, j) => Math.floor(at[j]!) === sec);
          const r = (x: number) => Math.round(x);
          return { steps: xs.length, p50: xs.length ? r(quantile(xs, 0.5)) : 0, p99: xs.length ? r(quantile(xs, 0.99)) : 0 };
        }),
        othersCpuCores,
        wakeup: wake.within(m0, m0 + (end - t0) / 1000),
        harnessLoopDelayMs: { p99: Math.round(lag.percentile(99) / 1e5) / 10, max: Math.round(lag.max / 1e5) / 10 },
        daemonLateTicks,
        harnessGc: { ...gc, totalMs: Math.round(gc.totalMs), maxMs: Math.round(gc.maxMs * 10) / 10, majorMs: Math.round(gc.majorMs) },
        othersTop,
        othersUnseenCores: Math.round(Math.max(0, othersCpuCores - Object.values(othersTop).reduce((a, b) => a + b, 0)) * 1000) / 1000,
        ownCpuCores: own / 1e9 / elapsed,
        loadavg: [load0, load1()],
        demoted: {
          abuser: demo.samples ? Math.round((demo.abuser / demo.samples) * 100) / 100 : 0,
          victimsMean: demo.samples ? Math.round((demo.victims / demo.samples / victims.length) * 1000) / 1000 : 0,
        },
        ...(abuserResult
          ? {
              abuser: {
                ...abuserResult,
                session: await c.getSession(abuser.id).then((s) => ({ state: s.state, memory: s.memory, brokenReason: s.brokenReason })),
              },
            }
          : {}),
      });
      // Between phases the abuser starts clean (the fork bomb's leftovers, a full disk), off the clock.
      if (phase !== 'quiet') {
        await c.resetSession(abuser.id);
        await sleep(2000);
      }
    }
    // Errors between phases (the abuser's reset) count against the victims too.
    gapErrors = loop.errors.filter((x) => !phases.some((p) => x.t >= p.window[0] && x.t < p.window[1])).length;
  } finally {
    await drivers?.stop();
    await wake.stop();
    for (const s of [...victims, ...(abuser ? [abuser] : [])]) await c.destroySession(s.id).catch(() => {});
    await d.stop();
    leaveClientCgroup(d.instance); // the user-namespace arms' daemon, started next, is not the harness
  }
  /** Phase i against the quiet phases next to it: [p50 ratio, p99 ratio]. */
  const against = (i: number): [number, number] => {
    const near = [i - 1, i + 1].filter((j) => phases[j]?.phase === 'quiet' && j !== i).flatMap((j) => raw[j]!);
    return [quantile(raw[i]!, 0.5) / quantile(near, 0.5), quantile(raw[i]!, 0.99) / quantile(near, 0.99)];
  };
  const neighbours = (i: number) => [i - 1, i + 1].filter((j) => phases[j]?.phase === 'quiet');
  const ratios: Record<string, { p50: ReturnType<typeof spread>; p99: ReturnType<typeof spread>; pooled: { p50: number; p99: number; stepsPerSec: number } }> =
    {};
  const bars: Record<string, { value: number; bar: string; pass: boolean }> = {};
  for (const a of o.abuses ?? ABUSES) {
    const idx = phases.map((p, i) => (p.phase === a ? i : -1)).filter((i) => i >= 0);
    if (!idx.length) continue;
    const per = idx.map(against);
    // Pooled over the rounds as well (steps of all its phases against all their quiet neighbours), for reference.
    const abused = idx.flatMap((i) => raw[i]!);
    const quietIdx = [...new Set(idx.flatMap(neighbours))];
    const quiet = quietIdx.flatMap((i) => raw[i]!);
    const secs = (ix: number[]) => ix.reduce((t, i) => t + phases[i]!.seconds, 0);
    const r = {
      p50: spread(per.map((x) => x[0])),
      p99: spread(per.map((x) => x[1])),
      pooled: {
        p50: quantile(abused, 0.5) / quantile(quiet, 0.5),
        p99: quantile(abused, 0.99) / quantile(quiet, 0.99),
        stepsPerSec: abused.length / secs(idx) / (quiet.length / secs(quietIdx)),
      },
    };
    ratios[a] = r;
    bars[`${a}P50Ratio`] = { value: r.p50.median, bar: '<= 1.2', pass: r.p50.median <= 1.2 };
    bars[`${a}P99Ratio`] = { value: r.p99.median, bar: '<= 1.2', pass: r.p99.median <= 1.2 };
  }
  // The noise floor: every quiet phase (but the first and last) against its two quiet neighbours, two phases away.
  const quietIdxAll = phases.map((p, i) => (p.phase === 'quiet' ? i : -1)).filter((i) => i >= 0);
  const floor = quietIdxAll.slice(1, -1).map((i) => {
    const near = [i - 2, i + 2].filter((j) => phases[j]?.phase === 'quiet').flatMap((j) => raw[j]!);
    return [quantile(raw[i]!, 0.5) / quantile(near, 0.5), quantile(raw[i]!, 0.99) / quantile(near, 0.99)] as const;
  });
  const quietVsQuiet = floor.length ? { p50: spread(floor.map((x) => x[0])), p99: spread(floor.map((x) => x[1])) } : null;
  // The user-namespace cost (create, reset, memory per session) against host uids, in the same run:
  // bench userns's arms, alternated on a private daemon of their own.
  let usernsCost: Record<string, unknown> | null = null;
  if (o.usernsSessions > 0) {
    o.progress?.(`user-namespace cost: ${o.usernsSessions} sessions per arm`);
    const u = await runUsernsBench({ image: 'default', url: PAGE, sessions: o.usernsSessions, settleSeconds: 5, outDir: o.outDir, progress: o.progress });
    usernsCost = { record: basename(u.file), sessionsPerArm: o.usernsSessions, ratios: u.record.ratios, errors: u.record.errors };
  }
  // The trainer's share (issue 30): the latest wake-up of a root-cgroup task over the run's phases, and a client-cgroup task's for reference.
  const wakeupMax = { root: Math.max(0, ...phases.map((p) => p.wakeup.root.maxMs)), client: Math.max(0, ...phases.map((p) => p.wakeup.client.maxMs)) };
  bars.rootWakeupMaxMs = { value: wakeupMax.root, bar: '<= 100', pass: wakeupMax.root <= 100 };
  const victimErrors = phases.reduce((a, p) => a + p.errors, 0) + gapErrors;
  bars.victimErrors = { value: victimErrors, bar: '== 0', pass: victimErrors === 0 };
  const record = {
    schemaVersion: 2,
    kind: 'noisy-neighbour',
    started,
    quick: o.quick,
    host: hostFacts(),
    setup: {
      rounds: o.rounds,
      abuses: o.abuses ?? ABUSES,
      victims: o.victims,
      victimImage: 'default (Chromium on a static page)',
      step: 'POST actions (1 click) + GET screenshot png',
      loop: 'one closed loop per victim through all phases and the gaps between them; a step counts in the phase it started in',
      abuser: { image: 'minimal', memoryMb: 512, diskMb: 1024, pids: 1024, cpus: 'default' },
      secondsPerPhase: o.seconds,
      /** Off the clock before the first phase: until the victims' step rate stopped rising (settled), or warmupS. */
      warmup: { ...warmup, minS: o.warmupMinS, maxS: o.warmupS, windowS: WARMUP_WINDOW_S },
      /** The CPU cgroup the harness and the victims' driver threads ran in (the daemon's weight), or null where it could not make one. */
      harnessCgroup: harnessCgroup ?? null,
      /** --harness: where the harness was asked to run (client: harnessCgroup; root: the host's root cgroup). */
      harness: o.harness ?? 'client',
      floodClients: 16,
    },
    phases,
    /** Victim errors in steps that started between phases (the abuser's reset); counted in the victimErrors bar. */
    gapErrors,
    /** The CPU guard's log lines (demoted / restored, with the session and why), s since the start; victims are `victimIds`. */
    guardLog,
    victimIds: victims.map((v) => v.id),
    abuserId: abuser?.id,
    ratios,
    /** The wake-up probes' latest wake-up over all phases (ms), by cgroup; per phase in phases[].wakeup. */
    wakeupMaxMs: wakeupMax,
    bars,
    noise: {
      quietVsQuiet,
      note: 'othersCpuCores: CPU the rest of the (shared) host used during each phase, in cores; this bench itself used ownCpuCores.',
      othersCpuCoresByPhase: phases.map((p) => [p.phase, Math.round(p.othersCpuCores * 100) / 100]),
      othersTopByPhase: phases.map((p) => [p.phase, p.othersTop]),
      loadavgByPhase: phases.map((p) => [p.phase, ...p.loadavg]),
    },
    usernsCost,
  };
  mkdirSync(o.outDir, { recursive: true });
  const file = join(o.outDir, `noisy-${o.quick ? 'quick-' : ''}${started.replace(/[:.]/g, '-')}.json`);
  writeFileSync(file, JSON.stringify(record, null, 2) + '\n');
  return { record, file };
}

/** `--abuses cpu,fork` → ['cpu', 'fork']; an unknown name is an error that lists the known ones. */
export function parseAbuses(list: string): Abuse[] {
  const out = list
    .split(',')
    .map((x) => x.trim())
    .filter(Boolean);
  const bad = out.filter((x) => !(KNOWN as readonly string[]).includes(x));
  if (bad.length || !out.length) throw new Error(`--abuses: unknown ${bad.join(', ') || '(empty)'}; choose from ${KNOWN.join(', ')}`);
  return out as Abuse[];
}
