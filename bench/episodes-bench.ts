import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { DrumsClient, SessionInfo } from '../src/client/client.ts';
import { exportEpisode } from '../src/client/episode-export.ts';
import { startPrivateDaemon } from '../src/client/private-daemon.ts';
import { hostFacts } from './host-facts.ts';
import { hostLoad, procCpuNs } from './measure.ts';
import { quantile } from './stats.ts';

/**
 * `drums bench episodes`: what recording costs (docs/episodes.md, issue 31). At each N, the arms run one after the
 * other on one private daemon, each with N fresh sessions of its own stepped in a closed loop for the same time:
 * `none` (not recorded), `actions` (record: true), `2fps` and `10fps` (damage-driven frames). A step is a click at
 * a new place and a PNG screenshot of the answer, so the screen (its cursor) changes every step and every frame
 * tick has a new image to keep: the worst case for frames. Per arm: steps/s (all sessions together), p50 and p99
 * step latency, the daemon's CPU (utime+stime of its process) and the bytes its episodes hold, both per
 * session-minute. The arms' order turns round at every trial, so a drift of the host hits every arm alike.
 * Then the export of one 100-step episode (frames at 2 fps): its time and size, recording.mp4's too.
 */
export interface EpisodesBenchOptions {
  ns: number[];
  /** Seconds each arm steps at each N. */
  seconds: number;
  trials: number;
  image: string;
  /** Steps of the exported episode. */
  exportSteps: number;
  /**
   * Each stepped session's diskMb. Admission counts every session's whole quota against the free disk: 100 sessions
   * of the default 512 MiB did not fit a host with 27 GiB free, and a stepped session writes next to nothing.
   */
  diskMb: number;
  outDir: string;
  progress?: (msg: string) => void;
}

const ARMS: { name: string; record: { frames?: number } | null }[] = [
  { name: 'none', record: null },
  { name: 'actions', record: {} },
  { name: '2fps', record: { frames: 2 } },
  { name: '10fps', record: { frames: 10 } },
];

const round = (x: number, d = 1) => Math.round(x * 10 ** d) / 10 ** d;

/** One step: a click somewhere new, answered with a PNG screenshot. */
async function step(c: DrumsClient, s: SessionInfo, i: number): Promise<void> {
  await c.act(s.id, { actions: [{ type: 'click', x: 50 + ((i * 37) % 500), y: 50 + ((i * 53) % 300) }], screenshot: { format: 'png' } });
}

async function createMany(c: DrumsClient, n: number, spec: Record<string, unknown>, concurrency = 4): Promise<SessionInfo[]> {
  const out: SessionInfo[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(concurrency, n) }, async () => {
      while (next < n) {
        next++;
        out.push(await c.createSession(spec as never));
      }
    }),
  );
  return out;
}

function duBytes(dir: string): number {
  let n = 0;
  for (const f of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, f.name);
    n += f.isDirectory() ? duBytes(p) : statSync(p).size;
  }
  return n;
}

