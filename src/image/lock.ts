// A lock file created with O_EXCL holding "<pid> <starttime>", where
// starttime is field 22 of /proc/<pid>/stat. A lock whose process is gone, or
// whose pid now belongs to a different process (start time differs), is stale
// and is taken over.

import { openSync, writeSync, closeSync, readFileSync, unlinkSync, statSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { ImageError } from './errors.ts';

/** Field 22 (starttime, in clock ticks since boot) of /proc/<pid>/stat, or undefined if there is no such process. */
export function processStartTime(pid: number): string | undefined {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return undefined;
  }
  // comm (field 2) may contain spaces and parentheses: split after the last ')'.
  const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return rest[22 - 3];
}

export interface LockHandle {
  path: string;
  release(): void;
}

export interface LockOptions {
  /** Give up after this long (default 30 minutes). */
  timeoutMs?: number;
  /** Poll interval while waiting (default 500 ms). */
  pollMs?: number;
  /** Called once when the lock is held by a live process and we start waiting. */
  onWait?: (holderPid: number) => void;
}

/** Why a lock file's holder is not alive, or undefined if it is (or may be). */
function staleReason(path: string, content: string): string | undefined {
  const m = /^(\d+) (\d+)\n?$/.exec(content);
  if (!m) {
    // Possibly being written right now: only stale once it is old.
    try {
      return Date.now() - statSync(path).mtimeMs > 10_000 ? 'unreadable lock file' : undefined;
    } catch {
      return undefined;
    }
  }
  const start = processStartTime(Number(m[1]));
  if (start === undefined) return `pid ${m[1]} is gone`;
  if (start !== m[2]) return `pid ${m[1]} was reused`;
  return undefined;
}

function tryCreate(path: string): boolean {
  let fd: number;
  try {
    fd = openSync(path, 'wx', 0o644);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw err;
  }
  try {
    writeSync(fd, `${process.pid} ${processStartTime(process.pid)}\n`);
  } finally {
    closeSync(fd);
  }
  return true;
}

/**
 * Acquires the lock at `path`, waiting while a live process holds it and
 * taking over stale locks. Throws `image_lock_timeout` after `timeoutMs`.
 */
export async function acquireLock(path: string, opts: LockOptions = {}): Promise<LockHandle> {
  const deadline = Date.now() + (opts.timeoutMs ?? 30 * 60_000);
  const mine = `${process.pid} ${processStartTime(process.pid)}\n`;
  let waited = false;
  for (;;) {
    if (tryCreate(path)) {
      return {
        path,
        release() {
          try {
            if (readFileSync(path, 'utf8') === mine) unlinkSync(path);
          } catch {
            // already gone
          }
        },
      };
    }
    let content: string;
    try {
      content = readFileSync(path, 'utf8');
    } catch {
      continue; // released between our open and read: retry at once
    }
    if (staleReason(path, content) !== undefined) {
      // Re-read right before removing so that we only remove the stale lock,
      // not one a concurrent waiter has just created in its place.
      try {
        if (readFileSync(path, 'utf8') === content) unlinkSync(path);
      } catch {
        // someone else removed it
      }
      continue;
    }
    if (Date.now() >= deadline) {
      throw new ImageError('image_lock_timeout', `timed out waiting for lock ${path} (held by ${content.trim()})`);
    }
    if (!waited) {
      waited = true;
      opts.onWait?.(Number(content.split(' ')[0]));
    }
    await sleep(opts.pollMs ?? 500);
  }
}
