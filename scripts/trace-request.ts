/**
 * Which server files one `POST /v1/sessions/{id}/actions` runs code in: the count that
 * docs/architecture.md states, measured instead of read.
 *
 * A daemon started with the V8 inspector on a loopback port, a session (minimal image) whose X
 * connection is warmed by two batches; then, per round: V8's precise coverage counters are reset,
 * one batch is sent (a click and a PNG screenshot), and the counters are taken. A file counts
 * when a function in it ran for the request: before each round the counters also run over a span
 * with no request (twice the request's time, at least 300 ms), and a function that ran there is a
 * daemon timer's (episode frames' 30 Hz tick, liveness, metrics sampling), not the request's. Only
 * files seen in every round are kept, so a slower timer that fired during one request does not
 * count either.
 *
 *   .runtime/node/bin/node scripts/trace-request.ts [--rounds N]   (as root; prints JSON)
 *
 * tests/integration/api-trace.test.ts checks the list in docs/architecture.md against it.
 */
import { createServer } from 'node:net';
import type { DrumsClient } from '../src/client/client.ts';
import { startPrivateDaemon } from '../src/client/private-daemon.ts';

interface Coverage {
  result: { url: string; functions: { functionName: string; ranges: { startOffset: number; count: number }[] }[] }[];
}

/** The functions of src/ files that ran, as `file@offset`. */
function ran(cov: Coverage, root: string): string[] {
  return cov.result
    .filter((f) => f.url.startsWith(`${root}src/`))
    .flatMap((f) => f.functions.filter((fn) => (fn.ranges[0]?.count ?? 0) > 0).map((fn) => `${f.url.slice(root.length)}@${fn.ranges[0]!.startOffset}`));
}

/** A free loopback port for the daemon's inspector (`--inspect=127.0.0.1:PORT` in NODE_OPTIONS). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const port = (srv.address() as { port: number }).port;
      srv.close(() => resolve(port));
    });
  });
}

/** The server files (paths from the repository root) one action batch runs code in, sorted. */
export async function traceActions(client: DrumsClient, sessionId: string, inspectorPort: number, rounds = 3): Promise<string[]> {
  const root = new URL('..', import.meta.url).href;
  const targets = (await (await fetch(`http://127.0.0.1:${inspectorPort}/json/list`)).json()) as { webSocketDebuggerUrl: string }[];
  const ws = new WebSocket(targets[0]!.webSocketDebuggerUrl);
  await new Promise((resolve, reject) => {
    ws.onopen = resolve;
    ws.onerror = reject;
  });
  try {
    let nextId = 1;
    const waiting = new Map<number, { resolve: (r: unknown) => void; reject: (e: Error) => void }>();
    ws.onmessage = (ev) => {
      const msg = JSON.parse(String(ev.data)) as { id?: number; result?: unknown; error?: unknown };
      const w = msg.id === undefined ? undefined : waiting.get(msg.id);
      if (!w) return;
      waiting.delete(msg.id!);
      if (msg.error) w.reject(new Error(`inspector: ${JSON.stringify(msg.error)}`));
      else w.resolve(msg.result);
    };
    const cdp = <T>(method: string, params: object = {}) =>
      new Promise<T>((resolve, reject) => {
        const id = nextId++;
        waiting.set(id, { resolve: resolve as (r: unknown) => void, reject });
        ws.send(JSON.stringify({ id, method, params }));
      });

    const batch = { actions: [{ type: 'click', x: 10, y: 10 }], screenshot: { format: 'png' as const } };
    // Warm up: the first batch opens the X connection and runs the lazy first-use paths.
    for (let i = 0; i < 2; i++) await client.act(sessionId, batch);
    await cdp('Profiler.enable');
    await cdp('Profiler.startPreciseCoverage', { callCount: true, detailed: false });
    let kept: Set<string> | undefined;
    /** Functions that ran with no request in flight: the daemon's timers. */
    const background = new Set<string>();
    let requestMs = 150;
    for (let r = 0; r < rounds; r++) {
      await cdp<Coverage>('Profiler.takePreciseCoverage'); // resets the counters
      await new Promise((res) => setTimeout(res, Math.max(300, 2 * requestMs)));
      for (const fn of ran(await cdp<Coverage>('Profiler.takePreciseCoverage'), root)) background.add(fn);
      const t0 = performance.now();
      await client.act(sessionId, batch);
      requestMs = performance.now() - t0;
      const cov = await cdp<Coverage>('Profiler.takePreciseCoverage');
      const files = new Set(
        ran(cov, root)
          .filter((fn) => !background.has(fn))
          .map((fn) => fn.slice(0, fn.lastIndexOf('@'))),
      );
      kept = kept ? new Set([...kept].filter((f) => files.has(f))) : files;
    }
    await cdp('Profiler.stopPreciseCoverage');
    return [...(kept ?? [])].sort();
  } finally {
    ws.close();
  }
}

if (import.meta.main) {
  const i = process.argv.indexOf('--rounds');
  const rounds = i > 0 ? Number(process.argv[i + 1]) : 3;
  const port = await freePort();
  const d = await startPrivateDaemon({ NODE_OPTIONS: `--inspect=127.0.0.1:${port}` });
  let id: string | undefined;
  try {
    id = (await d.client.createSession({ image: 'minimal' })).id;
    const files = await traceActions(d.client, id, port, rounds);
    process.stdout.write(`${JSON.stringify({ request: 'POST /v1/sessions/{id}/actions (click + PNG)', rounds, count: files.length, files }, null, 2)}\n`);
  } finally {
    if (id) await d.client.destroySession(id).catch(() => {});
    await d.stop();
  }
}
