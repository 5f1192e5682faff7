/**
 * The daemon's hands in trees that a session (or a local host user) can write.
 *
 * The daemon runs as host root. A path through a session's files (its writable layer, its
 * /run/drums and /tmp/.X11-unix, copies of them) can hold a symlink the session planted at any
 * component: `~/.config/chromium -> /some/host/dir`, `etc -> /etc`. A plain `rmSync`,
 * `readlinkSync` or `copyFileSync` through such a path acts on the host file the link names.
 * So, like `pinSocket` (src/host/peer.ts):
 *
 * - One file beneath a trusted directory is reached one component at a time, each opened
 *   `O_PATH | O_NOFOLLOW` relative to the last (through `/proc/self/fd/<n>/<name>`, Node's
 *   stand-in for openat), and the operation runs on the last directory's descriptor: a symlink
 *   anywhere below the trusted root stops it (`openDirBeneath`, `unlinkBeneath`,
 *   `relinkBeneath`).
 * - Whole trees are copied and removed by coreutils in a child process (`cp -a`, `rm -rf`),
 *   which never follow a link inside the tree, keep holes as holes (`--sparse=always`: a
 *   1 TiB sparse file costs nothing), stay on one filesystem, run off the event loop and are
 *   killed at a deadline (`copyTree`, `removeTree`). A copy goes into a fresh directory that
 *   only root can reach, so nothing can plant a link in the destination while it runs.
 * - The directories the daemon keeps its state in must be root's alone (`checkRootOnly`).
 */
