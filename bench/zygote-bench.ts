import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { DrumsClient, SessionInfo } from '../src/client/client.ts';
import { DrumsApiError } from '../src/client/client.ts';
import { type PrivateDaemon, startPrivateDaemon } from '../src/client/private-daemon.ts';
import { hostFacts } from './host-facts.ts';
import { cgroupMemoryBytes, hostLoad, sleep } from './measure.ts';
import { quantile, summaryP90 as stats } from './stats.ts';
import { sessionCgroup } from '../src/host/instance.ts';

/**
 * `drums bench zygote`: what Chromium without its zygote (`--no-zygote`, which a memory fork
 * needs: the zygote's unread SCM_CREDENTIALS hello can't be dumped; the default in sessions
 * without a user namespace) costs against Chromium with it (a daemon with
 * DRUMS_BROWSER_ZYGOTE=1), side by side in one run: two private daemons, one per arm, sessions
 * without a user namespace, creates alternating ABAB..., the order flipped every round:
 * create-to-ready and create-to-paint (the page's colour in a screenshot), memory and
 * processes per held session, and whether a memory fork of a settled session of each arm works.
 */
export interface ZygoteBenchOptions {
  image: string;
  /** Sessions per arm. */
  sessions: number;
  /** Seconds to let held sessions settle before memory is read. */
  settleSeconds: number;
  outDir: string;
  progress?: (msg: string) => void;
}

type Arm = 'zygote' | 'noZygote';
const ARMS: Arm[] = ['zygote', 'noZygote'];
const COLOUR = [0x22, 0x66, 0xcc];
const PAGE = 'data:text/html,<title>zygote</title><body style="background:%232266cc;margin:0"></body>';

const round = (x: number, d = 3) => Math.round(x * 10 ** d) / 10 ** d;

/** True when the screenshot's centre pixel is the page's colour. */
async function painted(c: DrumsClient, id: string): Promise<boolean> {
  const sharp = (await import('sharp')).default;
  const { data, info } = await sharp(await c.screenshot(id, 'png'))
    .removeAlpha()
    .raw()
    .toBuffer({ resolveWithObject: true });
  const o = (Math.floor(info.height * 0.6) * info.width + Math.floor(info.width / 2)) * info.channels;
  return COLOUR.every((v, i) => Math.abs(data[o + i]! - v) < 30);
}

