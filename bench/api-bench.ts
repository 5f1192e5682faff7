import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { DrumsClient } from '../src/client/client.ts';
import { hostFacts } from './host-facts.ts';
import { startPrivateDaemon } from '../src/client/private-daemon.ts';
import { summary } from './stats.ts';

/**
 * API benchmark:
 * 1. overhead: GET /v1/sessions/:id over HTTP (keep-alive, loopback) against the same
 *    lookup as a direct in-process call (manager.get + the JSON view), both on one
 *    in-process daemon; overhead p50 = HTTP p50 − direct p50 (bar: ≤ 1 ms).
 * 2. throughput: `clients` concurrent clients each driving its own session with
 *    POST /v1/sessions/:id/actions (one pointer move per request) for `seconds`, against a
 *    private daemon process; aggregate actions/s and per-request latency.
 */
export interface ApiBenchOptions {
  quick: boolean;
  outDir: string;
  image: string;
  clients: number;
  seconds: number;
  progress?: (msg: string) => void;
  startInProcess: StartInProcess;
}

/**
 * A daemon in the bench's own process, started by the caller (the CLI, which may import the daemon;
 * bench/ may not): its URL and token, and the in-process lookup the HTTP time is compared with.
 */
export interface InProcessDaemon {
  url: string;
  token: string;
  /** What GET /v1/sessions/:id computes: the manager lookup and the JSON view. */
  view(id: string): unknown;
  stop(): Promise<void>;
}
export type StartInProcess = (env: NodeJS.ProcessEnv) => Promise<InProcessDaemon>;

async function overhead(o: ApiBenchOptions) {
  // An in-process daemon with its own state dir and instance, so both paths hit one manager.
  const instance = 'b' + randomBytes(2).toString('hex');
  const stateDir = mkdtempSync(`/var/tmp/drums-bench-${instance}-`);
  const env = { ...process.env, DRUMS_STATE_DIR: stateDir, DRUMS_INSTANCE: instance, DRUMS_TOKEN: randomBytes(16).toString('hex'), DRUMS_PORT: '0' };
  const d = await o.startInProcess(env);
  try {
    const { DrumsClient } = await import('../src/client/client.ts');
    const client = new DrumsClient(d.url, d.token);
    const s = await client.createSession({ image: o.image, screen: '640x480' });
    const n = o.quick ? 500 : 3000;
    const direct: number[] = [];
    for (let i = 0; i < n; i++) {
      const t = performance.now();
      JSON.stringify(d.view(s.id));
      direct.push(performance.now() - t);
    }
    const http: number[] = [];
    for (let i = 0; i < 100; i++) await client.getSession(s.id); // warm the connection and JIT
    for (let i = 0; i < n; i++) {
      const t = performance.now();
      await client.getSession(s.id);
      http.push(performance.now() - t);
    }
    await client.destroySession(s.id);
    const h = summary(http),
      dd = summary(direct);
    return {
      call: 'GET /v1/sessions/:id vs manager.get + view',
      n,
      httpMs: h,
      directMs: dd,
      overheadP50Ms: h.p50 - dd.p50,
      note: 'client and daemon share one process (the client side is included in the HTTP time)',
    };
  } finally {
    await d.stop();
    rmSync(stateDir, { recursive: true, force: true });
  }
}

async function throughput(o: ApiBenchOptions, client: DrumsClient) {
  const sessions: string[] = [];
  try {
    o.progress?.(`creating ${o.clients} sessions (${o.image})`);
    const made = await Promise.allSettled(Array.from({ length: o.clients }, () => client.createSession({ image: o.image, screen: '640x480' })));
    for (const m of made) if (m.status === 'fulfilled') sessions.push(m.value.id);
    const failed = made.find((m) => m.status === 'rejected');
    if (failed) throw (failed as PromiseRejectedResult).reason;
    const route = 'POST /v1/sessions/:id/actions (1 move)';
    o.progress?.(`driving ${o.clients} sessions with ${o.clients} clients for ${o.seconds} s via ${route}`);
    const lat: number[] = [];
    let errors = 0;
    const end = performance.now() + o.seconds * 1000;
    const t0 = performance.now();
    await Promise.all(
      sessions.map(async (id, k) => {
        let i = 0;
        while (performance.now() < end) {
          const t = performance.now();
          try {
            await client
              .request('POST', `/v1/sessions/${id}/actions`, { actions: [{ type: 'move', x: 10 + ((i * 7 + k) % 600), y: 10 + ((i * 13) % 460) }] })
              .then((r) => r.arrayBuffer());
            lat.push(performance.now() - t);
          } catch {
            errors++;
          }
          i++;
        }
      }),
    );
    const elapsed = (performance.now() - t0) / 1000;
    return {
      route,
      clients: o.clients,
      sessions: sessions.length,
      seconds: elapsed,
      requests: lat.length,
      errors,
      actionsPerSec: lat.length / elapsed,
      latencyMs: summary(lat),
    };
  } finally {
    for (const id of sessions) await client.destroySession(id).catch(() => {});
  }
}

export async function runApiBench(o: ApiBenchOptions) {
  const started = new Date().toISOString();
  o.progress?.('overhead: HTTP vs in-process');
  const ov = await overhead(o);
  const daemon = await startPrivateDaemon();
  let tp: Awaited<ReturnType<typeof throughput>>;
  try {
    tp = await throughput(o, daemon.client);
  } finally {
    await daemon.stop();
  }
  const record = {
    schemaVersion: 1,
    kind: 'api',
    started,
    quick: o.quick,
    image: o.image,
    host: hostFacts(),
    overhead: ov,
    throughput: tp,
    bars: {
      apiOverheadP50Ms: { value: Math.round(ov.overheadP50Ms * 1000) / 1000, bar: '<= 1', pass: ov.overheadP50Ms <= 1 },
      actionsPerSec16: { value: Math.round(tp.actionsPerSec), bar: 'recorded', pass: tp.errors === 0 },
    },
  };
  mkdirSync(o.outDir, { recursive: true });
  const file = join(o.outDir, `api-${o.quick ? 'quick-' : ''}${started.replace(/[:.]/g, '-')}.json`);
  writeFileSync(file, JSON.stringify(record, null, 2) + '\n');
  return { record, file };
}
