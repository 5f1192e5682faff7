import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, readlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { SessionInfo } from '../src/client/client.ts';
import { hostFacts } from './host-facts.ts';
import { startPrivateDaemon } from '../src/client/private-daemon.ts';
import { sleep } from './measure.ts';
import { PAGE } from './experiments.ts';
import { quantile, summary } from './stats.ts';
import { instanceCgroup } from '../src/host/instance.ts';

/**
 * Soak: `sessions` Chromium sessions, one client each, `steps` steps per
 * session (a click + a PNG screenshot), a reset every `resetEvery` steps.
 * The daemon's RSS, open fds and the kinds of memory behind its RSS
 * (/proc/PID/smaps: heap and other anonymous memory, System V shared memory
 * (the screenshot segments), files) are sampled as the run goes. Bars: 0
 * errors; RSS and fds at the end within 10% of their value at step 1000
 * (counted over all sessions); nothing of the instance left after the daemon
 * stops. The bars compare quiescent checkpoints (at step 1000, each quarter,
 * and the end: every client held at a step boundary, one screenshot of each
 * session, 3 s of calm), with the fds by kind and the daemon's own account
 * (V8 heap, Buffers); the fd bar leaves out the clients' keep-alive TCP
 * connections to the API port.
 */
export interface SoakOptions {
  quick: boolean;
  outDir: string;
  sessions: number;
  steps: number;
  resetEvery: number;
  progress?: (m: string) => void;
}

/** The daemon's memory by kind (MiB), from /proc/PID/smaps. */
export function rssByKind(pid: number): Record<string, number> {
  const out: Record<string, number> = { anonHeap: 0, anonOther: 0, sysvShm: 0, files: 0, other: 0 };
  let kind = 'other';
  for (const line of readFileSync(`/proc/${pid}/smaps`, 'utf8').split('\n')) {
    const head = /^[0-9a-f]+-[0-9a-f]+ \S+ \S+ \S+ \d+\s*(.*)$/.exec(line);
    if (head) {
      const name = head[1]!.trim();
      kind =
        name === '[heap]'
          ? 'anonHeap'
          : name === '' || name.startsWith('[anon')
            ? 'anonOther'
            : name.startsWith('/SYSV')
              ? 'sysvShm'
              : name.startsWith('/')
                ? 'files'
                : 'other';
      continue;
    }
    const m = /^Rss:\s+(\d+) kB/.exec(line);
    if (m) out[kind]! += Number(m[1]) / 1024;
  }
  return Object.fromEntries(Object.entries(out).map(([k, v]) => [k, Math.round(v * 10) / 10]));
}

/** Which malloc the daemon runs with: jemalloc when bin/drums preloaded it, else glibc's. */
export const daemonAllocator = (pid: number): 'jemalloc' | 'glibc' =>
  /libjemalloc\.so/.test(readFileSync(`/proc/${pid}/maps`, 'utf8')) ? 'jemalloc' : 'glibc';

const rssMiB = (pid: number) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0) / 1024;
const fdCount = (pid: number) => readdirSync(`/proc/${pid}/fd`).length;

/**
 * The daemon's fds that are TCP connections on its API port (the clients' keep-alive pool,
 * whose size follows the clients' concurrency, not the daemon's state).
 */
export function httpSockets(pid: number, port: number): number {
  const inodes = new Set<string>();
  for (const f of ['tcp', 'tcp6'])
    try {
      for (const line of readFileSync(`/proc/${pid}/net/${f}`, 'utf8').split('\n').slice(1)) {
        const col = line.trim().split(/\s+/);
        if (col.length > 9 && Number.parseInt(col[1]!.split(':')[1]!, 16) === port) inodes.add(col[9]!);
      }
    } catch {}
  let n = 0;
  for (const fd of readdirSync(`/proc/${pid}/fd`))
    try {
      const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
      if (m && inodes.has(m[1]!)) n++;
    } catch {}
  return n;
}

/** The daemon's open fds by kind (socket, pipe, anon_inode:<what>, file, dev, ...), from /proc/PID/fd. */
export function fdsByKind(pid: number): Record<string, number> {
  const out: Record<string, number> = {};
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    let kind: string;
    try {
      const t = readlinkSync(`/proc/${pid}/fd/${fd}`);
      const m = /^(socket|pipe|anon_inode:\[?[\w-]+)/.exec(t);
      kind = m ? m[1]!.replace('[', '') : t.startsWith('/dev/') ? 'dev' : t.startsWith('/') ? 'file' : 'other';
    } catch {
      continue; // closed while we looked
    }
    out[kind] = (out[kind] ?? 0) + 1;
  }
  return out;
}

