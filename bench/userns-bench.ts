import { mkdirSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { DrumsClient, SessionInfo } from '../src/client/client.ts';
import { startPrivateDaemon } from '../src/client/private-daemon.ts';
import { hostFacts } from './host-facts.ts';
import { cgroupMemoryBytes, hostLoad, sleep } from './measure.ts';
import { quantile, summaryP90 as stats } from './stats.ts';
import { sessionCgroup } from '../src/host/instance.ts';

/**
 * `drums bench userns`: what a user namespace per session costs against
 * today's design (host uids), side by side on one private daemon: the two arms'
 * creates and resets alternate (ABAB..., the order flipped every round), and the
 * sessions of both arms are held at once when their memory and disk are read.
 */
export interface UsernsBenchOptions {
  image: string;
  url?: string;
  /** Sessions per arm (created, held, reset, destroyed). */
  sessions: number;
  /** Seconds to let held sessions settle before memory is read. */
  settleSeconds: number;
  outDir: string;
  progress?: (msg: string) => void;
}

type Arm = 'hostUids' | 'userns';
const ARMS: Arm[] = ['hostUids', 'userns'];

const round = (x: number, d = 1) => Math.round(x * 10 ** d) / 10 ** d;

export async function runUsernsBench(o: UsernsBenchOptions) {
  const progress = o.progress ?? (() => {});
  const started = new Date().toISOString();
  const loadBefore = hostLoad();
  const d = await startPrivateDaemon();
  const c: DrumsClient = d.client;
  const held: Record<Arm, SessionInfo[]> = { hostUids: [], userns: [] };
  const createMs: Record<Arm, number[]> = { hostUids: [], userns: [] };
  const serverCreateMs: Record<Arm, number[]> = { hostUids: [], userns: [] };
  const usernsStepMs: number[] = [];
  const resetMs: Record<Arm, number[]> = { hostUids: [], userns: [] };
  const memMiB: Record<Arm, number[]> = { hostUids: [], userns: [] };
  const diskKiB: Record<Arm, number[]> = { hostUids: [], userns: [] };
  const processes: Record<Arm, number[]> = { hostUids: [], userns: [] };
  // The daemon's AT-SPI connection: the first read of a session's tree opens it (in a userns session through
  // drums-userns connect, as the session's desktop uid), the second reuses it.
  const a11yFirstMs: Record<Arm, number[]> = { hostUids: [], userns: [] };
  const a11yMs: Record<Arm, number[]> = { hostUids: [], userns: [] };
  const errors: string[] = [];
  try {
    const spec = (arm: Arm) => ({ image: o.image, ...(o.url ? { url: o.url } : {}), userns: arm === 'userns' });
    // Warm-up: one of each, not counted (page cache of the image, the helper binary).
    for (const arm of ARMS) await c.destroySession((await c.createSession(spec(arm))).id);
    for (let i = 0; i < o.sessions; i++) {
      for (const arm of i % 2 ? [...ARMS].reverse() : ARMS) {
        progress(`create ${arm} ${i + 1}/${o.sessions}`);
        const t = performance.now();
        const s = await c.createSession(spec(arm));
        createMs[arm].push(performance.now() - t);
        held[arm].push(s);
        if (s.timings.createMs !== undefined) serverCreateMs[arm].push(s.timings.createMs);
        if (arm === 'userns' && s.timings['step.usernsMs'] !== undefined) usernsStepMs.push(s.timings['step.usernsMs']);
      }
    }
    progress(`holding ${o.sessions} sessions of each arm for ${o.settleSeconds} s`);
    await sleep(o.settleSeconds * 1000);
    for (const arm of ARMS) {
      for (const s of held[arm]) {
        const m = cgroupMemoryBytes(sessionCgroup(d.instance, s.id));
        if (m !== null) memMiB[arm].push(m / 2 ** 20);
        // Host disk the session holds: its disk image's allocated blocks (the lower is the shared image either way).
        diskKiB[arm].push((statSync(join(d.stateDir, 'sessions', s.id, 'disk.img')).blocks * 512) / 1024);
        const procs = await c.exec(s.id, { shell: 'ls -d /proc/[0-9]* | wc -l' });
        processes[arm].push(Number(procs.stdout.trim()));
      }
    }
    for (let i = 0; i < o.sessions; i++) {
      for (const arm of i % 2 ? [...ARMS].reverse() : ARMS) {
        const id = held[arm][i]!.id;
        let t = performance.now();
        await c.a11y(id, { format: 'json', maxDepth: 3 });
        a11yFirstMs[arm].push(performance.now() - t);
        t = performance.now();
        await c.a11y(id, { format: 'json', maxDepth: 3 });
        a11yMs[arm].push(performance.now() - t);
      }
    }
    for (let i = 0; i < o.sessions; i++) {
      for (const arm of i % 2 ? [...ARMS].reverse() : ARMS) {
        progress(`reset ${arm} ${i + 1}/${o.sessions}`);
        const t = performance.now();
        await c.resetSession(held[arm][i]!.id);
        resetMs[arm].push(performance.now() - t);
      }
    }
  } finally {
    for (const arm of ARMS) for (const s of held[arm]) await c.destroySession(s.id).catch((e: Error) => errors.push(`${s.id}: ${e.message}`));
    await d.stop();
  }
  const med = (arm: Arm, xs: Record<Arm, number[]>) => (xs[arm].length ? quantile(xs[arm], 0.5) : NaN);
  const ratio = (xs: Record<Arm, number[]>) => round(med('userns', xs) / med('hostUids', xs), 3);
  const arms = Object.fromEntries(
    ARMS.map((arm) => [
      arm,
      {
        createMs: stats(createMs[arm]),
        serverCreateMs: stats(serverCreateMs[arm]),
        resetMs: stats(resetMs[arm]),
        memoryMiBPerSession: stats(memMiB[arm]),
        diskKiBPerSession: stats(diskKiB[arm]),
        processesPerSession: stats(processes[arm]),
        a11yFirstMs: stats(a11yFirstMs[arm]),
        a11yMs: stats(a11yMs[arm]),
      },
    ]),
  );
  const record = {
    schemaVersion: 1,
    kind: 'userns',
    started,
    image: o.image,
    url: o.url ?? null,
    sessionsPerArm: o.sessions,
    host: hostFacts(),
    noise: {
      loadavgBefore: loadBefore,
      loadavgAfter: hostLoad(),
      note: 'a 2-core machine shared with other engineers running tests and benches; arms alternate, so the ratios share the noise',
    },
    arms,
    usernsStepMs: stats(usernsStepMs),
    ratios: {
      createP50: ratio(createMs),
      serverCreateP50: ratio(serverCreateMs),
      resetP50: ratio(resetMs),
      memoryP50: ratio(memMiB),
      diskP50: ratio(diskKiB),
      a11yFirstP50: ratio(a11yFirstMs),
      a11yP50: ratio(a11yMs),
      note: 'userns arm / hostUids arm, medians measured side by side in this run',
    },
    errors,
  };
  mkdirSync(o.outDir, { recursive: true });
  const file = join(o.outDir, `userns-${started.replace(/[:.]/g, '-')}.json`);
  writeFileSync(file, JSON.stringify(record, null, 2) + '\n');
  return { record, file };
}
