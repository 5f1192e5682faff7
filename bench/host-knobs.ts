import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';

/**
 * Host-wide settings a bench arm changes (sysctls, /sys knobs, a zram swap
 * device), with their original values journalled to a file BEFORE the change,
 * so they are restored at the end of the arm, in the runner's `finally`, on
 * SIGINT/SIGTERM/SIGHUP (second Ctrl-C included) and, if the harness was
 * SIGKILLed, by the next bench run (`recoverHostKnobs`).
 *
 * Everything here is synchronous: the restore must work from an 'exit' handler.
 */
export const JOURNAL = '/var/tmp/drums-bench-host-knobs.json';

interface Journal {
  pid: number;
  /** Files written, with their values before the first write (restored in reverse order). */
  knobs: { path: string; original: string }[];
  /** zram devices this harness added (hot_add), swapped on, to be swapped off, reset and removed. */
  zram: number[];
}

let journal: Journal | undefined;
let guardInstalled = false;

const load = (): Journal | undefined => {
  try {
    return JSON.parse(readFileSync(JOURNAL, 'utf8')) as Journal;
  } catch {
    return undefined;
  }
};
const save = () => {
  if (journal && (journal.knobs.length || journal.zram.length)) writeFileSync(JOURNAL, JSON.stringify(journal, null, 2) + '\n');
  else rmSync(JOURNAL, { force: true });
};

function installGuard(): void {
  if (guardInstalled) return;
  guardInstalled = true;
  process.on('exit', () => {
    try {
      restoreHostKnobs();
    } catch {
      /* best effort at exit */
    }
  });
  let sigints = 0;
  // The runner handles the first SIGINT (finish the step, write a partial
  // record, restore in its finally). A second one restores here and exits.
  process.on('SIGINT', () => {
    if (++sigints >= 2) {
      try {
        restoreHostKnobs();
      } finally {
        process.exit(130);
      }
    }
  });
  for (const sig of ['SIGTERM', 'SIGHUP'] as const)
    process.on(sig, () => {
      try {
        restoreHostKnobs();
      } finally {
        process.exit(128 + (sig === 'SIGTERM' ? 15 : 1));
      }
    });
}

const begin = (): Journal => {
  if (!journal) {
    const other = load();
    if (other && other.pid !== process.pid)
      throw new Error(
        `${JOURNAL} holds host knobs of process ${other.pid} (another bench run, or one that died: the next run restores it once that pid is gone)`,
      );
  }
  installGuard();
  journal ??= { pid: process.pid, knobs: [], zram: [] };
  return journal;
};

export const readKnob = (path: string): string => readFileSync(path, 'utf8').trim();

/** Writes `value` to a /proc/sys or /sys file, journalling the original value on the first write. Returns the original. */
export function setKnob(path: string, value: string | number): string {
  const j = begin();
  let entry = j.knobs.find((k) => k.path === path);
  if (!entry) {
    entry = { path, original: readKnob(path) };
    j.knobs.push(entry);
    save();
  }
  writeFileSync(path, `${value}\n`);
  return entry.original;
}

/** The values this harness changed and their originals (for the record). */
export function changedKnobs(): { path: string; original: string; now: string }[] {
  return (journal?.knobs ?? []).map((k) => ({
    ...k,
    now: (() => {
      try {
        return readKnob(k.path);
      } catch {
        return '?';
      }
    })(),
  }));
}

function teardownZram(id: number, errors: string[]): void {
  const dev = `/dev/zram${id}`;
  if (
    readFileSync('/proc/swaps', 'utf8')
      .split('\n')
      .some((l) => l.split(/\s+/)[0] === dev)
  ) {
    try {
      execFileSync('swapoff', [dev], { stdio: 'pipe' });
    } catch (e) {
      errors.push(`swapoff ${dev}: ${(e as Error).message}`);
      return;
    }
  }
  try {
    if (existsSync(`/sys/block/zram${id}/reset`)) writeFileSync(`/sys/block/zram${id}/reset`, '1\n');
  } catch (e) {
    errors.push(`reset zram${id}: ${(e as Error).message}`);
  }
  try {
    if (existsSync(`/sys/block/zram${id}`)) writeFileSync('/sys/class/zram-control/hot_remove', `${id}\n`);
  } catch (e) {
    errors.push(`hot_remove zram${id}: ${(e as Error).message}`);
  }
}