export async function runZygoteBench(o: ZygoteBenchOptions) {
  const progress = o.progress ?? (() => {});
  const started = new Date().toISOString();
  const loadBefore = hostLoad();
  const daemons: Partial<Record<Arm, PrivateDaemon>> = {};
  const spec = { image: o.image, url: PAGE, userns: false };
  const held: Record<Arm, SessionInfo[]> = { zygote: [], noZygote: [] };
  const readyMs: Record<Arm, number[]> = { zygote: [], noZygote: [] };
  const paintMs: Record<Arm, number[]> = { zygote: [], noZygote: [] };
  const memMiB: Record<Arm, number[]> = { zygote: [], noZygote: [] };
  const processes: Record<Arm, number[]> = { zygote: [], noZygote: [] };
  const chromiumProcesses: Record<Arm, number[]> = { zygote: [], noZygote: [] };
  const fork: Record<Arm, unknown> = { zygote: null, noZygote: null };
  const errors: string[] = [];
  try {
    daemons.zygote = await startPrivateDaemon({ DRUMS_USERNS: '0', DRUMS_BROWSER_ZYGOTE: '1' });
    daemons.noZygote = await startPrivateDaemon({ DRUMS_USERNS: '0' });
    const cl = (arm: Arm): DrumsClient => daemons[arm]!.client;
    // Warm-up: one of each, not counted (page cache of the image and of Chromium).
    for (const arm of ARMS) await cl(arm).destroySession((await cl(arm).createSession(spec)).id);
    for (let i = 0; i < o.sessions; i++) {
      for (const arm of i % 2 ? [...ARMS].reverse() : ARMS) {
        progress(`create ${arm} ${i + 1}/${o.sessions}`);
        const t = performance.now();
        const s = await cl(arm).createSession(spec);
        readyMs[arm].push(performance.now() - t);
        held[arm].push(s);
        for (const end = Date.now() + 60_000; ; await sleep(50)) {
          if (await painted(cl(arm), s.id).catch(() => false)) {
            paintMs[arm].push(performance.now() - t);
            break;
          }
          if (Date.now() > end) {
            errors.push(`${arm} ${s.id}: not painted in 60 s`);
            break;
          }
        }
      }
    }
    progress(`holding ${o.sessions} sessions of each arm for ${o.settleSeconds} s`);
    await sleep(o.settleSeconds * 1000);
    for (const arm of ARMS)
      for (const s of held[arm]) {
        const m = cgroupMemoryBytes(sessionCgroup(daemons[arm]!.instance, s.id));
        if (m !== null) memMiB[arm].push(m / 2 ** 20);
        const p = await cl(arm).exec(s.id, { shell: 'ls -d /proc/[0-9]* | wc -l; pgrep -c chromium || true' });
        const [all, chrom] = p.stdout.trim().split('\n').map(Number);
        processes[arm].push(all!);
        chromiumProcesses[arm].push(chrom!);
      }
    // A memory fork of one settled session of each arm (count 1).
    for (const arm of ARMS) {
      progress(`memory fork of a ${arm} session`);
      const src = held[arm][0]!;
      try {
        const r = await cl(arm).forkSession(src.id, { count: 1, mode: 'memory' });
        fork[arm] = { ok: true, timings: r.timings };
        for (const x of r.copies) await cl(arm).destroySession(x.id);
      } catch (e) {
        fork[arm] =
          e instanceof DrumsApiError ? { ok: false, status: e.status, code: e.code, message: e.message.slice(0, 400) } : { ok: false, message: String(e) };
      }
    }
  } finally {
    for (const arm of ARMS) {
      const d = daemons[arm];
      if (!d) continue;
      for (const s of held[arm]) await d.client.destroySession(s.id).catch((e: Error) => errors.push(`${s.id}: ${e.message}`));
      await d.stop();
    }
  }
  const med = (arm: Arm, xs: Record<Arm, number[]>) => (xs[arm].length ? quantile(xs[arm], 0.5) : NaN);
  const ratio = (xs: Record<Arm, number[]>) => round(med('noZygote', xs) / med('zygote', xs));
  const record = {
    schemaVersion: 1,
    kind: 'zygote',
    started,
    finished: new Date().toISOString(),
    command: `bin/drums bench zygote --image ${o.image} --sessions ${o.sessions} --settle-seconds ${o.settleSeconds}`,
    image: o.image,
    url: PAGE,
    sessionsPerArm: o.sessions,
    host: hostFacts(),
    noise: {
      loadavgBefore: loadBefore,
      loadavgAfter: hostLoad(),
      note: 'a 2-core machine shared with other engineers running tests and benches; arms alternate, so the ratios share the noise',
    },
    arms: Object.fromEntries(
      ARMS.map((arm) => [
        arm,
        {
          daemonEnv: arm === 'zygote' ? { DRUMS_BROWSER_ZYGOTE: '1' } : {},
          createToReadyMs: stats(readyMs[arm]),
          createToPaintMs: stats(paintMs[arm]),
          memoryMiBPerSession: stats(memMiB[arm]),
          processesPerSession: stats(processes[arm]),
          chromiumProcessesPerSession: stats(chromiumProcesses[arm]),
          memoryFork: fork[arm],
        },
      ]),
    ),
    ratios: {
      createToReadyP50: ratio(readyMs),
      createToPaintP50: ratio(paintMs),
      memoryP50: ratio(memMiB),
      note: 'noZygote arm / zygote arm, medians measured side by side in this run',
    },
    errors,
  };
  mkdirSync(o.outDir, { recursive: true });
  const file = join(o.outDir, `zygote-${started.replace(/[:.]/g, '-')}.json`);
  writeFileSync(file, JSON.stringify(record, null, 2) + '\n');
  return { record, file };
}
