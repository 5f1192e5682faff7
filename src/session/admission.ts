import { cpus as hostCpus } from 'node:os';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { DaemonConfig } from '../common/config.ts';
import { DrumsError } from '../common/errors.ts';
import { allocatedBytes, diskSpace } from '../host/disk.ts';
import { DEFAULTS, type SessionSpec } from './spec.ts';

/**
 * Admission: a create is refused (nothing made) when the host could not give
 * it what it asks for. Two kinds of refusal:
 *  - a limit larger than the host could ever give (memory over the host's
 *    RAM, disk over the state filesystem, CPUs over the host's cores, disk
 *    bandwidth over the daemon's DRUMS_DISK_READ_MBPS / DRUMS_DISK_WRITE_MBPS):
 *    422 `limit_exceeds_host`;
 *  - a host short right now: 503 `insufficient_memory` / `insufficient_disk`.
 *
 * Memory: a session's limit (default 2 GiB) is a cap, not a reservation;
 * sessions use far less (about 110 MiB for a Chromium desktop). So a create
 * is admitted while MemAvailable, minus a reserve for the host and daemon,
 * minus what creates in flight will soon use, still covers one more session's
 * expected footprint (DRUMS_SESSION_MEMORY_MB, default 256). A host short of
 * memory refuses the create instead of letting the kernel OOM-kill anything.
 *
 * Disk: sessions' disks are sparse, so the host must keep room for what each
 * may still write: free disk minus the reserve minus every session's unwritten
 * quota (times DRUMS_DISK_OVERCOMMIT, default 1: no overcommit) must cover
 * the new session's quota. With the default, sessions filling their disks to
 * the last byte never fill the host.
 */
export interface AdmissionConfig {
  memoryReserveBytes: number;
  sessionMemoryBytes: number;
  diskReserveBytes: number;
  diskOvercommit: number;
  /** The most disk bandwidth a session may ask for, MiB/s (0: any). */
  diskReadMbps: number;
  diskWriteMbps: number;
}

/** What admission needs to know of one existing session. */
export interface AdmittedSession {
  state: string;
  spec: Pick<SessionSpec, 'memoryBytes' | 'diskBytes'>;
  /** The session's disk image (sparse): its allocated bytes are what it already holds. */
  diskImage: string;
}

export interface Capacity {
  memory: { totalBytes: number; availableBytes: number; reserveBytes: number; perSessionBytes: number; inFlightBytes: number; moreSessions: number };
  disk: { totalBytes: number; freeBytes: number; reserveBytes: number; committedBytes: number; perSessionBytes: number; moreSessions: number };
  cpu: { cores: number };
  /** How many more default sessions memory and disk admission would allow now. */
  moreSessions: number;
}

const MiB = 1024 ** 2;

/** Admission's figures in bytes, from the daemon's config (the memory reserve's default depends on the host's RAM). */
export function admissionConfig(
  cfg: Pick<DaemonConfig, 'memoryReserveMb' | 'sessionMemoryMb' | 'diskReserveMb' | 'diskOvercommit' | 'diskReadMbps' | 'diskWriteMbps'>,
): AdmissionConfig {
  const reserveMb = cfg.memoryReserveMb ?? Math.max(1024, Math.round((meminfo().MemTotal! * 0.05) / MiB));
  return {
    memoryReserveBytes: reserveMb * MiB,
    sessionMemoryBytes: cfg.sessionMemoryMb * MiB,
    diskReserveBytes: cfg.diskReserveMb * MiB,
    diskOvercommit: cfg.diskOvercommit,
    diskReadMbps: cfg.diskReadMbps,
    diskWriteMbps: cfg.diskWriteMbps,
  };
}

/** /proc/meminfo in bytes. */
export function meminfo(): Record<string, number> {
  const out: Record<string, number> = {};
  for (const line of readFileSync('/proc/meminfo', 'utf8').split('\n')) {
    const m = /^(\w+):\s+(\d+)(?: kB)?/.exec(line);
    if (m) out[m[1]!] = Number(m[2]) * (line.endsWith('kB') ? 1024 : 1);
  }
  return out;
}

export class Admission {
  readonly cfg: AdmissionConfig;
  readonly stateDir: string;
  constructor(stateDir: string, cfg: AdmissionConfig) {
    this.stateDir = stateDir;
    this.cfg = cfg;
  }

  private _expected(spec: Pick<SessionSpec, 'memoryBytes'>): number {
    return Math.min(spec.memoryBytes, this.cfg.sessionMemoryBytes);
  }