import { closeSync, constants, fstatSync, lchownSync, lstatSync, openSync, readlinkSync, symlinkSync, unlinkSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { run } from '../common/exec.ts';

/** O_PATH: a descriptor naming a file without opening it (Linux; not in Node's constants). */
const O_PATH = 0o10000000;

/** The components of a plain relative path (no '.', '..', empty or absolute); throws otherwise. */
function components(rel: string): string[] {
  const parts = rel.split('/').filter(Boolean);
  if (rel.startsWith('/') || parts.some((p) => p === '.' || p === '..')) throw new Error(`'${rel}' is not a plain relative path`);
  return parts;
}

/** A path naming `name` in the directory open as `fd` (the kernel resolves `/proc/self/fd/<fd>` to that directory itself). */
export const fdPath = (fd: number, name?: string) => (name === undefined ? `/proc/self/fd/${fd}` : `/proc/self/fd/${fd}/${name}`);

/**
 * A descriptor (O_PATH) of the directory `root/rel`, opened one component at a time without
 * following a symlink at any component below `root` (which the caller trusts). Throws an error
 * with `code` 'ELOOP' when a component is a symlink, 'ENOTDIR' when it is not a directory, and
 * 'ENOENT' when it is missing. The caller closes it.
 */
export function openDirBeneath(root: string, rel: string): number {
  let fd = openSync(root, O_PATH | constants.O_DIRECTORY);
  try {
    for (const part of components(rel)) {
      // O_NOFOLLOW | O_PATH opens a symlink itself (no error): check what was opened.
      const next = openSync(fdPath(fd, part), O_PATH | constants.O_NOFOLLOW);
      closeSync(fd);
      fd = next;
      const st = fstatSync(fd);
      if (!st.isDirectory()) {
        const e = new Error(`${join(root, rel)}: '${part}' is ${st.isSymbolicLink() ? 'a symlink' : 'not a directory'}`) as NodeJS.ErrnoException;
        e.code = st.isSymbolicLink() ? 'ELOOP' : 'ENOTDIR';
        throw e;
      }
    }
    return fd;
  } catch (e) {
    closeSync(fd);
    throw e;
  }
}

/** `fn` with the directory `root/rel` open (openDirBeneath), closed after. */
export function withDirBeneath<T>(root: string, rel: string, fn: (fd: number) => T): T {
  const fd = openDirBeneath(root, rel);
  try {
    return fn(fd);
  } finally {
    closeSync(fd);
  }
}

export type UnlinkResult = 'removed' | 'absent' | 'refused';

/**
 * Removes the file (or symlink, socket...) `root/rel` without following a symlink at any
 * component: a link on the way, or a directory at the end, leaves everything as it is
 * ('refused', with why in `why`). 'absent' when a component is missing.
 */
export function unlinkBeneath(root: string, rel: string): { result: UnlinkResult; why?: string } {
  const parts = components(rel);
  const name = parts.pop();
  if (!name) throw new Error(`'${rel}' names no file`);
  try {
    return withDirBeneath(root, parts.join('/'), (fd) => {
      const st = lstatSync(fdPath(fd, name), { throwIfNoEntry: false });
      if (!st) return { result: 'absent' as const };
      if (st.isDirectory()) return { result: 'refused' as const, why: `${join(root, rel)} is a directory` };
      // unlink never follows its last component; the directory is the one opened above.
      unlinkSync(fdPath(fd, name));
      return { result: 'removed' as const };
    });
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return { result: 'absent' };
    if (code === 'ELOOP' || code === 'ENOTDIR') return { result: 'refused', why: (e as Error).message };
    throw e;
  }
}

/**
 * Rewrites the symlink `root/rel` (reached as in unlinkBeneath) to `map(old target)`, owned by
 * uid/gid; nothing happens (false) when it is not a symlink, a component on the way is one, or
 * `map` answers undefined.
 */
export function relinkBeneath(root: string, rel: string, map: (target: string) => string | undefined, uid: number, gid: number): boolean {
  const parts = components(rel);
  const name = parts.pop();
  if (!name) throw new Error(`'${rel}' names no file`);
  try {
    return withDirBeneath(root, parts.join('/'), (fd) => {
      const p = fdPath(fd, name);
      const st = lstatSync(p, { throwIfNoEntry: false });
      if (!st?.isSymbolicLink()) return false;
      const target = map(readlinkSync(p));
      if (target === undefined) return false;
      unlinkSync(p);
      symlinkSync(target, p);
      lchownSync(p, uid, gid);
      return true;
    });
  } catch (e) {
    if (['ENOENT', 'ELOOP', 'ENOTDIR'].includes((e as NodeJS.ErrnoException).code ?? '')) return false;
    throw e;
  }
}

/**
 * At most `maxBytes` of the file at `path` (never through a symlink at its last component, never
 * blocking on a FIFO), read off the event loop; `truncated` when there was more. For files whose
 * size a session controls, /proc files of its processes among them (a process's maps grows with
 * its mappings).
 */
export async function readCapped(path: string, maxBytes: number): Promise<{ data: Buffer; truncated: boolean }> {
  const fh = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  try {
    const buf = Buffer.alloc(maxBytes + 1);
    let n = 0;
    for (;;) {
      const { bytesRead } = await fh.read(buf, n, buf.length - n);
      if (bytesRead === 0) break;
      n += bytesRead;
      if (n > maxBytes) return { data: buf.subarray(0, maxBytes), truncated: true };
    }
    return { data: buf.subarray(0, n), truncated: false };
  } finally {
    await fh.close();
  }
}

/** How long a tree copy or removal may take before its child is killed. */
export const TREE_TIMEOUT_MS = 300_000;

/**
 * Copies the tree `from` to `to` (which must not exist yet; its parent must be a directory only
 * root can write) in a child process: files, directories, symlinks (as links, never followed),
 * sockets, FIFOs, modes, owners, timestamps and hard links; holes stay holes; the copy stays on
 * `from`'s filesystem. `reflink`: share blocks with the source where the filesystem can.
 */
export async function copyTree(from: string, to: string, opts: { timeoutMs?: number; reflink?: boolean } = {}): Promise<void> {
  await run(
    [
      'cp',
      '-a',
      '--no-dereference',
      '--sparse=always',
      ...(opts.reflink ? ['--reflink=auto'] : []),
      '--one-file-system',
      '--no-target-directory',
      '--',
      from,
      to,
    ],
    { timeoutMs: opts.timeoutMs ?? TREE_TIMEOUT_MS },
  );
}

/** Removes the sockets in the tree `dir` (a copy only root can reach), never following a link or crossing a mount. */
export async function removeSockets(dir: string, timeoutMs = 60_000): Promise<void> {
  await run(['find', dir, '-xdev', '-type', 's', '-delete'], { timeoutMs });
}

/**
 * Removes the tree at `path` (gone already is fine) in a child process: `rm -rf` never follows
 * a symlink inside it and, with --one-file-system, leaves alone anything mounted below it.
 */
export async function removeTree(path: string, timeoutMs = TREE_TIMEOUT_MS): Promise<void> {
  await run(['rm', '-rf', '--one-file-system', '--', path], { timeoutMs });
}

/**
 * Throws unless `dir` and every directory above it are root's alone: owned by root, and
 * writable by nobody else (an ancestor may be world-writable if sticky, like /tmp: no other
 * user can then rename or replace root's entries in it). The daemon keeps its sessions, their
 * bundles and the CRIU wrapper there; a directory another user could write would let that user
 * swap any of them.
 */
export function checkRootOnly(dir: string): void {
  let p = resolve(dir);
  for (let first = true; ; first = false) {
    const st = lstatSync(p);
    if (st.isSymbolicLink()) throw new Error(`${p} is a symlink (give the real path)`);
    if (st.uid !== 0) throw new Error(`${p} is owned by uid ${st.uid}, not root`);
    const sticky = (st.mode & 0o1000) !== 0;
    if (st.mode & 0o022 && (first || !sticky)) throw new Error(`${p} is writable by group or others (mode ${(st.mode & 0o7777).toString(8)})`);
    if (p === '/') return;
    p = dirname(p);
  }
}
