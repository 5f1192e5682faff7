import { readFileSync } from 'node:fs';

/** Start time (clock ticks since boot, /proc/PID/stat field 22) or undefined if the PID is gone. */
export function procStartTime(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // comm may contain spaces and parens: split after the last ')'.
    const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const state = rest[0];
    if (state === 'Z' || state === 'X') return undefined;
    return Number(rest[19]);
  } catch {
    return undefined;
  }
}

/** A process identity that survives PID reuse: signal it only while the start time matches. */
export interface ProcIdentity {
  pid: number;
  startTime: number;
}

export function identify(pid: number): ProcIdentity | undefined {
  const startTime = procStartTime(pid);
  return startTime === undefined ? undefined : { pid, startTime };
}

export function isAlive(p: ProcIdentity): boolean {
  return procStartTime(p.pid) === p.startTime;
}

/** Sends a signal only if the process is still the one we recorded. */
export function signalIfSame(p: ProcIdentity, signal: NodeJS.Signals): boolean {
  if (!isAlive(p)) return false;
  try {
    process.kill(p.pid, signal);
    return true;
  } catch {
    return false;
  }
}