/** Host objects of an instance still present (after its daemon stopped). */
function residue(instance: string, stateDir: string): Record<string, string[]> {
  const mounts = readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((l) => l.split(' ')[4] ?? '')
    .filter((m) => m.startsWith(stateDir));
  const netns = execFileSync('ip', ['netns', 'list'], { encoding: 'utf8' })
    .split('\n')
    .map((l) => l.split(' ')[0]!)
    .filter((n) => n.startsWith(`drums-${instance}-`));
  const links = (JSON.parse(execFileSync('ip', ['-j', 'link', 'show'], { encoding: 'utf8' })) as { ifname: string }[])
    .map((l) => l.ifname)
    .filter((n) => n.startsWith(`dr${instance}h`));
  const cgroups = readdirSync('/sys/fs/cgroup')
    .map((c) => join('/sys/fs/cgroup', c, instanceCgroup(instance)))
    .filter((p) => existsSync(p));
  return { mounts, netns, links, cgroups };
}

export async function runSoakBench(o: SoakOptions) {
  const started = new Date().toISOString();
  const d = await startPrivateDaemon();
  const pid = (JSON.parse(readFileSync(join(d.stateDir, 'daemon.json'), 'utf8')) as { pid: number }).pid;
  const allocator = daemonAllocator(pid);
  const c = d.client;
  const port = Number(new URL(c.url).port);
  const sessions: SessionInfo[] = [];
  const samples: { step: number; t: number; rssMiB: number; fds: number; byKind?: Record<string, number> }[] = [];
  const lat: number[] = [];
  const resets: number[] = [];
  const errors: string[] = [];
  let total = 0;
  let nextSample = 0;
  const sampleEvery = Math.max(1, Math.round((o.sessions * o.steps) / 40));
  const t0 = performance.now();
  const sample = () => {
    samples.push({
      step: total,
      t: Math.round(performance.now() - t0),
      rssMiB: Math.round(rssMiB(pid) * 10) / 10,
      fds: fdCount(pid),
      ...(samples.length % 5 === 0 ? { byKind: rssByKind(pid) } : {}),
    });
  };
  // Quiescent checkpoints: once the step count passes a mark, every client stops at its next
  // step boundary; with nothing in flight (no step, no reset) and 3 s of calm, the daemon is
  // measured; then all go on. The end is one too. Point samples taken mid-run see whatever
  // resets and steps are in flight (each holds pipes, sockets, buffers); only these compare like with like.
  const total0 = o.sessions * o.steps;
  const first = Math.min(1000, Math.floor(total0 / 4));
  const marks = [first, ...[0.25, 0.5, 0.75].map((q) => Math.round(total0 * q)).filter((m) => m > first)];
  const checkpoints: {
    step: number;
    t: number;
    rssMiB: number;
    fds: number;
    fdsByKind: Record<string, number>;
    httpSockets: number;
    byKind: Record<string, number>;
    daemon: Record<string, number>;
    /** The daemon's idle collections so far (one should precede each checkpoint). */
    idleGcs: number;
  }[] = [];
  let stopped = 0;
  let measuring = false;
  let release: (() => void) | undefined;
  let held: Promise<void> | undefined;
  const checkpoint = async () => {
    // The same state at every checkpoint: each display holds the SHM segment its first
    // screenshot after a reset makes (released by the next reset), so one screenshot of each.
    // A failure here is the run's error like any step's (it must not end the bench with the daemon left running).
    await Promise.all(
      sessions.map((x) =>
        c.screenshot(x.id, 'png').catch((e) => {
          errors.push(`${x.id} checkpoint at step ${total}: ${String(e).slice(0, 200)}`);
        }),
      ),
    );
    await sleep(3000);
    const text = await (await c.request('GET', '/metrics')).text();
    const own = (k: string) =>
      Math.round((Number(new RegExp(`drums_daemon_memory_bytes\\{kind="${k}"\\} (\\d+)`).exec(text)?.[1] ?? NaN) / 1024 ** 2) * 10) / 10;
    checkpoints.push({
      step: total,
      t: Math.round(performance.now() - t0),
      rssMiB: Math.round(rssMiB(pid) * 10) / 10,
      fds: fdCount(pid),
      fdsByKind: fdsByKind(pid),
      httpSockets: httpSockets(pid, port),
      byKind: rssByKind(pid),
      daemon: { heapUsedMiB: own('heapUsed'), heapTotalMiB: own('heapTotal'), externalMiB: own('external'), arrayBuffersMiB: own('arrayBuffers') },
      idleGcs: Number(/^drums_daemon_idle_gc_total (\d+)/m.exec(text)?.[1] ?? NaN),
    });
    o.progress?.(`checkpoint at step ${total}: ${JSON.stringify(checkpoints.at(-1))}`);
  };
  const wakeIfAllStopped = (active: () => number) => {
    if (!held || measuring || stopped < active()) return;
    measuring = true;
    const r = release!;
    void checkpoint()
      .catch((e) => {
        errors.push(`checkpoint at step ${total}: ${String(e).slice(0, 200)}`);
      })
      .finally(() => {
        measuring = false;
        marks.shift();
        stopped = 0;
        held = undefined;
        r();
      });
  };
  const barrier = (active: () => number) => {
    held ??= new Promise<void>((r) => {
      release = r;
    });
    const wait = held;
    stopped++;
    wakeIfAllStopped(active);
    return wait;
  };
  try {
    o.progress?.(`creating ${o.sessions} Chromium sessions`);
    const made = await Promise.allSettled(Array.from({ length: o.sessions }, () => c.createSession({ image: 'default', url: PAGE })));
    for (const m of made) if (m.status === 'fulfilled') sessions.push(m.value);
    const failed = made.find((m) => m.status === 'rejected');
    if (failed) throw (failed as PromiseRejectedResult).reason;
    sample();
    let active = sessions.length;
    await Promise.all(
      sessions.map(async (s, k) => {
        for (let i = 1; i <= o.steps; i++) {
          if (marks.length && total >= marks[0]!) await barrier(() => active);
          const t = performance.now();
          try {
            await c.act(s.id, { actions: [{ type: 'click', x: 20 + ((i * 37 + k * 11) % 1200), y: 20 + ((i * 53) % 740) }] });
            await c.screenshot(s.id, 'png');
            lat.push(performance.now() - t);
          } catch (e) {
            if (errors.length < 20) errors.push(`${s.id} step ${i}: ${String(e).slice(0, 200)}`);
            else errors.push('');
          }
          total++;
          if (total >= nextSample) {
            nextSample = total + sampleEvery;
            sample();
            o.progress?.(`step ${total}/${o.sessions * o.steps}, daemon RSS ${samples.at(-1)!.rssMiB} MiB, ${samples.at(-1)!.fds} fds`);
          }
          if (i % o.resetEvery === 0 && i < o.steps) {
            const tr = performance.now();
            try {
              await c.resetSession(s.id);
              resets.push(performance.now() - tr);
            } catch (e) {
              errors.push(`${s.id} reset after step ${i}: ${String(e).slice(0, 200)}`);
            }
          }
        }
        active--;
        wakeIfAllStopped(() => active);
      }),
    );
    sample();
    await checkpoint();
  } finally {
    for (const s of sessions) await c.destroySession(s.id).catch((e) => errors.push(`destroy ${s.id}: ${String(e)}`));
  }
  const afterDestroy = { rssMiB: Math.round(rssMiB(pid) * 10) / 10, fds: fdCount(pid), byKind: rssByKind(pid) };
  const instance = d.instance,
    stateDir = d.stateDir;
  await d.stop();
  const left = Object.fromEntries(Object.entries(residue(instance, stateDir)).filter(([, v]) => v.length));
  // The bars compare the first quiescent checkpoint (step 1000) with the last (the end).
  const at = (step: number) => samples.find((s) => s.step >= step) ?? samples[0]!;
  const from = checkpoints[0]!;
  const end = checkpoints.at(-1)!;
  const rssGrowth = end.rssMiB / from.rssMiB - 1;
  // The clients' keep-alive connections are theirs, not the daemon's state: the fd bar leaves them out.
  const fdGrowth = (end.fds - end.httpSockets) / (from.fds - from.httpSockets) - 1;
  const pointFrom = at(Math.min(1000, Math.floor(total0 / 4))),
    pointEnd = samples.at(-1)!;
  const record = {
    schemaVersion: 2,
    kind: 'soak',
    started,
    quick: o.quick,
    host: hostFacts(),
    setup: {
      sessions: o.sessions,
      stepsPerSession: o.steps,
      resetEvery: o.resetEvery,
      step: 'POST actions (1 click) + GET screenshot png',
      image: 'default (Chromium)',
      /** The daemon's malloc (bin/drums serve preloads jemalloc where installed; DRUMS_MALLOC=glibc opts out). */
      allocator,
    },
    steps: lat.length,
    seconds: (performance.now() - t0) / 1000,
    stepMs: { ...summary(lat), p99: quantile(lat, 0.99) },
    resetMs: resets.length ? summary(resets) : null,
    resets: resets.length,
    errors: errors.length,
    errorSamples: errors.filter(Boolean).slice(0, 20),
    samples,
    checkpoints,
    from: { step: from.step, rssMiB: from.rssMiB, fds: from.fds, httpSockets: from.httpSockets },
    end: { step: end.step, rssMiB: end.rssMiB, fds: end.fds, httpSockets: end.httpSockets },
    /** The same growth between point samples taken mid-run (in-flight work included), for reference. */
    unquiesced: {
      rssGrowth: Math.round((pointEnd.rssMiB / pointFrom.rssMiB - 1) * 1000) / 1000,
      fdGrowth: Math.round((pointEnd.fds / pointFrom.fds - 1) * 1000) / 1000,
    },
    afterDestroy,
    residue: left,
    bars: {
      errors: { value: errors.length, bar: '== 0', pass: errors.length === 0 },
      rssGrowth: { value: Math.round(rssGrowth * 1000) / 1000, bar: '<= 0.10', pass: rssGrowth <= 0.1 },
      fdGrowth: { value: Math.round(fdGrowth * 1000) / 1000, bar: '<= 0.10', pass: fdGrowth <= 0.1 },
      residue: { value: Object.keys(left).length, bar: '== 0', pass: Object.keys(left).length === 0 },
    },
  };
  mkdirSync(o.outDir, { recursive: true });
  const file = join(o.outDir, `soak-${o.quick ? 'quick-' : ''}${started.replace(/[:.]/g, '-')}.json`);
  writeFileSync(file, JSON.stringify(record, null, 2) + '\n');
  return { record, file };
}

