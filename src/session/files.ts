import { DrumsError, ValidationError } from '../common/errors.ts';
import { KILLED_EXIT, type RunResult, type Target, runInSession } from './exec.ts';

export type { Target } from './exec.ts';

/**
 * Files of a session, read and written by small commands run INSIDE the
 * session through the OCI runtime (`runc exec`): the path is one argv
 * element of a fixed command (never parsed by a shell), so symlinks, `..` and
 * /proc/self/root resolve in the container's own mount namespace and root.
 * Writes land in the session's overlay upper layer; the image stays
 * read-only. As the desktop user by default; `root` = root-in-session (still
 * confined: ROOT_CAPS only, no_new_privs, seccomp).
 */

export const MAX_PATH_LENGTH = 4096;
export const MAX_READ_BYTES = 64 * 1024 * 1024;
const TIMEOUT_MS = 30_000;

/** A small fixed command for a file operation, as the desktop user or root-in-session; output capped, killed past the cap. */
async function runFileOp(t: Target, argv: string[], o: { root: boolean; stdin?: Buffer; maxOutputBytes: number }): Promise<RunResult & { stderrText: string }> {
  const r = await runInSession(t, {
    argv,
    root: o.root,
    stdin: o.stdin ?? Buffer.alloc(0),
    timeoutMs: TIMEOUT_MS,
    maxOutputBytes: o.maxOutputBytes,
    killOnOverflow: true,
  });
  return { ...r, stderrText: r.stderr.toString('utf8') };
}

/** A path as given by a client: absolute, no NUL, bounded. */
export function validatePath(p: unknown, field = 'path'): string {
  if (typeof p !== 'string' || p === '') throw new ValidationError(field, 'is required (an absolute path inside the session)', 'invalid_path');
  if (!p.startsWith('/')) throw new ValidationError(field, 'must be an absolute path', 'invalid_path');
  if (p.includes('\0')) throw new ValidationError(field, 'must not contain NUL', 'invalid_path');
  if (Buffer.byteLength(p) > MAX_PATH_LENGTH) throw new ValidationError(field, `must be at most ${MAX_PATH_LENGTH} bytes`, 'invalid_path');
  return p;
}

export function validateMode(m: unknown): string {
  if (m === undefined || m === null || m === '') return '0644';
  if (typeof m !== 'string' || !/^0?[0-7]{3,4}$/.test(m)) throw new ValidationError('mode', 'must be octal like 0644 or 755', 'invalid_request');
  return m;
}

/** Maps the stderr of coreutils/findutils run in C.UTF-8 to a coded error. */
function fileError(path: string, r: RunResult & { stderrText: string }, op: string): DrumsError {
  const e = r.stderrText;
  const d = { details: { path, op } };
  if (/No such file or directory|Directory nonexistent/.test(e))
    return new DrumsError('file_not_found', `${path}: no such file or directory in the session`, d);
  if (/Permission denied|Operation not permitted/.test(e))
    return new DrumsError('file_forbidden', `${path}: permission denied (${op}); use root=1 for root-in-session`, d);
  if (/Read-only file system/.test(e)) return new DrumsError('file_forbidden', `${path}: read-only file system (${op})`, d);
  if (/Is a directory/.test(e)) return new DrumsError('is_a_directory', `${path}: is a directory`, d);
  if (/Not a directory/.test(e)) return new DrumsError('not_a_directory', `${path}: not a directory (or a parent is not)`, d);
  if (/Directory not empty/.test(e)) return new DrumsError('directory_not_empty', `${path}: directory not empty (pass recursive=1)`, d);
  if (/File name too long/.test(e)) return new DrumsError('invalid_path', `${path}: file name too long`, d);
  if (/No space left|Disk quota/.test(e)) return new DrumsError('no_space', `${path}: no space left in the session`, d);
  if (/Too many levels of symbolic links/.test(e)) return new DrumsError('invalid_path', `${path}: too many levels of symbolic links`, d);
  if (r.exitCode === 124 || r.exitCode === KILLED_EXIT) return new DrumsError('timeout', `${op} ${path}: timed out in the session`, d);
  return new DrumsError('file_error', `${op} ${path} failed in the session (exit ${r.exitCode}): ${e.trim().slice(0, 500)}`, d);
}

export async function readFile(t: Target, path: string, root: boolean): Promise<Buffer> {
  // Refuse non-regular files (a FIFO or /dev/zero would block or never end).
  const st = await statFile(t, path, root);
  if (st.type === 'directory') throw new DrumsError('is_a_directory', `${path}: is a directory; use /files/list`, { details: { path } });
  if (st.type !== 'file') throw new DrumsError('not_a_regular_file', `${path}: is a ${st.type}, not a regular file`, { details: { path } });
  if (st.size > MAX_READ_BYTES)
    throw new DrumsError('file_too_large', `${path}: ${st.size} bytes is over the ${MAX_READ_BYTES}-byte read limit`, { details: { path } });
  const r = await runFileOp(t, ['/bin/cat', '--', path], { root, maxOutputBytes: MAX_READ_BYTES });
  if (r.truncated) throw new DrumsError('file_too_large', `${path}: over the ${MAX_READ_BYTES}-byte read limit`, { details: { path } });
  if (r.exitCode !== 0) throw fileError(path, r, 'read');
  return r.stdout;
}

