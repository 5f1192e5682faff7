import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { DrumsClient, SessionInfo } from '../src/client/client.ts';
import { hostFacts, hostUsedMiB } from './host-facts.ts';
import { bootstrap, linearFit, summary } from './stats.ts';

/**
 * `drums bench sessions`: lifecycle latencies and memory per added session,
 * against the bars of the session-core issue. Latencies are medians and p95
 * over sequential runs; memory is the least-squares slope of host
 * (MemTotal − MemAvailable) over N, with a bootstrap interval over points.
 */
export const SESSION_BARS = {
  desktopReadyP50Ms: 300,
  browserReadyP50Ms: 1000,
  resetP50Ms: 500,
  memPerSessionBrowserMiB: 130,
};

export interface SessionsBenchOptions {
  client: DrumsClient;
  image: string;
  runs: number;
  memoryNs: number[];
  settleMs: number;
  outDir: string;
  quick: boolean;
  progress: (msg: string) => void;
}

const PAGE = 'data:text/html,<title>bench</title><body style="background:%23336699;margin:0"><h1>Drums bench</h1><form><input name=q></form></body>';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function lifecycle(o: SessionsBenchOptions, browser: boolean) {
  const create: number[] = [],
    serverReady: number[] = [],
    reset: number[] = [],
    destroy: number[] = [];
  for (let i = 0; i < o.runs; i++) {
    o.progress(`lifecycle ${browser ? 'browser' : 'desktop'} ${i + 1}/${o.runs}`);
    let t = performance.now();
    const s = await o.client.createSession({ image: o.image, ...(browser ? { url: PAGE } : {}) });
    create.push(performance.now() - t);
    serverReady.push(browser ? s.timings.browserReadyMs! : s.timings.desktopReadyMs!);
    t = performance.now();
    await o.client.resetSession(s.id);
    reset.push(performance.now() - t);
    t = performance.now();
    await o.client.destroySession(s.id);
    destroy.push(performance.now() - t);
  }
  return { create: summary(create), readyAfterContainerStart: summary(serverReady), reset: summary(reset), destroy: summary(destroy) };
}

async function memory(o: SessionsBenchOptions, browser: boolean) {
  const sessions: SessionInfo[] = [];
  const points: { n: number; usedMiB: number }[] = [];
  const sample = async () => {
    await sleep(o.settleMs);
    const xs: number[] = [];
    for (let i = 0; i < 3; i++) {
      xs.push(hostUsedMiB());
      await sleep(500);
    }
    return xs.reduce((a, b) => a + b, 0) / xs.length;
  };
  try {
    points.push({ n: 0, usedMiB: await sample() });
    for (const n of o.memoryNs) {
      while (sessions.length < n) {
        o.progress(`memory ${browser ? 'browser' : 'desktop'}: session ${sessions.length + 1}/${Math.max(...o.memoryNs)}`);
        sessions.push(await o.client.createSession({ image: o.image, ...(browser ? { url: PAGE } : {}) }));
      }
      points.push({ n, usedMiB: await sample() });
    }
  } finally {
    for (const s of sessions) await o.client.destroySession(s.id).catch(() => {});
  }
  const fitPts = points.filter((p) => p.n > 0);
  const xs = fitPts.map((p) => p.n),
    ys = fitPts.map((p) => p.usedMiB);
  const fit = linearFit(xs, ys);
  const ci = bootstrap(
    xs.length,
    (idx) =>
      linearFit(
        idx.map((i) => xs[i]!),
        idx.map((i) => ys[i]!),
      ).slope,
  );
  return { points, slopeMiB: fit.slope, interceptMiB: fit.intercept, r2: fit.r2, slopeCi95: ci, fixedCostMiB: fit.intercept - points[0]!.usedMiB };
}

export async function runSessionsBench(o: SessionsBenchOptions) {
  const started = new Date().toISOString();
  const desktop = await lifecycle(o, false);
  const browser = await lifecycle(o, true);
  const memDesktop = await memory(o, false);
  const memBrowser = await memory(o, true);
  const verdict = (value: number, bar: number) => ({ value: Math.round(value * 10) / 10, bar, pass: value <= bar });
  const record = {
    schemaVersion: 1,
    experiment: 'sessions',
    mode: o.quick ? 'quick' : 'full',
    started,
    finished: new Date().toISOString(),
    host: hostFacts(),
    config: { image: o.image, runs: o.runs, memoryNs: o.memoryNs, settleMs: o.settleMs, page: PAGE },
    results: { desktop, browser, memory: { desktop: memDesktop, browser: memBrowser } },
    bars: {
      desktopReadyP50Ms: verdict(desktop.create.p50, SESSION_BARS.desktopReadyP50Ms),
      browserReadyP50Ms: verdict(browser.create.p50, SESSION_BARS.browserReadyP50Ms),
      resetP50Ms: verdict(desktop.reset.p50, SESSION_BARS.resetP50Ms),
      memPerSessionBrowserMiB: verdict(memBrowser.slopeMiB, SESSION_BARS.memPerSessionBrowserMiB),
    },
    notes: [
      'create latencies are client wall time of POST /v1/sessions (create → ready), sequential, one session at a time',
      'reset is client wall time of POST /v1/sessions/:id/reset on a session of the same kind',
      'memory slope excludes N=0; fixedCostMiB is the intercept minus the N=0 reading',
    ],
  };
  mkdirSync(o.outDir, { recursive: true });
  const file = join(o.outDir, `sessions-${o.quick ? 'quick-' : ''}${started.replace(/[:.]/g, '-')}.json`);
  writeFileSync(file, JSON.stringify(record, null, 2) + '\n');
  return { record, file };
}
