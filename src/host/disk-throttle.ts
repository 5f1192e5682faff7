import { existsSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { log } from '../common/log.ts';
import { CGROUP_ROOT, cgroupMode } from './cgroup-fs.ts';

/**
 * Read bandwidth of a session (DRUMS_DISK_READ_MBPS, a spec's diskReadMbps):
 * a session reading in a loop, from its own disk or from the image (the
 * overlay's read-only lower, on the host's disk), would otherwise take the
 * host disk's full speed from its neighbours and the host. Reads are issued in
 * the reader's context (page cache misses and readahead alike), so one rule
 * per device in the session's own cgroup holds them on v1
 * (blkio.throttle.read_bps_device) and v2 (io.max rbps): the bundle's blockIO
 * names the loop device and the whole disk under the image store
 * (`blockDeviceOf`). Those rules live in the session's cgroup and go with it.
 * The loop worker's reads of the image file are charged to the session as
 * well, so on a host whose state directory and images share a disk a
 * session's reads of both layers share the one rule on that disk.
 * A page already in the host's page cache (an image file another session
 * read) costs no disk read and is not limited.
 *
 * Write bandwidth of a session's disk (its loop device). Without a limit, a
 * session that fills its quota in a loop writes at the host disk's full speed,
 * and the work behind it (the flusher, the loop worker, the host filesystem)
 * runs outside the session's CPU cgroup, so its neighbours pay for it.
 *
 * The limit goes on the session's loop device in two places:
 *  - the session's own cgroup (the OCI bundle's blockIO, which runc writes to
 *    blkio.throttle.write_bps_device on v1 and io.max on v2). On v2 that holds
 *    every write, since writeback is charged to the cgroup that dirtied the
 *    page; on v1 it holds only direct and synchronous writes.
 *  - on v1 also the root blkio cgroup, because v1 writeback is issued by the
 *    kernel's flusher threads, which sit there. That rule outlives the session
 *    unless removed: `unthrottleLoop` runs before every unmount of a session
 *    disk, and `clearFreeLoopThrottles` (at every sweep) removes rules left on
 *    loop devices that no longer back anything.
 */
export interface BlockDevice {
  major: number;
  minor: number;
}

const V1_ROOT = `${CGROUP_ROOT}/blkio/blkio.throttle.write_bps_device`;
const LOOP_MAJOR = 7;

/** major:minor of a block device node. */
export function deviceNumbers(dev: string): BlockDevice {
  const rdev = statSync(dev).rdev;
  return { major: (rdev >> 8) & 0xfff, minor: (rdev & 0xff) | ((rdev >> 12) & 0xfff00) };
}

/**
 * The whole disk under the filesystem holding `path`, for a throttle rule (the
 * kernel takes rules only on whole disks: a partition is mapped to its disk),
 * or undefined where it is no block device (tmpfs, overlayfs, btrfs, NFS).
 */
export function blockDeviceOf(path: string): BlockDevice | undefined {
  let dev: number;
  try {
    dev = statSync(path).dev;
  } catch {
    return undefined;
  }
  const major = (dev >> 8) & 0xfff;
  const minor = (dev & 0xff) | ((dev >> 12) & 0xfff00);
  if (major === 0) return undefined;
  const sys = `/sys/dev/block/${major}:${minor}`;
  if (!existsSync(sys)) return undefined;
  if (!existsSync(`${sys}/partition`)) return { major, minor };
  try {
    const m = /^(\d+):(\d+)$/.exec(readFileSync(`${sys}/../dev`, 'utf8').trim());
    return m ? { major: Number(m[1]), minor: Number(m[2]) } : undefined;
  } catch {
    return undefined;
  }
}

const rootRules = (): boolean => cgroupMode() !== 'v2';

/** Limits writes to `dev` in the root blkio cgroup (v1 only; v2 has the bundle's io.max). */
export function throttleLoop(dev: BlockDevice, bytesPerSecond: number): void {
  if (!rootRules() || bytesPerSecond <= 0) return;
  try {
    writeFileSync(V1_ROOT, `${dev.major}:${dev.minor} ${Math.round(bytesPerSecond)}`);
  } catch (e) {
    log('warn', "could not limit a session disk's write bandwidth", { device: `${dev.major}:${dev.minor}`, error: String(e) });
  }
}

/** Removes the root rule on `dev` (v1), so the next user of the loop device gets none. */
export function unthrottleLoop(dev: BlockDevice): void {
  if (!rootRules()) return;
  try {
    if (rulesNow().some((r) => r.major === dev.major && r.minor === dev.minor)) writeFileSync(V1_ROOT, `${dev.major}:${dev.minor} 0`);
  } catch {}
}

function rulesNow(): BlockDevice[] {
  try {
    return readFileSync(V1_ROOT, 'utf8')
      .split('\n')
      .map((l) => /^(\d+):(\d+) \d+$/.exec(l.trim()))
      .filter((m) => !!m)
      .map((m) => ({ major: Number(m[1]), minor: Number(m[2]) }));
  } catch {
    return [];
  }
}

/** Removes root rules on loop devices that back no file now (left by a daemon that was killed). Returns them. */
export function clearFreeLoopThrottles(): string[] {
  if (!rootRules()) return [];
  const cleared: string[] = [];
  for (const r of rulesNow()) {
    if (r.major !== LOOP_MAJOR) continue;
    let backed = false;
    try {
      backed = readFileSync(`/sys/dev/block/${r.major}:${r.minor}/loop/backing_file`, 'utf8').trim() !== '';
    } catch {}
    if (backed) continue;
    unthrottleLoop(r);
    cleared.push(`${r.major}:${r.minor}`);
  }
  return cleared;
}
