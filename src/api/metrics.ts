import type { Server } from 'node:http';

/**
 * The daemon watching itself serve: a tiny Prometheus registry (text exposition
 * format 0.0.4: counters and histograms with labels; one process-wide registry,
 * `metrics`, that the HTTP middleware feeds and GET /metrics renders), the event
 * loop's lag, and one garbage collection when the API goes idle.
 */
const BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

type Labels = Record<string, string>;
const key = (l: Labels) =>
  Object.keys(l)
    .sort()
    .map((k) => `${k}="${String(l[k]).replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n')}"`)
    .join(',');

class Counter {
  readonly values = new Map<string, number>();
  readonly name: string;
  readonly help: string;
  constructor(name: string, help: string) {
    this.name = name;
    this.help = help;
  }
  inc(labels: Labels = {}, by = 1): void {
    const k = key(labels);
    this.values.set(k, (this.values.get(k) ?? 0) + by);
  }
  render(): string {
    const lines = [`# HELP ${this.name} ${this.help}`, `# TYPE ${this.name} counter`];
    if (!this.values.size) lines.push(`${this.name} 0`);
    for (const [k, v] of this.values) lines.push(`${this.name}${k ? `{${k}}` : ''} ${v}`);
    return lines.join('\n');
  }
}

class Histogram {
  readonly series = new Map<string, { counts: number[]; sum: number; count: number }>();
  readonly name: string;
  readonly help: string;
  readonly buckets: number[];
  constructor(name: string, help: string, buckets = BUCKETS) {
    this.name = name;
    this.help = help;
    this.buckets = buckets;
  }
  observe(labels: Labels, seconds: number): void {
    const k = key(labels);
    let s = this.series.get(k);
    if (!s) this.series.set(k, (s = { counts: this.buckets.map(() => 0), sum: 0, count: 0 }));
    this.buckets.forEach((b, i) => {
      if (seconds <= b) s!.counts[i]!++;
    });
    s.sum += seconds;
    s.count++;
  }
  render(): string {
    const lines = [`# HELP ${this.name} ${this.help}`, `# TYPE ${this.name} histogram`];
    for (const [k, s] of this.series) {
      const pre = k ? `${k},` : '';
      this.buckets.forEach((b, i) => lines.push(`${this.name}_bucket{${pre}le="${b}"} ${s.counts[i]}`));
      lines.push(`${this.name}_bucket{${pre}le="+Inf"} ${s.count}`);
      lines.push(`${this.name}_sum${k ? `{${k}}` : ''} ${s.sum}`);
      lines.push(`${this.name}_count${k ? `{${k}}` : ''} ${s.count}`);
    }
    return lines.join('\n');
  }
}

export class MetricsRegistry {
  readonly creates = new Counter('drums_session_creates_total', 'Sessions created (successful POST /v1/sessions).');
  readonly resets = new Counter('drums_session_resets_total', 'Successful session resets.');
  readonly destroys = new Counter('drums_session_destroys_total', 'Sessions destroyed, by reason.');
  readonly requests = new Counter('drums_http_requests_total', 'HTTP requests by route and status.');
  readonly errors = new Counter('drums_http_errors_total', 'HTTP error responses by error code.');
  readonly ops = new Histogram('drums_op_duration_seconds', 'Latency of create, claim, reset, screenshot, action and exec requests (successful ones).');
  readonly poolClaims = new Counter(
    'drums_pool_claims_total',
    'Claims from warm pools, by pool and result (hit: a ready session; miss: a fresh create; empty: 429 pool_empty).',
  );
  readonly loopLag = new Histogram(
    'drums_daemon_event_loop_lag_seconds',
    "How late the daemon's event loop ran a 20 ms timer (every tick): a stall here delays every session's requests at once.",
    [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
  );
  readonly poolRefill = new Histogram(
    'drums_pool_refill_seconds',
    'Time a pool refill took to make one ready session (queueing under the create admission included).',
  );

  /** Renders every metric plus gauges computed at scrape time. */
  render(gauges: { name: string; help: string; type?: 'gauge' | 'counter'; values: [Labels, number][] }[] = []): string {
    const parts = gauges.map((g) =>
      [
        `# HELP ${g.name} ${g.help}`,
        `# TYPE ${g.name} ${g.type ?? 'gauge'}`,
        ...g.values.map(([l, v]) => `${g.name}${Object.keys(l).length ? `{${key(l)}}` : ''} ${v}`),
      ].join('\n'),
    );
    for (const m of [this.creates, this.resets, this.destroys, this.requests, this.errors, this.ops, this.poolClaims, this.poolRefill, this.loopLag])
      parts.push(m.render());
    return parts.join('\n') + '\n';
  }
}

export const metrics = new MetricsRegistry();

/** Feeds `metrics.loopLag` from a 20 ms timer until the returned stop is called (the timer keeps no process alive). */
export function watchEventLoop(everyMs = 20): () => void {
  let due = performance.now() + everyMs;
  const t = setInterval(() => {
    const now = performance.now();
    metrics.loopLag.observe({}, Math.max(0, now - due) / 1000);
    due = now + everyMs;
  }, everyMs);
  t.unref();
  return () => clearInterval(t);
}

/**
 * One full garbage collection when the API goes idle after some work. A
 * screenshot's Buffers are freed only when V8 collects the objects that hold
 * them, and with the daemon's small JS heap (25–30 MiB) it seldom runs a full
 * collection: a soak's quiescent checkpoints saw 37–57 MiB of ArrayBuffers,
 * most of them dead. So once no request has been in flight for `idleMs`, the
 * daemon collects (10–30 ms for this heap) and jemalloc hands the pages back.
 * At most once per idle spell, so a busy daemon never pays for it. Needs Node's
 * `--expose-gc` (bin/drums serve passes it); without it this does nothing.
 */
let collected = 0;
/** Idle collections since the process started (for /metrics). */
export const idleCollections = (): number => collected;

export function startIdleGc(server: Server, idleMs = 2000): { stop(): void; collections(): number } {
  const gc = (globalThis as { gc?: () => void }).gc;
  let inflight = 0;
  let last = performance.now();
  let worked = false;
  let n = 0;
  server.on('request', (_req, res) => {
    inflight++;
    worked = true;
    res.once('close', () => {
      inflight--;
      last = performance.now();
    });
  });
  const timer = setInterval(() => {
    if (!gc || !worked || inflight > 0 || performance.now() - last < idleMs) return;
    worked = false;
    gc();
    n++;
    collected++;
  }, 500);
  timer.unref();
  return { stop: () => clearInterval(timer), collections: () => n };
}
