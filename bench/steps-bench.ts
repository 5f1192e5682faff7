/**
 * `drums bench steps`: the step hot path (act + screenshot) of this checkout against another
 * checkout (today's code, e.g. a git worktree of 4c106a9) in the same run, side by side.
 *
 * Per arm (a private daemon of that checkout; arms alternate, order rotated per trial):
 * - N Chromium sessions (default image, 1280x800) on a page whose clock ticks every second;
 * - closed loop: `clients` clients, each stepping its share of the sessions round robin; a step
 *   is one POST /actions {click at a new place, screenshot PNG}, asked as the binary response
 *   (the old daemon answers JSON; the same client decodes either) → steps/s and latency, at
 *   each N of the ladder;
 * - open loop at `offered` steps/s (requests sent on schedule, latency from the scheduled time)
 *   → p50/p99;
 * - daemon CPU per step by format (png, jpeg, webp, raw, and "unchanged": GET /screenshot of an
 *   unchanged screen and cursor) from the daemon process' utime+stime;
 * - streaming (arms that have it): every session streamed as 2 fps quarter-size JPEG thumbnails
 *   and one watched at full size up to 30 fps while being driven → frames/s and daemon CPU.
 */
import { mkdirSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import WebSocket from 'ws';
import type { DrumsClient, SessionInfo } from '../src/client/client.ts';
import { gitState, hostFacts } from './host-facts.ts';
import { startPrivateDaemon, type PrivateDaemon } from '../src/client/private-daemon.ts';
import type { BenchRecord, ResultRow, TrialRecord, Verdict } from './record.ts';
import { quantile, summary } from './stats.ts';
import { judge, loadBars } from './bars.ts';

/** summary() plus p99 (tail latency is the point here). */
const dist = (xs: number[]) => ({ ...summary(xs), ...(xs.length ? { p99: quantile(xs, 0.99) } : {}) });

/** The ceiling arm's name: this checkout's daemon with DRUMS_BENCH_STORED_FRAME=1. */
export const CEILING_ARM = 'ceiling';
export type StepFormat = 'png' | 'jpeg';

export interface StepsOptions {
  /**
   * Arms: name → bin/drums of a checkout, and the daemon's extra environment (the ceiling arm:
   * DRUMS_BENCH_STORED_FRAME=1, every screenshot the session's first: no capture, no encode).
   */
  arms: { name: string; bin: string; description: string; env?: NodeJS.ProcessEnv }[];
  sessions: number[];
  /** Screen sizes (`WxH`, the sessions' `screen`): every arm runs at each. */
  screens: string[];
  /** Screenshot formats of the closed-loop step (JPEG at quality 80). */
  formats: StepFormat[];
  clients: number;
  seconds: number;
  offered: number;
  trials: number;
  quick: boolean;
  outDir: string;
  command: string;
  progress: (m: string) => void;
}

const PAGE =
  'data:text/html,' +
  encodeURIComponent(
    '<!doctype html><title>tick</title><body style="margin:0;font:48px sans-serif;background:#fafafa"><div id=t style="padding:40px"></div><p style="padding:40px;font-size:20px">Drums steps bench: a page whose clock ticks once a second.</p><script>setInterval(()=>t.textContent=new Date().toISOString(),1000)</script>',
  );
const FORMATS = ['png', 'jpeg', 'webp', 'raw'] as const;
/** Each session's disk quota (MiB); see the create below. */
const BENCH_DISK_MB = 128;

/** The daemon's own node process (bin/drums serve runs it under tini, which also adopts session processes). */
function daemonNodePid(pid: number): number {
  const look = (p: number): number | null => {
    try {
      const cmd = readFileSync(`/proc/${p}/cmdline`, 'utf8');
      if (cmd.includes('src/cli/main.ts') && !cmd.startsWith('tini')) return p;
      for (const t of readdirSync(`/proc/${p}/task`)) {
        for (const c of readFileSync(`/proc/${p}/task/${t}/children`, 'utf8').trim().split(/\s+/).filter(Boolean)) {
          const cc = Number(c);
          const cm = readFileSync(`/proc/${cc}/cmdline`, 'utf8');
          if (cm.includes('src/cli/main.ts')) return cc;
        }
      }
    } catch {
      /* gone */
    }
    return null;
  };
  return look(pid) ?? pid;
}

function cpuMs(pid: number): number {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(f[11]) + Number(f[12])) * 10;
}

