import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { Api, CHECKS, type Run } from './checks.ts';

export interface CheckResult {
  area: string;
  name: string;
  pass: boolean;
  skipped: boolean;
  ms: number;
  error?: string;
}

export interface ConformanceOptions {
  image?: string;
  /** Only checks whose "area: name" contains this. */
  filter?: string;
  onResult?: (r: CheckResult) => void;
}

/** URL and token: arguments, else DRUMS_URL/DRUMS_TOKEN, else the state dir's daemon.json and token. */
export function resolveTarget(url?: string, token?: string, env = process.env): { url: string; token: string } {
  const stateDir = resolve(env.DRUMS_STATE_DIR || '/var/lib/drums');
  const u =
    url ??
    env.DRUMS_URL ??
    (existsSync(join(stateDir, 'daemon.json')) ? (JSON.parse(readFileSync(join(stateDir, 'daemon.json'), 'utf8')) as { url: string }).url : undefined);
  if (!u) throw new Error(`no daemon URL: pass one, set DRUMS_URL, or start 'drums serve' for ${stateDir}`);
  const t = token ?? env.DRUMS_TOKEN ?? (existsSync(join(stateDir, 'token')) ? readFileSync(join(stateDir, 'token'), 'utf8').trim() : undefined);
  if (!t) throw new Error('no token: pass --token or set DRUMS_TOKEN');
  return { url: u, token: t };
}

/** Runs every check in order; sessions the checks made are destroyed at the end whatever happened. */
export async function runConformance(url: string, token: string, opts: ConformanceOptions = {}): Promise<CheckResult[]> {
  const run: Run = { api: new Api(url, token), image: opts.image ?? 'minimal', created: new Set() };
  const results: CheckResult[] = [];
  try {
    for (const c of CHECKS) {
      if (opts.filter && !`${c.area}: ${c.name}`.includes(opts.filter) && !(c.needsSession && 'sessions: create → 201'.includes(opts.filter))) continue;
      const t0 = performance.now();
      let r: CheckResult;
      if (c.needsSession && !run.session) {
        r = { area: c.area, name: c.name, pass: false, skipped: true, ms: 0, error: 'skipped: no session (the create check failed)' };
      } else {
        try {
          await c.run(run);
          r = { area: c.area, name: c.name, pass: true, skipped: false, ms: performance.now() - t0 };
        } catch (e) {
          r = { area: c.area, name: c.name, pass: false, skipped: false, ms: performance.now() - t0, error: e instanceof Error ? e.message : String(e) };
        }
      }
      results.push(r);
      opts.onResult?.(r);
    }
  } finally {
    for (const id of run.created) await run.api.request(`/v1/sessions/${id}`, { method: 'DELETE' }).catch(() => {});
  }
  return results;
}

export function formatTable(results: CheckResult[]): string {
  const w = Math.max(...results.map((r) => r.area.length + r.name.length + 2), 20);
  const lines = results.map(
    (r) =>
      `${r.pass ? 'PASS' : r.skipped ? 'SKIP' : 'FAIL'}  ${`${r.area}: ${r.name}`.padEnd(w)}  ${String(Math.round(r.ms)).padStart(6)} ms${r.error ? `  ${r.error}` : ''}`,
  );
  const pass = results.filter((r) => r.pass).length;
  lines.push(`${pass}/${results.length} checks passed${pass === results.length ? '' : `, ${results.length - pass} failed or skipped`}`);
  return lines.join('\n');
}