// Fixed script; the path and mode arrive as positional parameters and are never parsed as shell code.
const WRITE_SCRIPT = 'set -e; d=$(dirname -- "$1"); mkdir -p -- "$d"; cat > "$1"; chmod -- "$2" "$1"';

export async function writeFile(t: Target, path: string, data: Buffer, mode: string, root: boolean): Promise<void> {
  if (path.endsWith('/')) throw new DrumsError('is_a_directory', `${path}: names a directory`, { details: { path } });
  const r = await runFileOp(t, ['/bin/sh', '-c', WRITE_SCRIPT, 'drums-write', path, mode], { root, stdin: data, maxOutputBytes: 4096 });
  if (r.exitCode !== 0) throw fileError(path, r, 'write');
}

export interface FileStat {
  path: string;
  name: string;
  type: 'file' | 'directory' | 'symlink' | 'fifo' | 'socket' | 'char' | 'block' | 'unknown';
  size: number;
  mode: string;
  uid: number;
  gid: number;
  mtime: string;
  target?: string;
}

const TYPES: Record<string, FileStat['type']> = { f: 'file', d: 'directory', l: 'symlink', p: 'fifo', s: 'socket', c: 'char', b: 'block' };
// find -printf: type, size, mode, uid, gid, mtime (epoch), symlink target, path; each field ends with a NUL (8 per record).
const FMT = '%y\\0%s\\0%m\\0%U\\0%G\\0%T@\\0%l\\0%p\\0';

function parseFind(out: Buffer): FileStat[] {
  const fields = out.toString('utf8').split('\0');
  const recs: string[][] = [];
  for (let i = 0; i + 8 <= fields.length; i += 8) recs.push(fields.slice(i, i + 8));
  return recs.map((rec) => {
    const [y, s, m, u, g, t, l, p] = rec;
    const path = p ?? '';
    return {
      path,
      name: path === '/' ? '/' : (path.replace(/\/+$/, '').split('/').pop() ?? path),
      type: TYPES[y ?? ''] ?? 'unknown',
      size: Number(s),
      mode: (m ?? '').padStart(4, '0'),
      uid: Number(u),
      gid: Number(g),
      mtime: new Date(Number(t) * 1000).toISOString(),
      ...(y === 'l' ? { target: l } : {}),
    };
  });
}

/** lstat-like by default; `follow` stats the target of a symlink. */
export async function statFile(t: Target, path: string, root: boolean, follow = true): Promise<FileStat> {
  const r = await runFileOp(t, ['/usr/bin/find', ...(follow ? ['-H'] : ['-P']), path, '-maxdepth', '0', '-printf', FMT], { root, maxOutputBytes: 1 << 16 });
  if (r.exitCode !== 0) throw fileError(path, r, 'stat');
  const [st] = parseFind(r.stdout);
  if (!st) throw fileError(path, r, 'stat');
  st.path = path;
  // find -H falls back to the link itself when its target does not exist: a dangling link.
  if (follow && st.type === 'symlink')
    throw new DrumsError('file_not_found', `${path}: dangling symbolic link (its target does not exist in the session)`, {
      details: { path, target: st.target },
    });
  return st;
}

export const MAX_LIST_ENTRIES = 10_000;

export async function listDir(t: Target, path: string, root: boolean): Promise<{ entries: FileStat[]; truncated: boolean }> {
  const st = await statFile(t, path, root);
  if (st.type !== 'directory') throw new DrumsError('not_a_directory', `${path}: not a directory`, { details: { path } });
  const r = await runFileOp(t, ['/usr/bin/find', '-H', path, '-mindepth', '1', '-maxdepth', '1', '-printf', FMT], { root, maxOutputBytes: 8 << 20 });
  if (r.exitCode !== 0 && r.stdout.length === 0) throw fileError(path, r, 'list');
  let entries = parseFind(r.stdout).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const truncated = r.truncated || entries.length > MAX_LIST_ENTRIES;
  if (entries.length > MAX_LIST_ENTRIES) entries = entries.slice(0, MAX_LIST_ENTRIES);
  return { entries, truncated };
}

export async function deleteFile(t: Target, path: string, root: boolean, recursive: boolean): Promise<void> {
  if (/^\/+$/.test(path)) throw new ValidationError('path', 'refusing to delete /', 'invalid_path');
  const st = await statFile(t, path, root, false);
  const argv =
    st.type === 'directory' ? (recursive ? ['/bin/rm', '-rf', '--one-file-system', '--', path] : ['/bin/rmdir', '--', path]) : ['/bin/rm', '-f', '--', path];
  const r = await runFileOp(t, argv, { root, maxOutputBytes: 4096 });
  if (r.exitCode !== 0) throw fileError(path, r, 'delete');
}