function hostBusy(): { loadavg1: number } {
  return { loadavg1: Number(readFileSync('/proc/loadavg', 'utf8').split(' ')[0]) };
}

const round = (x: number, d = 1) => Math.round(x * 10 ** d) / 10 ** d;

async function closedLoop(c: DrumsClient, ids: string[], clients: number, seconds: number, pid: number, format: StepFormat = 'png') {
  const lat: number[] = [];
  let steps = 0,
    errors = 0,
    k = 0,
    same = 0;
  // Per session, its last image: the share of steps that got the same bytes again shows whether
  // frames were stored (the ceiling arm: all but the first) or captured (a click moves the pointer).
  const last = new Map<string, Buffer>();
  const cpu0 = cpuMs(pid);
  const t0 = performance.now();
  const end = t0 + seconds * 1000;
  await Promise.all(
    Array.from({ length: clients }, async (_, i) => {
      const mine = ids.filter((_, j) => j % clients === i);
      let m = 0;
      while (performance.now() < end && mine.length) {
        const id = mine[m++ % mine.length]!;
        const n = k++;
        const t = performance.now();
        try {
          const r = await c.actImage(id, {
            actions: [{ type: 'click', x: 200 + ((n * 37) % 900), y: 300 + ((n * 13) % 400) }],
            screenshot: { format, ...(format === 'jpeg' ? { quality: 80 } : {}) },
          });
          if (!r.image || r.image.data.length < 100) throw new Error('no image');
          steps++;
          lat.push(performance.now() - t);
          if (last.get(id)?.equals(r.image.data)) same++;
          last.set(id, r.image.data);
        } catch {
          errors++;
        }
      }
    }),
  );
  const wall = (performance.now() - t0) / 1000;
  return {
    steps,
    errors,
    seconds: round(wall, 2),
    stepsPerSec: round(steps / wall),
    daemonCpuMsPerStep: round((cpuMs(pid) - cpu0) / Math.max(1, steps), 2),
    latency: dist(lat),
    sameImageAsPrevious: round(same / Math.max(1, steps - last.size), 3),
    samples: lat,
  };
}

async function openLoop(c: DrumsClient, ids: string[], rate: number, seconds: number) {
  const lat: number[] = [];
  let errors = 0;
  const t0 = performance.now();
  const total = Math.round(rate * seconds);
  const inflight: Promise<void>[] = [];
  for (let n = 0; n < total; n++) {
    const at = t0 + (n * 1000) / rate;
    const wait = at - performance.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    const id = ids[n % ids.length]!;
    inflight.push(
      c.actImage(id, { actions: [{ type: 'click', x: 200 + ((n * 37) % 900), y: 300 + ((n * 13) % 400) }], screenshot: { format: 'png' } }).then(
        () => {
          lat.push(performance.now() - at);
        },
        () => {
          errors++;
        },
      ),
    );
  }
  await Promise.all(inflight);
  return { offered: rate, sent: total, errors, latency: dist(lat), samples: lat };
}

/** Windows per format for the CPU-per-step figures (median reported), and the idle window before them. */
const CPU_WINDOWS = 5;
const IDLE_WINDOW_S = 3;

/**
 * Daemon CPU per step by format, made robust against a shared host: the daemon's own utime+stime
 * (/proc/PID/stat) over CPU_WINDOWS short windows per format, the formats interleaved window by
 * window (so drifting load hits every format alike), and the median window reported. First an
 * idle window (no requests) gives the daemon's background rate (damage events of N ticking
 * pages, the CPU guard, liveness polls): `netOfIdleMsPerStep` is each window's CPU minus that
 * rate, per step.
 */
