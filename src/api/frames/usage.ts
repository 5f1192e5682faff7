/**
 * CPU and memory per session, read from its cgroup (v1 cpuacct/memory, or v2), for the
 * dashboard: GET /v1/usage → {sessions: [{id, cpuPercent, memoryBytes}]}. CPU is the share of
 * one core since the previous read of the same session (null on the first read).
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { cgroupBases } from '../../host/cgroup-fs.ts';
import type { Session } from '../../session/manager.ts';

function read(path: string): string | undefined {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return undefined;
  }
}

function cpuNs(cg: string, bases: string[]): number | undefined {
  for (const b of bases) {
    const v1 = read(join(b, cg, 'cpuacct.usage'));
    if (v1 !== undefined) return Number(v1.trim());
    const v2 = read(join(b, cg, 'cpu.stat'));
    const m = v2 && /usage_usec (\d+)/.exec(v2);
    if (m) return Number(m[1]) * 1000;
  }
  return undefined;
}

function memBytes(cg: string, bases: string[]): number | undefined {
  for (const b of bases) {
    const v = read(join(b, cg, 'memory.current')) ?? read(join(b, cg, 'memory.usage_in_bytes'));
    if (v !== undefined) return Number(v.trim());
  }
  return undefined;
}

const last = new Map<string, { ns: number; at: number }>();

export function sessionUsage(s: Session): { id: string; cpuPercent: number | null; memoryBytes: number | null } {
  const bases = cgroupBases().filter((b) => existsSync(join(b, s.names.cgroup)));
  const ns = cpuNs(s.names.cgroup, bases);
  const now = performance.now();
  let cpuPercent: number | null = null;
  const prev = last.get(s.id);
  if (ns !== undefined) {
    if (prev && now > prev.at) cpuPercent = Math.round(((ns - prev.ns) / 1e6 / (now - prev.at)) * 1000) / 10;
    last.set(s.id, { ns, at: now });
  }
  return { id: s.id, cpuPercent, memoryBytes: memBytes(s.names.cgroup, bases) ?? null };
}

/** Forgets sessions that are gone. */
export function pruneUsage(live: Set<string>): void {
  for (const id of last.keys()) if (!live.has(id)) last.delete(id);
}