export async function runEpisodesBench(o: EpisodesBenchOptions) {
  const progress = o.progress ?? (() => {});
  const started = new Date().toISOString();
  const loadBefore = hostLoad();
  // The quotas out of the way: the bench measures recording, not its refusal.
  const d = await startPrivateDaemon({
    DRUMS_EPISODE_SESSION_MB: '100000',
    DRUMS_EPISODE_MAX_MB: '1000000',
    DRUMS_MAX_SESSIONS: String(Math.max(...o.ns) + 4),
  });
  const c = d.client;
  // The daemon's node process (bin/drums runs it under tini; d.pid is the launcher's child).
  const daemonPid = (JSON.parse(readFileSync(join(d.stateDir, 'daemon.json'), 'utf8')) as { pid: number }).pid;
  const rows: Record<string, unknown>[] = [];
  const errors: string[] = [];
  let exportResult: Record<string, unknown> | null = null;
  try {
    // Warm-up (page cache of the image), not counted.
    await c.destroySession((await c.createSession({ image: o.image })).id);
    for (const n of o.ns) {
      for (let t = 0; t < o.trials; t++) {
        const order = t % 2 ? [...ARMS].reverse() : ARMS;
        for (const arm of order) {
          progress(`N=${n} trial ${t + 1}/${o.trials} arm ${arm.name}: creating`);
          const sessions = await createMany(c, n, { image: o.image, diskMb: o.diskMb, ...(arm.record ? { record: arm.record } : {}) });
          try {
            const bytes0 = await episodeBytes(c, sessions);
            progress(`N=${n} trial ${t + 1}/${o.trials} arm ${arm.name}: stepping ${o.seconds}s`);
            const cpu0 = procCpuNs(daemonPid);
            const t0 = performance.now();
            const end = t0 + o.seconds * 1000;
            const ms: number[] = [];
            await Promise.all(
              sessions.map(async (s, k) => {
                let i = k;
                while (performance.now() < end) {
                  const a = performance.now();
                  try {
                    await step(c, s, i++);
                    ms.push(performance.now() - a);
                  } catch (e) {
                    errors.push(`N=${n} ${arm.name}: ${(e as Error).message}`.slice(0, 300));
                    return;
                  }
                }
              }),
            );
            const wall = (performance.now() - t0) / 1000;
            const cpuS = (procCpuNs(daemonPid) - cpu0) / 1e9;
            const bytes = (await episodeBytes(c, sessions)) - bytes0;
            const sessionMinutes = (n * wall) / 60;
            rows.push({
              n,
              trial: t + 1,
              arm: arm.name,
              record: arm.record,
              steps: ms.length,
              seconds: round(wall, 2),
              stepsPerS: round(ms.length / wall, 2),
              p50Ms: round(quantile(ms, 0.5)),
              p99Ms: round(quantile(ms, 0.99)),
              daemonCpuPct: round((cpuS / wall) * 100),
              daemonCpuMsPerSessionMinute: round((cpuS * 1000) / sessionMinutes),
              diskBytesPerSessionMinute: Math.round(bytes / sessionMinutes),
            });
          } finally {
            progress(`N=${n} arm ${arm.name}: destroying`);
            for (const s of sessions) await c.destroySession(s.id).catch(() => {});
          }
        }
      }
    }
    exportResult = await measureExport(c, o, progress);
  } finally {
    await d.stop().catch(() => {});
  }
  // Medians over trials, then each recorded arm against `none` at the same N.
  const byArm = (n: number, arm: string) => rows.filter((r) => r.n === n && r.arm === arm);
  const med = (xs: number[]) => (xs.length ? quantile(xs, 0.5) : NaN);
  const summary = o.ns.map((n) => {
    const base = med(byArm(n, 'none').map((r) => r.stepsPerS as number));
    return {
      n,
      arms: Object.fromEntries(
        ARMS.map((a) => {
          const rs = byArm(n, a.name);
          const sps = med(rs.map((r) => r.stepsPerS as number));
          return [
            a.name,
            {
              stepsPerS: round(sps, 2),
              vsNonePct: a.name === 'none' ? 0 : round(((sps - base) / base) * 100),
              p99Ms: round(med(rs.map((r) => r.p99Ms as number))),
              daemonCpuMsPerSessionMinute: round(med(rs.map((r) => r.daemonCpuMsPerSessionMinute as number))),
              diskBytesPerSessionMinute: Math.round(med(rs.map((r) => r.diskBytesPerSessionMinute as number))),
            },
          ];
        }),
      ),
    };
  });
  const worst2fps = Math.min(...summary.map((s) => (s.arms['2fps'] as { vsNonePct: number }).vsNonePct));
  const record = {
    schemaVersion: 1,
    kind: 'episodes',
    started,
    finished: new Date().toISOString(),
    config: { ns: o.ns, seconds: o.seconds, trials: o.trials, image: o.image, exportSteps: o.exportSteps, diskMb: o.diskMb },
    host: hostFacts(),
    noise: { loadavgBefore: loadBefore, loadavgAfter: hostLoad() },
    method: {
      arms: 'none: not recorded; actions: record true; 2fps, 10fps: record {frames}. Each arm its own N fresh sessions, stepped in a closed loop for the same seconds; the order of the arms turns round every trial',
      step: 'a click at a new place and a PNG screenshot in the answer (POST /actions with screenshot), so every step and every frame tick sees a changed screen',
      daemonCpu: "utime+stime of the daemon's process over the stepping window",
      disk: "the bytes the sessions' episodes hold (GET /v1/sessions/{id}/episodes) after the window, less before, per session-minute",
      export: `one session recorded at 2 fps, ${o.exportSteps} steps, reset (closing the episode), then the export of \`drums episodes export\` (the OSWorld layout with recording.mp4 and the dataset)`,
    },
    rows,
    summary,
    export: exportResult,
    bars: { stepsPerSAt2fps: { bar: '>= -5% against none', value: worst2fps, pass: worst2fps >= -5 } },
    errors,
  };
  mkdirSync(o.outDir, { recursive: true });
  const file = join(o.outDir, `episodes-${started.replace(/[:.]/g, '-')}.json`);
  writeFileSync(file, JSON.stringify(record, null, 2) + '\n');
  return { record, file };
}

async function episodeBytes(c: DrumsClient, sessions: SessionInfo[]): Promise<number> {
  let n = 0;
  for (const s of sessions) if (s.recording) for (const e of await c.listEpisodes(s.id)) n += e.bytes;
  return n;
}

async function measureExport(c: DrumsClient, o: EpisodesBenchOptions, progress: (m: string) => void) {
  progress(`export: recording ${o.exportSteps} steps`);
  const s = await c.createSession({ image: o.image, record: { frames: 2 } });
  const dir = mkdtempSync(join(tmpdir(), 'drums-bench-export-'));
  try {
    for (let i = 0; i < o.exportSteps; i++) await step(c, s, i);
    await c.resetSession(s.id);
    const [ep] = await c.listEpisodes(s.id);
    progress('export: writing');
    const t0 = performance.now();
    const r = await exportEpisode(c, s.id, 1, join(dir, 'g1'));
    const ms = performance.now() - t0;
    return {
      steps: r.steps,
      frames: ep!.frames,
      episodeBytes: ep!.bytes,
      exportMs: Math.round(ms),
      exportBytes: duBytes(join(dir, 'g1')),
      recordingMp4Bytes: r.videoBytes,
      ...(r.videoSkipped ? { videoSkipped: r.videoSkipped } : {}),
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
    await c.destroySession(s.id).catch(() => {});
  }
}