async function cpuPerFormat(c: DrumsClient, ids: string[], clients: number, seconds: number, pid: number) {
  type Row = {
    steps: number;
    daemonCpuMsPerStep: number;
    stepsPerSec: number;
    windowsMsPerStep: number[];
    netOfIdleMsPerStep: number;
    sameAsPrevious?: number;
  };
  const out: Record<string, Row> & { idle?: { seconds: number; daemonCpuMsPerSec: number } } = {};
  const i0 = cpuMs(pid),
    it0 = performance.now();
  await new Promise((r) => setTimeout(r, IDLE_WINDOW_S * 1000));
  const idleWall = (performance.now() - it0) / 1000;
  const idleRate = (cpuMs(pid) - i0) / idleWall; // ms of CPU per s
  const acc: Record<string, { steps: number; wall: number; per: number[]; net: number[] }> = {};
  const windowS = Math.max(1, seconds / CPU_WINDOWS);
  let k = 0;
  const run = async (name: string, step: (id: string, n: number) => Promise<unknown>) => {
    let steps = 0;
    const cpu0 = cpuMs(pid);
    const t0 = performance.now();
    const end = t0 + windowS * 1000;
    await Promise.all(
      Array.from({ length: clients }, async (_, i) => {
        const mine = ids.filter((_, j) => j % clients === i);
        let m = 0;
        while (performance.now() < end && mine.length) {
          try {
            await step(mine[m++ % mine.length]!, k++);
            steps++;
          } catch {
            /* counted out */
          }
        }
      }),
    );
    const wall = (performance.now() - t0) / 1000;
    const used = cpuMs(pid) - cpu0;
    const a = (acc[name] ??= { steps: 0, wall: 0, per: [], net: [] });
    a.steps += steps;
    a.wall += wall;
    if (steps > 0) {
      a.per.push(used / steps);
      a.net.push(Math.max(0, used - idleRate * wall) / steps);
    }
  };
  // Unchanged: the same screen and cursor asked again (GET /screenshot, nothing moves): each
  // client asks its own session back to back, so only the page's once-a-second tick changes it.
  let hits = 0,
    asked = 0;
  const last = new Map<string, Buffer>();
  const unchanged = async (id: string) => {
    const own = ids[ids.indexOf(id) % clients]!;
    const r = await c.screenshotEx(own, { format: 'png' });
    asked++;
    const prev = last.get(own);
    if (prev?.equals(r.data)) hits++;
    last.set(own, r.data);
  };
  for (let w = 0; w < CPU_WINDOWS; w++) {
    for (const f of FORMATS) {
      await run(f, (id, n) =>
        c.actImage(id, {
          actions: [{ type: 'move', x: 200 + ((n * 37) % 900), y: 300 + ((n * 13) % 400) }],
          screenshot: { format: f, ...(f === 'jpeg' || f === 'webp' ? { quality: 80 } : {}) },
        }),
      );
    }
    await run('unchanged', unchanged);
  }
  const med = (xs: number[]) => (xs.length ? quantile(xs, 0.5) : Number.NaN);
  for (const [name, a] of Object.entries(acc))
    out[name] = {
      steps: a.steps,
      daemonCpuMsPerStep: round(med(a.per), 2),
      stepsPerSec: round(a.steps / Math.max(a.wall, 1e-9)),
      windowsMsPerStep: a.per.map((x) => round(x, 2)),
      netOfIdleMsPerStep: round(med(a.net), 2),
    };
  if (out.unchanged) out.unchanged.sameAsPrevious = round(hits / Math.max(1, asked), 3);
  out.idle = { seconds: round(idleWall, 2), daemonCpuMsPerSec: round(idleRate, 1) };
  return out;
}