/** Restores every journalled knob (reverse order) and removes the zram devices this harness added. Returns what failed. */
export function restoreHostKnobs(j: Journal | undefined = journal): string[] {
  if (!j) return [];
  const errors: string[] = [];
  for (const id of [...j.zram].reverse()) teardownZram(id, errors);
  j.zram = [];
  for (const k of [...j.knobs].reverse()) {
    try {
      writeFileSync(k.path, `${k.original}\n`);
    } catch (e) {
      errors.push(`restore ${k.path}=${k.original}: ${(e as Error).message}`);
      continue;
    }
    j.knobs.splice(j.knobs.indexOf(k), 1);
  }
  if (j === journal) save();
  return errors;
}

/** A journal left by a harness that died without restoring (SIGKILL, crash): restore it now. */
export function recoverHostKnobs(): string | null {
  const j = load();
  if (!j) return null;
  if (j.pid !== process.pid && existsSync(`/proc/${j.pid}`)) {
    return `process ${j.pid} (another bench run?) holds host knobs in ${JOURNAL}; not touching them (remove the file once that process is gone to have them restored by the next run)`;
  }
  const what = `${j.knobs.map((k) => `${k.path}=${k.original}`).join(', ')}${j.zram.length ? `; zram ${j.zram.join(',')}` : ''}`;
  const errors = restoreHostKnobs(j);
  if (!errors.length) rmSync(JOURNAL, { force: true });
  return `restored host knobs left by a dead bench run (pid ${j.pid}): ${what}${errors.length ? `; errors: ${errors.join('; ')}` : ''}`;
}

export interface ZramSwap {
  id: number;
  dev: string;
  sizeMiB: number;
  algorithm: string;
  priority: number;
}

/** Adds a fresh zram device (never reuses an existing one), formats it as swap and enables it at the given priority. */
export function addZramSwap(sizeMiB: number, priority = 32767): ZramSwap {
  if (!existsSync('/sys/class/zram-control/hot_add')) {
    try {
      execFileSync('modprobe', ['zram', 'num_devices=0'], { stdio: 'pipe' });
    } catch {
      /* reported below */
    }
    if (!existsSync('/sys/class/zram-control/hot_add')) throw new Error('zram is not available (no /sys/class/zram-control; modprobe zram failed)');
  }
  const j = begin();
  const id = Number(readFileSync('/sys/class/zram-control/hot_add', 'utf8').trim());
  j.zram.push(id);
  save();
  const sys = `/sys/block/zram${id}`;
  const algs = readFileSync(`${sys}/comp_algorithm`, 'utf8');
  const algorithm = /\blz4\b/.test(algs) ? 'lz4' : (/\[(\S+)\]/.exec(algs)?.[1] ?? 'default');
  if (algorithm === 'lz4') writeFileSync(`${sys}/comp_algorithm`, 'lz4\n');
  writeFileSync(`${sys}/disksize`, `${sizeMiB}M\n`);
  const dev = `/dev/zram${id}`;
  for (let i = 0; i < 50 && !existsSync(dev); i++) execFileSync('sleep', ['0.05']);
  execFileSync('mkswap', [dev], { stdio: 'pipe' });
  execFileSync('swapon', ['-p', String(priority), dev], { stdio: 'pipe' });
  return { id, dev, sizeMiB, algorithm, priority };
}

/** Swaps off, resets and removes one zram device this harness added. */
export function removeZramSwap(id: number): string[] {
  const errors: string[] = [];
  teardownZram(id, errors);
  if (journal && !errors.length) {
    journal.zram = journal.zram.filter((x) => x !== id);
    save();
  }
  return errors;
}

/** /sys/block/zramN/mm_stat in MiB (orig_data_size, compr_data_size, mem_used_total, ...). */
export function zramStat(id: number): { origMiB: number; comprMiB: number; memUsedMiB: number; samePages: number; hugePages: number } {
  const f = readFileSync(`/sys/block/zram${id}/mm_stat`, 'utf8').trim().split(/\s+/).map(Number);
  const mib = (x: number | undefined) => (x ?? 0) / 1024 ** 2;
  return { origMiB: mib(f[0]), comprMiB: mib(f[1]), memUsedMiB: mib(f[2]), samePages: f[5] ?? 0, hugePages: f[7] ?? 0 };
}
