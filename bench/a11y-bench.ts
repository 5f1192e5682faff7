import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { A11yTree, DrumsClient } from '../src/client/client.ts';
import { DESKTOP_APPS, openDesktop } from './a11y-desktop.ts';
import { gitState, hostFacts } from './host-facts.ts';
import { quantile } from './stats.ts';

/**
 * `drums bench a11y`: accessibility-tree read latency through the HTTP API (XML, as an agent reads it), the
 * reference walk (`?reference=true`: every object call by call over the bus) against the fast read (each
 * application over its own socket, GTK 4's objects from Cache.GetItems; `?mirror=false`) and the mirror read
 * (the default: unchanged objects from the session's event mirror, docs/a11y.md), side by side in one run:
 * - per app: an osworld session with that one app open on its file, `reads` reads of each kind;
 * - desktop: one session with the 7-app desktop (bench/a11y-desktop.ts), alone;
 * - desktop-N: N such sessions read at once, `reads` rounds.
 * The kinds take turns in rotating order, so all see the same load. The mirror arm reads a desktop at rest: each
 * read finds the mirror filled by the one before (what an agent gets between actions that change little).
 */
export interface A11yBenchOptions {
  client: DrumsClient;
  /** Reads of each kind per measurement. */
  reads: number;
  /** Sessions read at once in the concurrent arm (0: skip it). */
  sessions: number;
  /** Apps of the per-app arm (names of DESKTOP_APPS; empty: skip it). */
  apps: string[];
  /** Measure the 7-app desktop alone. */
  desktop: boolean;
  outDir: string;
  progress: (msg: string) => void;
}

type Kind = 'walk' | 'fast' | 'mirror';
const KINDS: readonly Kind[] = ['walk', 'fast', 'mirror'];
const query = (kind: Kind) => ({ reference: kind === 'walk', ...(kind === 'fast' ? { mirror: false } : {}) });
/** `calls`, `mirrored` and `cut` are from one JSON read after the timed ones (`cut`: it passed its deadline, so was cut short). */
type Dist = { n: number; p50: number; p99: number; max: number; bytes: number; calls: number; mirrored: number; cut: boolean };

const dist = (xs: number[], bytes: number, { calls, mirrored, cut }: { calls: number; mirrored: number; cut: boolean }): Dist => ({
  n: xs.length,
  p50: +quantile(xs, 0.5).toFixed(1),
  p99: +quantile(xs, 0.99).toFixed(1),
  max: +Math.max(...xs).toFixed(1),
  bytes,
  calls,
  mirrored,
  cut,
});

async function timedRead(c: DrumsClient, id: string, kind: Kind): Promise<{ ms: number; bytes: number }> {
  const t = performance.now();
  const xml = String(await c.a11y(id, { format: 'xml', ...query(kind) }));
  return { ms: performance.now() - t, bytes: xml.length };
}

async function calls(c: DrumsClient, id: string, kind: Kind): Promise<{ calls: number; mirrored: number; cut: boolean }> {
  const { stats } = (await c.a11y(id, { format: 'json', ...query(kind) })) as A11yTree;
  return { calls: stats.calls, mirrored: stats.mirrored ?? 0, cut: stats.deadlineHit || stats.budgetHit };
}

/** `reads` rounds over `ids` (all at once per round), the kinds in rotating order: per-read latency of each kind. */
async function measure(c: DrumsClient, ids: string[], reads: number): Promise<Record<Kind, Dist>> {
  const ms: Record<Kind, number[]> = { walk: [], fast: [], mirror: [] };
  const bytes: Record<Kind, number> = { walk: 0, fast: 0, mirror: 0 };
  // Warm-up: atk-bridge makes its objects, sockets open, every session's mirror starts and fills.
  for (const kind of KINDS) await Promise.all(ids.map((id) => timedRead(c, id, kind)));
  for (let i = 0; i < reads; i++) {
    for (const kind of KINDS.map((_, j) => KINDS[(i + j) % KINDS.length]!)) {
      const got = await Promise.all(ids.map((id) => timedRead(c, id, kind)));
      for (const g of got) ms[kind].push(g.ms);
      bytes[kind] = got[0]!.bytes;
    }
  }
  return {
    walk: dist(ms.walk, bytes.walk, await calls(c, ids[0]!, 'walk')),
    fast: dist(ms.fast, bytes.fast, await calls(c, ids[0]!, 'fast')),
    mirror: dist(ms.mirror, bytes.mirror, await calls(c, ids[0]!, 'mirror')),
  };
}

async function withSessions<T>(c: DrumsClient, n: number, names: string[], fn: (ids: string[]) => Promise<T>): Promise<T> {
  const ids: string[] = [];
  try {
    for (let i = 0; i < n; i++) ids.push((await c.createSession({ image: 'osworld' } as never)).id);
    await Promise.all(ids.map((id) => openDesktop(c, id, { names })));
    return await fn(ids);
  } finally {
    await Promise.all(ids.map((id) => c.destroySession(id).catch(() => {})));
  }
}

export async function runA11yBench(o: A11yBenchOptions) {
  const started = new Date().toISOString();
  const c = o.client;
  const results: { perApp: Record<string, Record<Kind, Dist>>; desktop?: Record<Kind, Dist>; concurrent?: { sessions: number } & Record<Kind, Dist> } = {
    perApp: {},
  };
  for (const name of o.apps) {
    o.progress(`per app: ${name}`);
    results.perApp[name] = await withSessions(c, 1, [name], (ids) => measure(c, ids, o.reads));
  }
  const all = DESKTOP_APPS.map((a) => a.name);
  if (o.desktop) {
    o.progress('7-app desktop, alone');
    results.desktop = await withSessions(c, 1, all, (ids) => measure(c, ids, o.reads));
  }
  if (o.sessions > 0) {
    o.progress(`7-app desktop, ${o.sessions} sessions read at once`);
    results.concurrent = { sessions: o.sessions, ...(await withSessions(c, o.sessions, all, (ids) => measure(c, ids, o.reads))) };
  }
  const record = {
    bench: 'a11y',
    started,
    finished: new Date().toISOString(),
    options: { reads: o.reads, sessions: o.sessions, apps: o.apps, desktop: o.desktop },
    git: gitState(),
    host: hostFacts(),
    results,
  };
  mkdirSync(o.outDir, { recursive: true });
  const file = join(o.outDir, `a11y-${started.replace(/[:.]/g, '-')}.json`);
  writeFileSync(file, `${JSON.stringify(record, null, 2)}\n`);
  return { record, file };
}