async function streaming(d: PrivateDaemon, url: string, ids: string[], seconds: number, pid: number) {
  const ws = url.replace(/^http/, 'ws');
  let frames = 0,
    watchedFrames = 0,
    bytes = 0;
  const socks: WebSocket[] = [];
  const open = (id: string, q: string, onFrame: (n: number) => void) =>
    new Promise<WebSocket>((res, rej) => {
      const s = new WebSocket(`${ws}/v1/sessions/${id}/stream?${q}`, ['drums'], { headers: { authorization: `Bearer ${d.token}` } });
      s.on('message', (data, bin) => {
        if (bin) onFrame((data as Buffer).length);
      });
      s.once('open', () => res(s));
      s.once('error', rej);
      s.once('unexpected-response', (_q, r) => rej(new Error(`stream refused: ${r.statusCode}`)));
    });
  try {
    for (const id of ids)
      socks.push(
        await open(id, 'fps=2&scale=0.25&format=jpeg&quality=60', (n) => {
          frames++;
          bytes += n;
        }),
      );
    socks.push(
      await open(ids[0]!, 'fps=30&format=jpeg&quality=80', (n) => {
        watchedFrames++;
        bytes += n;
      }),
    );
    await new Promise((r) => setTimeout(r, 2000));
    frames = 0;
    watchedFrames = 0;
    bytes = 0;
    const cpu0 = cpuMs(pid);
    const t0 = performance.now();
    const end = t0 + seconds * 1000;
    // The watched session is being driven (an agent or a person): ~30 moves/s.
    let k = 0;
    while (performance.now() < end) {
      await d.client.act(ids[0]!, { actions: [{ type: 'move', x: 100 + ((k * 29) % 1000), y: 100 + ((k * 17) % 600) }] }).catch(() => {});
      k++;
      await new Promise((r) => setTimeout(r, 33));
    }
    const wall = (performance.now() - t0) / 1000;
    const cpu = cpuMs(pid) - cpu0;
    return {
      streams: ids.length + 1,
      seconds: round(wall, 2),
      thumbnailFramesPerSec: round(frames / wall),
      watchedFramesPerSec: round(watchedFrames / wall),
      megabytesPerSec: round(bytes / wall / 1e6, 2),
      daemonCpuPercent: round((cpu / 1000 / wall) * 100),
      drivenMovesPerSec: round(k / wall),
    };
  } finally {
    for (const s of socks) s.terminate();
  }
}