  /** The host's numbers now, for a session like `spec` (the defaults if none). */
  capacity(sessions: AdmittedSession[], spec: Pick<SessionSpec, 'memoryBytes' | 'diskBytes'> = DEFAULTS): Capacity {
    const mem = meminfo();
    const inFlight = sessions.filter((s) => s.state === 'creating' || s.state === 'resetting').reduce((a, s) => a + this._expected(s.spec), 0);
    const perMem = this._expected(spec);
    const memLeft = mem.MemAvailable! - this.cfg.memoryReserveBytes - inFlight;
    const disk = diskSpace(this.stateDir);
    const committed = sessions.reduce((a, s) => a + Math.max(0, s.spec.diskBytes - allocatedBytes(s.diskImage)), 0) * this.cfg.diskOvercommit;
    const diskLeft = disk.freeBytes - this.cfg.diskReserveBytes - committed;
    const perDisk = spec.diskBytes * this.cfg.diskOvercommit;
    const more = (left: number, per: number) => (per > 0 ? Math.max(0, Math.floor(left / per)) : Number.MAX_SAFE_INTEGER);
    const memory = {
      totalBytes: mem.MemTotal!,
      availableBytes: mem.MemAvailable!,
      reserveBytes: this.cfg.memoryReserveBytes,
      perSessionBytes: perMem,
      inFlightBytes: inFlight,
      moreSessions: more(memLeft, perMem),
    };
    const diskCap = {
      totalBytes: disk.totalBytes,
      freeBytes: disk.freeBytes,
      reserveBytes: this.cfg.diskReserveBytes,
      committedBytes: committed,
      perSessionBytes: perDisk,
      moreSessions: more(diskLeft, perDisk),
    };
    return { memory, disk: diskCap, cpu: { cores: hostCpus().length }, moreSessions: Math.min(memory.moreSessions, diskCap.moreSessions) };
  }

  /** Throws 422 `limit_exceeds_host` if a limit of the spec is more than the host has at all (a pool template is checked so at PUT). */
  fitsHost(spec: SessionSpec, cap: Capacity = this.capacity([], spec)): void {
    const tooBig = (field: string, what: string) => new DrumsError('limit_exceeds_host', `${field}: ${what}; ask for less`, { details: { field } });
    if (spec.memoryBytes > cap.memory.totalBytes)
      throw tooBig('memoryMb', `${spec.memoryBytes / MiB} MiB is more than the host's ${Math.floor(cap.memory.totalBytes / MiB)} MiB of RAM`);
    if (spec.diskBytes > cap.disk.totalBytes)
      throw tooBig('diskMb', `${spec.diskBytes / MiB} MiB is more than the state filesystem's ${Math.floor(cap.disk.totalBytes / MiB)} MiB`);
    if (spec.cpus > cap.cpu.cores) throw tooBig('cpus', `${spec.cpus} is more than the host's ${cap.cpu.cores} cores`);
    // A session may ask for less disk bandwidth than the daemon's limit, never more (the limit protects the others).
    for (const [field, asked, most, env] of [
      ['diskReadMbps', spec.diskReadMbps, this.cfg.diskReadMbps, 'DRUMS_DISK_READ_MBPS'],
      ['diskWriteMbps', spec.diskWriteMbps, this.cfg.diskWriteMbps, 'DRUMS_DISK_WRITE_MBPS'],
    ] as const)
      if (asked !== undefined && most > 0 && asked > most) throw tooBig(field, `${asked} MiB/s is more than this host allows a session (${env}=${most})`);
  }

  /** Throws (before anything is made) unless the host can take a session with this spec now. */
  check(spec: SessionSpec, sessions: AdmittedSession[]): void {
    const cap = this.capacity(sessions, spec);
    this.fitsHost(spec, cap);
    if (cap.memory.moreSessions < 1) {
      throw new DrumsError(
        'insufficient_memory',
        `the host has ${Math.floor(cap.memory.availableBytes / MiB)} MiB available, ${Math.floor(cap.memory.reserveBytes / MiB)} MiB of it reserved and ${Math.floor(cap.memory.inFlightBytes / MiB)} MiB promised to creates in flight; a session needs ${Math.floor(cap.memory.perSessionBytes / MiB)} MiB: retry later or destroy a session`,
        { details: { ...cap.memory } },
      );
    }
    if (cap.disk.moreSessions < 1) {
      throw new DrumsError(
        'insufficient_disk',
        `the state filesystem has ${Math.floor(cap.disk.freeBytes / MiB)} MiB free, ${Math.floor(cap.disk.reserveBytes / MiB)} MiB of it reserved and ${Math.floor(cap.disk.committedBytes / MiB)} MiB promised to sessions' disks; this session's diskMb needs ${Math.floor(cap.disk.perSessionBytes / MiB)} MiB: ask for a smaller diskMb, destroy a session or free host disk`,
        { details: { ...cap.disk } },
      );
    }
  }
}

/** A session's disk image path (see src/host/disk.ts). */
export function diskImagePath(sessionDir: string): string {
  return join(sessionDir, 'disk.img');
}