/**
 * What holds the daemon's RSS with many sessions: `n` sessions (minimal image), then one
 * screenshot of each, then each destroyed; at each point the daemon's RSS by kind
 * (/proc/PID/smaps) and its own account (/metrics drums_daemon_memory_bytes: V8 heap,
 * external = Buffers). The per-session deltas name the holder.
 */
export async function runRssProbe(o: { sessions: number; screen: string; outDir: string; progress?: (m: string) => void }) {
  const started = new Date().toISOString();
  const d = await startPrivateDaemon();
  const pid = (JSON.parse(readFileSync(join(d.stateDir, 'daemon.json'), 'utf8')) as { pid: number }).pid;
  const c = d.client;
  const own = async () => {
    const text = await (await c.request('GET', '/metrics')).text();
    const get = (k: string) => Number(new RegExp(`drums_daemon_memory_bytes\\{kind="${k}"\\} (\\d+)`).exec(text)?.[1] ?? NaN) / 1024 ** 2;
    return {
      heapUsedMiB: Math.round(get('heapUsed') * 10) / 10,
      externalMiB: Math.round(get('external') * 10) / 10,
      arrayBuffersMiB: Math.round(get('arrayBuffers') * 10) / 10,
    };
  };
  const point = async (what: string) => ({ what, rssMiB: Math.round(rssMiB(pid) * 10) / 10, byKind: rssByKind(pid), ...(await own()) });
  const points = [await point('empty')];
  const ids: string[] = [];
  try {
    for (let i = 0; i < o.sessions; i++) {
      o.progress?.(`creating session ${i + 1}/${o.sessions}`);
      ids.push((await c.createSession({ image: 'minimal', screen: o.screen })).id);
    }
    points.push(await point(`${o.sessions} sessions`));
    for (const id of ids) await c.screenshot(id, 'png');
    points.push(await point(`${o.sessions} sessions, one screenshot each`));
    for (const id of ids) await c.destroySession(id);
    ids.length = 0;
    points.push(await point('all destroyed'));
  } finally {
    for (const id of ids) await c.destroySession(id).catch(() => {});
    await d.stop();
  }
  const per = (a: number, b: number, k: keyof (typeof points)[number]) =>
    Math.round((((points[b]![k] as number) - (points[a]![k] as number)) / o.sessions) * 100) / 100;
  const record = {
    schemaVersion: 1,
    kind: 'daemon-rss',
    started,
    host: hostFacts(),
    setup: { sessions: o.sessions, image: 'minimal', screen: o.screen },
    points,
    perSessionMiB: {
      rssBySession: per(0, 1, 'rssMiB'),
      rssByScreenshot: per(1, 2, 'rssMiB'),
      externalByScreenshot: per(1, 2, 'externalMiB'),
      rssLeftAfterDestroy: per(0, 3, 'rssMiB'),
    },
  };
  mkdirSync(o.outDir, { recursive: true });
  const file = join(o.outDir, `daemon-rss-${started.replace(/[:.]/g, '-')}.json`);
  writeFileSync(file, JSON.stringify(record, null, 2) + '\n');
  return { record, file };
}
