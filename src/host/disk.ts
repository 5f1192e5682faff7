import { closeSync, ftruncateSync, mkdirSync, openSync, readFileSync, readdirSync, rmSync, statSync, statfsSync } from 'node:fs';
import { run } from '../common/exec.ts';
import { HostError } from '../common/errors.ts';
import { type BlockDevice, deviceNumbers, throttleLoop, unthrottleLoop } from './disk-throttle.ts';
import { mountsUnder } from './overlay.ts';

/**
 * A session's disk: a sparse image file holding an ext4 filesystem of exactly
 * the session's quota, loop-mounted (autoclear) under the session directory.
 * The overlay's upper and work directories live on it, so every byte a
 * session writes outside its tmpfs mounts lands there: a write past the quota
 * fails with ENOSPC inside that session only, and `df /` in the session shows
 * its own size (overlayfs reports its upper filesystem's statfs).
 *
 * Why not project quotas on a shared filesystem (the container engines' way):
 * they need CONFIG_QUOTA (ext4) or XFS quota support, which kernels like this
 * host's leave out; a filesystem per session needs only loop and ext4. The
 * image is sparse and mounted with `discard`, so it takes host disk only for
 * what the session holds (about 400 KiB when empty) and deleted files give
 * the space back.
 */
const MKFS_OPTS = [
  '-q',
  '-F',
  '-m',
  '0', // no blocks reserved for root: the session gets all of its quota
  '-O',
  '^has_journal', // ephemeral data: a journal would only cost writes
  '-E',
  'lazy_itable_init=1,nodiscard',
];

/**
 * Makes (or remakes, emptying it) the session disk and mounts it at `mountpoint`; returns its
 * loop device. With `writeBytesPerSecond`, writes to it are limited (src/host/disk-throttle.ts).
 */
export async function makeSessionDisk(image: string, mountpoint: string, bytes: number, writeBytesPerSecond = 0): Promise<BlockDevice> {
  await unmountSessionDisk(image, mountpoint);
  const fd = openSync(image, 'w', 0o600);
  try {
    ftruncateSync(fd, bytes);
  } finally {
    closeSync(fd);
  }
  await run(['mkfs.ext4', ...MKFS_OPTS, image]);
  mkdirSync(mountpoint, { recursive: true, mode: 0o700 });
  // A loop device with direct I/O (the image's pages are not cached twice, once per filesystem),
  // then mounted and at once detached: a busy loop device detaches itself (autoclear) when
  // unmounted, so no loop device outlives its mount, even when the daemon is killed.
  // A second try with a new device: a device name is reused the moment it is freed, so a
  // backstop detach elsewhere on the host can hit ours between attach and mount.
  for (let attempt = 0; ; attempt++) {
    const dev = await attachLoop(image);
    const numbers = deviceNumbers(dev);
    try {
      const r = await run(['mount', '-t', 'ext4', '-o', 'discard,nosuid,nodev', dev, mountpoint], { okCodes: attempt === 0 ? [0, 32] : [0] });
      if (r.code !== 0) continue;
    } finally {
      await run(['losetup', '-d', dev], { okCodes: [0, 1] });
    }
    throttleLoop(numbers, writeBytesPerSecond);
    return numbers;
  }
}

/** Lifts the write limit of the loop devices on `file` (before an unmount: its flush need not crawl, and the next user gets none). */
async function unthrottleLoopsOf(file: string): Promise<void> {
  for (const dev of loopsBackedBy(file))
    try {
      unthrottleLoop(deviceNumbers(dev));
    } catch {}
}

/** `losetup --find` races with every other process on the host that attaches one: retry. */
async function attachLoop(image: string): Promise<string> {
  for (let i = 0; ; i++) {
    // Direct I/O needs the state filesystem's support (not tmpfs, say): after a first failure, go without it.
    const r = await run(['losetup', '--find', '--show', ...(i === 0 ? ['--direct-io=on'] : []), image], { okCodes: [0, 1] });
    if (r.code === 0 && r.stdout.trim().startsWith('/dev/loop')) return r.stdout.trim();
    if (i >= 4) throw new HostError('losetup', r.stderr.trim() || 'no loop device', { image });
    await new Promise((res) => setTimeout(res, 20 * (i + 1)));
  }
}

/** Unmounts the session disk (freeing its loop device) and deletes the image. Idempotent. */
export async function unmountSessionDisk(image: string, mountpoint: string): Promise<void> {
  await unthrottleLoopsOf(image);
  if (mountsUnder(mountpoint).includes(mountpoint)) {
    const r = await run(['umount', mountpoint], { okCodes: [0, 32] });
    if (r.code !== 0) await run(['umount', '-l', mountpoint], { okCodes: [0, 32] });
  }
  await releaseLoops(image);
  rmSync(image, { force: true });
}

/**
 * After the unmount the kernel frees the autoclear loop device, but not at once, and its name
 * is handed to the next `losetup --find` the moment it is free. A detach by a name read before
 * the release could so hit another session's device between its attach and its mount (its
 * mount then failed with "can't read superblock": 3 of ~700 cycles, 8 at once). So the release
 * is awaited, and only what then still holds this image is detached (a device pinned by a copy
 * of the mount in another mount namespace is only marked, and goes when that namespace does).
 */
async function releaseLoops(image: string): Promise<void> {
  for (let i = 0; i < 8 && loopsBackedBy(image).length > 0; i++) await sleep(25 * (i + 1));
  await detachLoops(image);
}

const sleep = (ms: number) => new Promise((res) => setTimeout(res, ms));

/** Loop devices whose backing file is `file` or lies under it (a directory), read from sysfs (no process, no device opened). */
export function loopsBackedBy(file: string): string[] {
  const under = file.endsWith('/') ? file : file + '/';
  const found: string[] = [];
  let names: string[];
  try {
    names = readdirSync('/sys/block').filter((n) => /^loop\d+$/.test(n));
  } catch {
    return [];
  }
  for (const name of names) {
    let back: string;
    try {
      // The kernel appends " (deleted)" once the backing file is gone; an unbound device has no file.
      back = readFileSync(`/sys/block/${name}/loop/backing_file`, 'utf8')
        .trim()
        .replace(/ \(deleted\)$/, '');
    } catch {
      continue;
    }
    if (back === file || back.startsWith(under)) found.push(`/dev/${name}`);
  }
  return found;
}

/**
 * Detaches loop devices left on `file` (or under it): the backstop for a mount that was lost.
 * Each device's backing file is read again just before its detach, so a device freed and bound
 * to another file meanwhile (device names are reused at once) is left alone.
 */
export async function detachLoops(file: string): Promise<string[]> {
  const detached: string[] = [];
  for (const dev of loopsBackedBy(file)) {
    if (!loopsBackedBy(file).includes(dev)) continue; // freed meanwhile
    try {
      unthrottleLoop(deviceNumbers(dev));
    } catch {}
    await run(['losetup', '-d', dev], { okCodes: [0, 1] });
    detached.push(dev);
  }
  return detached;
}

/** Host bytes the image really occupies (it is sparse). */
export function allocatedBytes(image: string): number {
  try {
    return statSync(image).blocks * 512;
  } catch {
    return 0;
  }
}

/** Free and total bytes of the filesystem holding `path` (what an unprivileged writer could use). */
export function diskSpace(path: string): { freeBytes: number; totalBytes: number } {
  const s = statfsSync(path);
  return { freeBytes: s.bavail * s.bsize, totalBytes: s.blocks * s.bsize };
}
