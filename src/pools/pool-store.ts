import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { errorMessage } from '../common/errors.ts';

/**
 * The pools made or changed through the API (`source: api`), kept in the
 * daemon's state dir as `pools.json` (`{"<name>": {"size", "template"}}`) so a
 * restarted daemon has them again. Written like a session record: a temporary
 * file renamed over the old one, so a crash leaves the old set or the new one.
 */
export type PoolDefs = Record<string, { size: number; template: Record<string, unknown>; task?: unknown }>;

export function poolStorePath(stateDir: string): string {
  return join(stateDir, 'pools.json');
}

export function writePoolStore(path: string, defs: PoolDefs): void {
  const tmp = `${path}.tmp`;
  writeFileSync(tmp, JSON.stringify(defs, null, 2) + '\n', { mode: 0o600 });
  renameSync(tmp, path);
}

/**
 * Reads the saved set. A missing file is an empty set; an unreadable one is
 * moved aside (`pools.json.corrupt`, for a look) and answered with why, so the
 * daemon starts without it instead of failing.
 */
export function readPoolStore(path: string): { defs: PoolDefs; corrupt?: string } {
  if (!existsSync(path)) return { defs: {} };
  let why: string;
  try {
    const doc: unknown = JSON.parse(readFileSync(path, 'utf8'));
    if (doc && typeof doc === 'object' && !Array.isArray(doc)) return { defs: doc as PoolDefs };
    why = 'not an object of pools by name';
  } catch (e) {
    why = errorMessage(e);
  }
  renameSync(path, `${path}.corrupt`);
  return { defs: {}, corrupt: why };
}
