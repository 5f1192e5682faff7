import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { SessionInfo } from '../client/client.ts';
import { hostFacts } from './host-facts.ts';
import { startPrivateDaemon } from '../client/private-daemon.ts';
import { PAGE } from './experiments.ts';
import { quantile, summary } from './stats.ts';

/**
 * Soak: `sessions` Chromium sessions, one client each, `steps` steps per
 * session (a click + a PNG screenshot), a reset every `resetEvery` steps.
 * The daemon's RSS, open fds and the kinds of memory behind its RSS
 * (/proc/PID/smaps: heap and other anonymous memory, System V shared memory
 * (the screenshot segments), files) are sampled as the run goes. Bars: 0
 * errors; RSS and fds at the end within 10% of their value at step 1000
 * (counted over all sessions); nothing of the instance left after the daemon
 * stops.
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

const rssMiB = (pid: number) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0) / 1024;
const fdCount = (pid: number) => readdirSync(`/proc/${pid}/fd`).length;

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
    .map((c) => join('/sys/fs/cgroup', c, `drums-${instance}`))
    .filter((p) => existsSync(p));
  return { mounts, netns, links, cgroups };
}

export async function runSoakBench(o: SoakOptions) {
  const started = new Date().toISOString();
  const d = await startPrivateDaemon();
  const pid = (JSON.parse(readFileSync(join(d.stateDir, 'daemon.json'), 'utf8')) as { pid: number }).pid;
  const c = d.client;
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
  try {
    o.progress?.(`creating ${o.sessions} Chromium sessions`);
    const made = await Promise.allSettled(Array.from({ length: o.sessions }, () => c.createSession({ image: 'default', url: PAGE })));
    for (const m of made) if (m.status === 'fulfilled') sessions.push(m.value);
    const failed = made.find((m) => m.status === 'rejected');
    if (failed) throw (failed as PromiseRejectedResult).reason;
    sample();
    await Promise.all(
      sessions.map(async (s, k) => {
        for (let i = 1; i <= o.steps; i++) {
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
      }),
    );
    sample();
  } finally {
    for (const s of sessions) await c.destroySession(s.id).catch((e) => errors.push(`destroy ${s.id}: ${String(e)}`));
  }
  const afterDestroy = { rssMiB: Math.round(rssMiB(pid) * 10) / 10, fds: fdCount(pid), byKind: rssByKind(pid) };
  const instance = d.instance,
    stateDir = d.stateDir;
  await d.stop();
  const left = Object.fromEntries(Object.entries(residue(instance, stateDir)).filter(([, v]) => v.length));
  const at = (step: number) => samples.find((s) => s.step >= step) ?? samples[0]!;
  const from = at(Math.min(1000, Math.floor((o.sessions * o.steps) / 4)));
  const end = samples.at(-1)!;
  const rssGrowth = end.rssMiB / from.rssMiB - 1;
  const fdGrowth = end.fds / from.fds - 1;
  const record = {
    schemaVersion: 1,
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
    },
    steps: lat.length,
    seconds: (performance.now() - t0) / 1000,
    stepMs: { ...summary(lat), p99: quantile(lat, 0.99) },
    resetMs: resets.length ? summary(resets) : null,
    resets: resets.length,
    errors: errors.length,
    errorSamples: errors.filter(Boolean).slice(0, 20),
    samples,
    from: { step: from.step, rssMiB: from.rssMiB, fds: from.fds },
    end: { step: end.step, rssMiB: end.rssMiB, fds: end.fds },
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
