import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { DrumsClient, SessionInfo } from '../src/client/client.ts';
import { hostFacts, hostUsedMiB } from './host-facts.ts';

/**
 * `drums bench density`: how many Chromium sessions this host holds at once.
 * Creates N sessions (a few at a time), each on a page of its own colour, then
 * proves every one is alive and shows its own page (the centre pixel of a raw
 * screenshot), records host memory, and destroys them all.
 */
export const DENSITY_BAR = 50;

export interface DensityOptions {
  client: DrumsClient;
  image: string;
  sessions: number;
  concurrency: number;
  outDir: string;
  progress: (msg: string) => void;
}

function colour(i: number): [number, number, number] {
  // Distinct, saturated colours: walk the hue circle.
  const h = (i * 137.508) % 360;
  const f = (n: number) => {
    const k = (n + h / 60) % 6;
    return Math.round(255 * (1 - 0.8 * Math.max(0, Math.min(k, 4 - k, 1))));
  };
  return [f(5), f(3), f(1)];
}
const hex = (c: [number, number, number]) => c.map((v) => v.toString(16).padStart(2, '0')).join('');

export async function runDensityBench(o: DensityOptions) {
  const started = new Date().toISOString();
  const usedBefore = hostUsedMiB();
  const sessions: (SessionInfo | undefined)[] = new Array(o.sessions);
  const createErrors: string[] = [];
  const t0 = performance.now();
  let next = 0;
  const worker = async () => {
    while (next < o.sessions) {
      const i = next++;
      const c = colour(i);
      try {
        sessions[i] = await o.client.createSession({ image: o.image, url: `data:text/html,<body style="background:%23${hex(c)};margin:0"></body>` });
        o.progress(`created ${sessions.filter(Boolean).length}/${o.sessions}`);
      } catch (e) {
        createErrors.push(`session ${i}: ${(e as Error).message}`);
      }
    }
  };
  try {
    await Promise.all(Array.from({ length: o.concurrency }, worker));
    const createAllMs = performance.now() - t0;
    // Every session must be alive and show its own page. Paint follows the window map, so allow a bounded wait.
    const verified: boolean[] = new Array(o.sessions).fill(false);
    const deadline = performance.now() + 60_000;
    while (performance.now() < deadline && verified.some((v, i) => !v && sessions[i])) {
      for (let i = 0; i < o.sessions; i++) {
        const s = sessions[i];
        if (!s || verified[i]) continue;
        try {
          const shot = await o.client.screenshotEx(s.id, { format: 'raw', cursor: false });
          const off = ((shot.height >> 1) * shot.width + (shot.width >> 1)) * 3;
          const want = colour(i);
          verified[i] = [0, 1, 2].every((k) => Math.abs(shot.data[off + k]! - want[k]!) <= 6);
        } catch {}
      }
      o.progress(`verified ${verified.filter(Boolean).length}/${o.sessions}`);
    }
    const usedAtN = hostUsedMiB();
    const states = await o.client.listSessions();
    const held = verified.filter(Boolean).length;
    const record = {
      schemaVersion: 1,
      experiment: 'density',
      started,
      finished: new Date().toISOString(),
      host: hostFacts(),
      config: { image: o.image, sessions: o.sessions, concurrency: o.concurrency },
      results: {
        created: sessions.filter(Boolean).length,
        verifiedShowingOwnPage: held,
        readyStates: states.filter((s) => s.state === 'ready').length,
        createAllMs: Math.round(createAllMs),
        hostUsedMiB: { before: Math.round(usedBefore), atN: Math.round(usedAtN), perSession: Math.round((usedAtN - usedBefore) / Math.max(1, held)) },
        createErrors,
      },
      bars: { concurrentBrowserSessions: { value: held, bar: DENSITY_BAR, pass: held >= DENSITY_BAR, direction: '>=' } },
      notes: ['perSession here is (used at N − used before) / N, all at once; the memory slope comes from `drums bench sessions`'],
    };
    mkdirSync(o.outDir, { recursive: true });
    const file = join(o.outDir, `density-${started.replace(/[:.]/g, '-')}.json`);
    writeFileSync(file, JSON.stringify(record, null, 2) + '\n');
    return { record, file };
  } finally {
    for (const s of sessions) if (s) await o.client.destroySession(s.id).catch(() => {});
  }
}
