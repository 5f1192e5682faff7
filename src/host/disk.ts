import { closeSync, existsSync, ftruncateSync, mkdirSync, openSync, rmSync, statSync, statfsSync } from 'node:fs';
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
  const dev = await attachLoop(image);
  const numbers = deviceNumbers(dev);
  try {
    await run(['mount', '-t', 'ext4', '-o', 'discard,nosuid,nodev', dev, mountpoint]);
  } finally {
    await run(['losetup', '-d', dev], { okCodes: [0, 1] });
  }
  throttleLoop(numbers, writeBytesPerSecond);
  return numbers;
}

/** Lifts the write limit of the loop devices on `file` (before an unmount: its flush need not crawl, and the next user gets none). */
async function unthrottleLoopsOf(file: string): Promise<void> {
  for (const dev of await loopsBackedBy(file))
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
  await detachLoops(image);
  rmSync(image, { force: true });
}

/** Loop devices whose backing file is `file` or lies under it (a directory). */
export async function loopsBackedBy(file: string): Promise<string[]> {
  if (!existsSync('/dev/loop-control')) return [];
  const r = await run(['losetup', '--json', '--list'], { okCodes: [0, 1] });
  if (r.code !== 0 || !r.stdout.trim()) return [];
  const list = (JSON.parse(r.stdout) as { loopdevices?: { name: string; 'back-file'?: string }[] }).loopdevices ?? [];
  const under = file.endsWith('/') ? file : file + '/';
  // losetup appends " (deleted)" once the backing file is gone.
  return list
    .filter((l) => {
      const back = (l['back-file'] ?? '').replace(/ \(deleted\)$/, '');
      return back === file || back.startsWith(under);
    })
    .map((l) => l.name);
}

/** Detaches loop devices left on `file` (or under it): the backstop for a mount that was lost. */
export async function detachLoops(file: string): Promise<string[]> {
  const loops = await loopsBackedBy(file);
  for (const dev of loops) {
    try {
      unthrottleLoop(deviceNumbers(dev));
    } catch {}
    await run(['losetup', '-d', dev], { okCodes: [0, 1] });
  }
  return loops;
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