export async function runStepsBench(o: StepsOptions): Promise<{ record: BenchRecord; file: string }> {
  const started = new Date().toISOString();
  const trials: TrialRecord[] = [];
  const results: ResultRow[] = [];
  const latencyPlot: NonNullable<BenchRecord['plots']['latency']> = [];
  const throughput: { arm: string; trial: number; points: { n: number; stepsPerSec: number }[] }[] = [];
  const failures: string[] = [];
  const maxN = Math.max(...o.sessions);
  for (const screen of o.screens)
    for (let t = 0; t < o.trials; t++) {
      const order = t % 2 === 0 ? o.arms : [...o.arms].reverse();
      for (const arm of order) {
        const t0 = performance.now();
        const startedAt = new Date().toISOString();
        const data: Record<string, unknown> = { screen, busyBefore: hostBusy() };
        const tag = `${arm.name} ${screen} trial ${t}`;
        let valid = true,
          reason: string | undefined;
        o.progress(`${tag}: starting the daemon`);
        const d = await startPrivateDaemon(arm.env ?? {}, { bin: arm.bin });
        const pid = daemonNodePid(d.pid);
        const made: SessionInfo[] = [];
        try {
          o.progress(`${tag}: creating ${maxN} Chromium sessions`);
          const c0 = performance.now();
          for (let i = 0; i < maxN; i += 4) {
            // One retry per session: on a loaded shared host a browser can miss the 60 s readiness deadline.
            // A small disk quota: disk admission promises no more than the state filesystem holds
            // (100 × the default 512 MiB is more than this host's), and the page writes nothing. A
            // checkout older than disk quotas refuses the field (400), so it gets the plain spec.
            const create = () =>
              d.client.createSession({ image: 'default', url: PAGE, screen, diskMb: BENCH_DISK_MB }).catch((e: { status?: number; message?: string }) => {
                if (e.status === 400 && /diskMb/.test(e.message ?? '')) return d.client.createSession({ image: 'default', url: PAGE, screen });
                throw e;
              });
            const batch = await Promise.allSettled(
              Array.from({ length: Math.min(4, maxN - i) }, () =>
                create().catch((e) => {
                  failures.push(`${tag}: create retried: ${String((e as Error).message).slice(0, 160)}`);
                  return create();
                }),
              ),
            );
            for (const b of batch)
              if (b.status === 'fulfilled') made.push(b.value);
              else failures.push(`${tag}: create failed: ${String((b.reason as Error)?.message ?? b.reason).slice(0, 200)}`);
            o.progress(`${tag}: ${made.length}/${maxN} sessions`);
          }
          data.createAllSeconds = round((performance.now() - c0) / 1000);
          data.sessions = made.length;
          if (made.length < maxN) {
            valid = false;
            reason = `only ${made.length} of ${maxN} sessions created`;
          }
          const ids = made.map((s) => s.id);
          // Warm-up: one step per session and format (the ceiling arm stores these frames).
          for (const f of o.formats)
            for (const id of ids)
              await d.client
                .actImage(id, { actions: [{ type: 'move', x: 10, y: 10 }], screenshot: { format: f, ...(f === 'jpeg' ? { quality: 80 } : {}) } })
                .catch(() => {});
          const ladder: Record<string, Record<string, unknown>> = {};
          const pts: { n: number; stepsPerSec: number }[] = [];
          for (const n of o.sessions.filter((x) => x <= ids.length))
            for (const f of o.formats) {
              o.progress(`${tag}: closed loop, ${o.clients} clients, N=${n}, ${f}`);
              const r = await closedLoop(d.client, ids.slice(0, n), o.clients, o.seconds, pid, f);
              const { samples, ...rest } = r;
              (ladder[f] ??= {})[String(n)] = rest;
              if (f === 'png') pts.push({ n, stepsPerSec: r.stepsPerSec });
              if (n === maxN)
                latencyPlot.push({ arm: arm.name, metric: `step closed loop N=${n} ${f} ${screen}`, samples: samples.slice(0, 4000).map((x) => round(x)) });
              // The ceiling arm must have served stored frames (every step's image the same as its session's last).
              if (arm.name === CEILING_ARM && r.steps > 2 * n && r.sameImageAsPrevious < 0.95) {
                valid = false;
                reason = `the ceiling arm's frames changed (${r.sameImageAsPrevious} the same as before): DRUMS_BENCH_STORED_FRAME not honoured`;
              }
            }
          throughput.push({ arm: `${arm.name} ${screen}`, trial: t, points: pts });
          data.closedLoop = ladder;
          o.progress(`${tag}: open loop at ${o.offered} steps/s`);
          const ol = await openLoop(d.client, ids, o.offered, o.seconds);
          const { samples: olSamples, ...olRest } = ol;
          data.openLoop = olRest;
          latencyPlot.push({ arm: arm.name, metric: `step at ${o.offered}/s offered ${screen}`, samples: olSamples.slice(0, 4000).map((x) => round(x)) });
          // CPU by format and streaming measure capture and encode: nothing to see in the ceiling arm.
          if (arm.name !== CEILING_ARM) {
            o.progress(`${tag}: daemon CPU per step by format`);
            data.cpuPerFormat = await cpuPerFormat(d.client, ids, Math.min(4, o.clients), Math.max(3, o.seconds / 2), pid);
            o.progress(`${tag}: streaming`);
            const probe = await fetch(`${d.client.url}/v1/streams`, { headers: { authorization: `Bearer ${d.token}` } });
            data.streaming = probe.ok ? await streaming(d, d.client.url, ids, o.seconds, pid) : { skipped: 'this checkout has no frame stream' };
          }
        } catch (e) {
          valid = false;
          reason = `failed: ${(e as Error).message}`;
          failures.push(`${tag}: ${(e as Error).message}`);
        } finally {
          o.progress(`${tag}: destroying`);
          for (const s of made) await d.client.destroySession(s.id).catch(() => {});
          await d.stop();
        }
        data.busyAfter = hostBusy();
        trials.push({
          arm: arm.name,
          trial: t,
          warmup: false,
          valid,
          ...(reason ? { reason: `${screen}: ${reason}` } : {}),
          startedAt,
          durationMs: Math.round(performance.now() - t0),
          data,
        });
      }
    }

  // Results: medians over valid trials, per screen. Metric names end in `.<format>.<screen>`;
  // at 1280x800 the PNG ones are also given under the names without the suffix (the bars' and
  // earlier records' names).
  const med = (xs: number[]) => (xs.length ? quantile(xs, 0.5) : null);
  const ofArm = (arm: string, screen: string) => trials.filter((t) => t.arm === arm && t.valid && t.data.screen === screen);
  const val = (arm: string, screen: string, f: (d: Record<string, any>) => number | undefined) =>
    med(
      ofArm(arm, screen)
        .map((t) => f(t.data as Record<string, any>))
        .filter((x): x is number => typeof x === 'number'),
    );
  const row = (arm: string, screen: string, metric: string, value: number | null, unit: string, note?: string): ResultRow => ({
    arm,
    metric,
    value: value === null ? null : round(value, 2),
    ci: null,
    unit,
    n: ofArm(arm, screen).length,
    ...(note ? { note } : {}),
  });
  const LEGACY_SCREEN = '1280x800';
  /** A metric at one screen; at 1280x800 also under its bare name (`legacy`: the bars' names). */
  const push = (arm: string, screen: string, metric: string, legacy: string | null, value: number | null, unit: string, note?: string) => {
    results.push(row(arm, screen, `${metric}.${screen}`, value, unit, note));
    if (legacy && screen === LEGACY_SCREEN) results.push(row(arm, screen, legacy, value, unit, note));
  };
  const hasCeiling = o.arms.some((a) => a.name === CEILING_ARM);
  for (const screen of o.screens)
    for (const a of o.arms) {
      const cl = (f: string, n: number) => (d: Record<string, any>) => d.closedLoop?.[f]?.[String(n)];
      for (const f of o.formats) {
        for (const n of o.sessions) {
          const png = f === 'png';
          const note = `${o.clients} closed-loop clients, click + ${f} ${screen}`;
          push(
            a.name,
            screen,
            `steps_per_sec.N${n}.${f}`,
            png ? `steps_per_sec.N${n}` : null,
            val(a.name, screen, (d) => cl(f, n)(d)?.stepsPerSec),
            'steps/s',
            note,
          );
          for (const q of ['p50', 'p95', 'p99'])
            push(
              a.name,
              screen,
              `step_ms.${q}.N${n}.${f}`,
              png && n === maxN && q !== 'p95' ? `step_ms.${q}.N${n}` : null,
              val(a.name, screen, (d) => cl(f, n)(d)?.latency?.[q]),
              'ms',
            );
          push(
            a.name,
            screen,
            `daemon_cpu_ms_per_step.N${n}.${f}`,
            png && n === maxN ? 'daemon_cpu_ms_per_step.closed_loop' : null,
            val(a.name, screen, (d) => cl(f, n)(d)?.daemonCpuMsPerStep),
            'ms',
            'utime+stime of the daemon over the closed loop ÷ steps (actions, HTTP, capture, encode, and its background)',
          );
          if (hasCeiling && a.name !== CEILING_ARM) {
            const mine = val(a.name, screen, (d) => cl(f, n)(d)?.stepsPerSec);
            const top = val(CEILING_ARM, screen, (d) => cl(f, n)(d)?.stepsPerSec);
            push(
              a.name,
              screen,
              `ratio_to_ceiling.steps_per_sec.N${n}.${f}`,
              null,
              mine !== null && top ? mine / top : null,
              '×',
              `${a.name} ÷ ${CEILING_ARM} (the same load with stored frames), same run`,
            );
          }
          const p50 = val(a.name, screen, (d) => cl(f, n)(d)?.latency?.p50);
          const p99 = val(a.name, screen, (d) => cl(f, n)(d)?.latency?.p99);
          push(a.name, screen, `p99_over_p50.N${n}.${f}`, null, p50 && p99 !== null ? p99 / p50 : null, '×');
        }
      }
      push(
        a.name,
        screen,
        `open_loop_step_ms.p50@${o.offered}`,
        `open_loop_step_ms.p50@${o.offered}`,
        val(a.name, screen, (d) => d.openLoop?.latency?.p50),
        'ms',
      );
      push(
        a.name,
        screen,
        `open_loop_step_ms.p99@${o.offered}`,
        `open_loop_step_ms.p99@${o.offered}`,
        val(a.name, screen, (d) => d.openLoop?.latency?.p99),
        'ms',
      );
      if (a.name === CEILING_ARM) continue;
      for (const f of [...FORMATS, 'unchanged'])
        push(
          a.name,
          screen,
          `daemon_cpu_ms_per_step.${f}`,
          `daemon_cpu_ms_per_step.${f}`,
          val(a.name, screen, (d) => d.cpuPerFormat?.[f]?.daemonCpuMsPerStep),
          'ms',
        );
      push(
        a.name,
        screen,
        'daemon_cpu_ms_per_s.idle',
        'daemon_cpu_ms_per_s.idle',
        val(a.name, screen, (d) => d.cpuPerFormat?.idle?.daemonCpuMsPerSec),
        'ms/s',
        `the daemon's own CPU with ${maxN} sessions and no requests`,
      );
      push(
        a.name,
        screen,
        'daemon_cpu_ms_per_step.png.net_of_idle',
        'daemon_cpu_ms_per_step.png.net_of_idle',
        val(a.name, screen, (d) => d.cpuPerFormat?.png?.netOfIdleMsPerStep),
        'ms',
      );
      for (const k of ['thumbnailFramesPerSec', 'watchedFramesPerSec', 'daemonCpuPercent'])
        push(
          a.name,
          screen,
          `streaming.${k}`,
          `streaming.${k}`,
          val(a.name, screen, (d) => d.streaming?.[k]),
          k.endsWith('Percent') ? '% of a core' : 'frames/s',
        );
    }
  const [head, ...rest] = o.arms;
  const base = rest.find((a) => a.name !== CEILING_ARM);
  const get = (arm: string, m: string) => results.find((x) => x.arm === arm && x.metric === m)?.value ?? null;
  if (head && base) {
    for (const screen of o.screens)
      for (const m of [`steps_per_sec.N${maxN}.png`, 'daemon_cpu_ms_per_step.png', `open_loop_step_ms.p99@${o.offered}`]) {
        const h = get(head.name, `${m}.${screen}`);
        const b = get(base.name, `${m}.${screen}`);
        const legacy = m === `steps_per_sec.N${maxN}.png` ? `ratio.steps_per_sec.N${maxN}` : `ratio.${m}`;
        push(head.name, screen, `ratio.${m}`, legacy, h && b ? h / b : null, '×', `${head.name} ÷ ${base.name}, same run`);
      }
  }
  // Judged against the bars frozen in bench/bars/steps.json (issue 13's goals) before measuring.
  const { bars, sha256: barsSha } = loadBars('steps');
  const full = maxN >= 100;
  const verdicts: Verdict[] = bars.bars.map((b) => {
    const value = get(b.arm === 'frames' ? (head?.name ?? b.arm) : b.arm, b.metric);
    const pass = judge(b, value);
    return {
      barId: b.id,
      arm: b.arm,
      metric: b.metric,
      op: b.op,
      bar: b.value,
      unit: b.unit,
      value,
      ci: null,
      pass,
      ...(pass === null ? { note: results.some((x) => x.metric === b.metric) ? 'no value' : `not measured in this run (largest N here: ${maxN})` } : {}),
    };
  });
  const allValid = trials.every((t) => t.valid);
  const g = gitState();
  const busy = trials.map((t) => [
    (t.data.busyBefore as { loadavg1: number }).loadavg1,
    (t.data.busyAfter as { loadavg1: number } | undefined)?.loadavg1 ?? NaN,
  ]);
  const record: BenchRecord = {
    schemaVersion: 1,
    kind: 'drums-bench-record',
    experiment: 'steps',
    description:
      'The step hot path (click + screenshot through POST /actions) of this checkout against another checkout and against its own ceiling (the same load with stored frames: no capture, no encode) in the same run, at each screen size and format, plus daemon CPU per step by format and frame streaming.',
    mode: o.quick ? 'quick' : 'full',
    status:
      !allValid || verdicts.some((v) => v.pass === null)
        ? verdicts.some((v) => v.pass === false)
          ? 'failed'
          : 'inconclusive'
        : verdicts.every((v) => v.pass)
          ? 'passed'
          : 'failed',
    complete: allValid,
    incompleteReasons: trials.filter((t) => !t.valid).map((t) => `${t.arm} trial ${t.trial}: ${t.reason}`),
    command: o.command,
    commit: g.commit,
    dirty: g.dirty,
    started,
    finished: new Date().toISOString(),
    bars: { file: 'bench/bars/steps.json', sha256: barsSha, fixedAt: bars.fixedAt, fixedCommit: bars.fixedCommit },
    host: { ...hostFacts(), loadavg1BeforeAfterPerTrial: busy },
    method: {
      arms: o.arms.map((a) => `${a.name}: ${a.description}`).join('; '),
      sessions: `default image (Chromium), screen ${o.screens.join(' then ')} (every arm at each), diskMb ${BENCH_DISK_MB} where the checkout has disk quotas, a page with a clock ticking once a second; created 4 at a time`,
      closedLoop: `${o.clients} clients, each stepping its share of the sessions round robin for ${o.seconds} s at each N (${o.sessions.join(', ')}); step = POST /actions {click at a new place, screenshot: ${o.formats.join(' or ')} (jpeg at quality 80)} with Accept: the image type (DrumsClient.actImage; the old daemon answers JSON and the client decodes its base64); formats measured one after the other at each N`,
      ceiling: `arm '${CEILING_ARM}' (when present): this checkout's daemon started with DRUMS_BENCH_STORED_FRAME=1, so each session's screenshots are the frame it first captured with those options (warm-up step), kept by the daemon: the same clients, HTTP path, fair share and XTEST actions, no capture and no encode. sameImageAsPrevious in each closed loop proves it (≈1 there, ≈0 for the real arms, whose pointer moves). ratio_to_ceiling = arm ÷ ceiling steps/s, same run, same screen, format and N`,
      openLoop: `${o.offered} steps/s sent on schedule over all sessions for ${o.seconds} s; latency from the scheduled send time (no coordinated omission)`,
      cpu: `utime+stime of the daemon node process (/proc/PID/stat) ÷ steps, per window; ${CPU_WINDOWS} windows per format, formats interleaved window by window, the median window reported (windowsMsPerStep has them all; netOfIdleMsPerStep subtracts the daemon's rate in a ${IDLE_WINDOW_S} s idle window before); formats with a pointer move per step; unchanged = GET /screenshot png of an unchanged screen and cursor`,
      streaming:
        'every session streamed at fps=2 scale=0.25 jpeg q60, one more stream at fps=30 full size jpeg q80 on session 0 while it is driven with ~30 moves/s',
      noise:
        'the host is shared (7 engineers on 2 cores): load averages before/after each trial are in host.loadavg1BeforeAfterPerTrial; arms alternate and the order rotates per trial, so both arms see the same noise',
    },
    config: { sessions: o.sessions, screens: o.screens, formats: o.formats, clients: o.clients, seconds: o.seconds, offered: o.offered, trials: o.trials },
    arms: o.arms.map((a) => ({
      name: a.name,
      description: a.description,
      image: 'default',
      status: trials.some((t) => t.arm === a.name && t.valid) ? 'measured' : 'invalid',
      ...(trials.some((t) => t.arm === a.name && t.valid) ? {} : { reason: trials.find((t) => t.arm === a.name)?.reason ?? 'not run' }),
      isolation: { verdict: 'not-audited', failedProbes: [] },
    })),
    trials,
    results,
    verdicts,
    summary: o.screens
      .flatMap((screen) =>
        o.formats.map((f) => {
          const m = (arm: string, k: string) => get(arm, `${k}.N${maxN}.${f}.${screen}`) ?? '–';
          const arms = o.arms
            .map(
              (a) =>
                `${a.name} ${m(a.name, 'steps_per_sec')} steps/s (p50 ${m(a.name, 'step_ms.p50')}, p95 ${m(a.name, 'step_ms.p95')}, p99 ${m(a.name, 'step_ms.p99')} ms, ${m(a.name, 'daemon_cpu_ms_per_step')} ms CPU/step${a.name !== CEILING_ARM && hasCeiling ? `, ${m(a.name, 'ratio_to_ceiling.steps_per_sec')} of ceiling` : ''})`,
            )
            .join('; ');
          return `${screen} ${f} N=${maxN}: ${arms}.`;
        }),
      )
      .join('\n'),
    surprises: [],
    limitations: [
      ...(full
        ? []
        : [`N=${maxN}, not the issue's N=100: the shared host could not hold 2 × 100 Chromium sessions' worth of runs cleanly in the time available`]),
    ],
    failures,
    plots: { latency: latencyPlot, throughput },
  };
  mkdirSync(o.outDir, { recursive: true });
  const file = join(o.outDir, `steps-${o.quick ? 'quick-' : ''}${started.replace(/[:.]/g, '-')}.json`);
  writeFileSync(file, JSON.stringify(record, null, 2) + '\n');
  return { record, file };
}
