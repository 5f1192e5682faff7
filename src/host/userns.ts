import { closeSync, existsSync, openSync, readdirSync, readFileSync, rmSync, writeSync, mkdirSync } from 'node:fs';
import { spawn } from 'node:child_process';
import type { Socket } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { run } from '../common/exec.ts';
import { DrumsError } from '../common/errors.ts';
import type { Instance } from './instance.ts';
import { mountsUnder } from './overlay.ts';

/**
 * A user namespace per session: session *k*'s uids and gids 0..65535 are host
 * ids `base_k`..`base_k`+65535, a range no other live session holds. Ranges are
 * claimed host-wide like subnets (an O_EXCL file `uids-<slot>` in the claims
 * directory naming instance and session), recorded in the session record and
 * swept with it.
 *
 * The namespace is made by `drums-userns ns` (src/host/drums-userns.c, built by
 * setup) as host uid `base_k`, so the kernel charges what the session does
 * (inotify instances and watches, processes, user namespaces) to that uid, not
 * to root; with it comes a network namespace owned by the session's user
 * namespace. The image is seen through an idmapped mount (`drums-userns idmap`).
 */
export const USERNS_SIZE = 65536;
/** How many ranges the claims cover from the base (2^30 + 16384 · 65536 = 2^31: no uid the size of a signed int's sign bit). */
export const USERNS_SLOTS = 16384;

export interface UidRange {
  slot: number;
  base: number;
  size: number;
}

const CLAIM_PREFIX = 'uids-';

/** The helper binary (built by scripts/setup.sh into .runtime/bin). */
export const USERNS_HELPER = fileURLToPath(new URL('../../.runtime/bin/drums-userns', import.meta.url));

/** Why this host cannot run user-namespace sessions, or undefined if it can. */
export function usernsUnavailable(): string | undefined {
  if (!existsSync('/proc/self/ns/user')) return 'the kernel has no user namespaces (CONFIG_USER_NS)';
  try {
    if (Number(readFileSync('/proc/sys/user/max_user_namespaces', 'utf8').trim()) === 0) return 'user.max_user_namespaces is 0';
  } catch {}
  if (!existsSync(USERNS_HELPER)) return `the helper ${USERNS_HELPER} is not built; run scripts/setup.sh`;
  return undefined;
}

/**
 * A session with a user namespace is charged its inotify instances (and
 * watches, processes, nested user namespaces) at the host level to its
 * namespace's owner, its own `base_k`: the kernel's per-uid defaults (128
 * instances) are per session. Sessions without one (DRUMS_USERNS=0, a spec's
 * `userns: false`) all run as host uid 1000 and share that uid's budget: each
 * desktop holds a few instances (D-Bus, Chromium), so the default caps such a
 * host near 40 of them. Returns the host's limit if it is below what they need.
 */
export const HOST_IDS_INOTIFY_INSTANCES = 1024;
export function lowInotifyForHostIds(): number | undefined {
  try {
    const n = Number(readFileSync('/proc/sys/fs/inotify/max_user_instances', 'utf8').trim());
    return n < HOST_IDS_INOTIFY_INSTANCES ? n : undefined;
  } catch {
    return undefined;
  }
}

/** Host id ranges in /etc/subuid and /etc/subgid (other users' containers): Drums must not hand them out. */
export function subidRanges(files = ['/etc/subuid', '/etc/subgid']): { start: number; count: number; file: string }[] {
  const out: { start: number; count: number; file: string }[] = [];
  for (const file of files) {
    let text = '';
    try {
      text = readFileSync(file, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n')) {
      const [, start, count] = line.trim().split(':');
      if (start && count && /^\d+$/.test(start) && /^\d+$/.test(count)) out.push({ start: Number(start), count: Number(count), file });
    }
  }
  return out;
}

/** Refuses a uid base whose ranges overlap /etc/subuid or /etc/subgid, or leave 32 bits. */
export function checkUidBase(base: number): void {
  const top = base + USERNS_SLOTS * USERNS_SIZE;
  if (top > 2 ** 32 - 2)
    throw new DrumsError('invalid_config', `DRUMS_USERNS_UID_BASE ${base}: ${USERNS_SLOTS} ranges of ${USERNS_SIZE} must end below 2^32-1`);
  for (const r of subidRanges()) {
    if (r.start < top && base < r.start + r.count) {
      throw new DrumsError(
        'invalid_config',
        `DRUMS_USERNS_UID_BASE ${base}: Drums' ids ${base}..${top - 1} overlap ${r.file} (${r.start}..${r.start + r.count - 1}); pick a base outside it`,
      );
    }
  }
}

/** Claims a free uid range host-wide (O_EXCL, like subnets), naming its owner for the sweep. */
export function claimUidRange(inst: Instance, uidBase: number, sessionId: string): UidRange {
  mkdirSync(inst.claimsDir, { recursive: true, mode: 0o755 });
  for (let slot = 0; slot < USERNS_SLOTS; slot++) {
    let fd: number;
    try {
      fd = openSync(join(inst.claimsDir, `${CLAIM_PREFIX}${slot}`), 'wx', 0o644);
    } catch {
      continue;
    }
    writeSync(fd, `${inst.name} ${sessionId}\n`);
    closeSync(fd);
    return { slot, base: uidBase + slot * USERNS_SIZE, size: USERNS_SIZE };
  }
  throw new DrumsError('pool_exhausted', `all ${USERNS_SLOTS} uid ranges are held by live sessions; destroy one first`);
}

export function releaseUidRange(inst: Instance, r: UidRange): void {
  rmSync(join(inst.claimsDir, `${CLAIM_PREFIX}${r.slot}`), { force: true });
}

/** Uid ranges held by live sessions of any instance (for the audit and tests): slot → "instance session". */
export function listUidClaims(claimsDir: string): Map<number, string> {
  const out = new Map<number, string>();
  if (!existsSync(claimsDir)) return out;
  for (const f of readdirSync(claimsDir)) {
    if (!f.startsWith(CLAIM_PREFIX)) continue;
    try {
      out.set(Number(f.slice(CLAIM_PREFIX.length)), readFileSync(join(claimsDir, f), 'utf8').trim());
    } catch {}
  }
  return out;
}

/**
 * Makes the session's user namespace (owned by host uid `r.base`) and a network
 * namespace owned by it, pinned at `usernsPin` and `/run/netns/<netns>`.
 */
export async function createUserns(r: UidRange, usernsPin: string, netns: string): Promise<void> {
  await run([USERNS_HELPER, 'ns', String(r.base), String(r.size), usernsPin, `/run/netns/${netns}`]);
}

/** The image, read-only and seen through the session's id mapping, at `target` (an existing empty directory). */
export async function mountIdmapped(usernsPin: string, source: string, target: string): Promise<void> {
  await run([USERNS_HELPER, 'idmap', usernsPin, source, target]);
}

/** Re-owns every file under `dir` from one range to another (a disk fork into a session with another range). */
export async function shiftOwnership(dir: string, from: number, to: number, size = USERNS_SIZE): Promise<void> {
  if (from === to) return;
  await run([USERNS_HELPER, 'shift', dir, String(from), String(to), String(size)], { timeoutMs: 300_000 });
}

/** Unmounts a namespace pin or idmapped mount (lazily if busy) and removes a pin file. Idempotent. */
export async function unpin(path: string, opts: { removeFile?: boolean } = {}): Promise<void> {
  if (mountsUnder(path).includes(path)) {
    const r = await run(['umount', path], { okCodes: [0, 32] });
    if (r.code !== 0) await run(['umount', '-l', path], { okCodes: [0, 32] });
  }
  if (opts.removeFile) rmSync(path, { force: true });
}

/**
 * A unix socket at `dir/name` connected as host uid/gid `uid`/`gid` (the
 * session's mapped desktop user), for the daemon's own connections to servers
 * inside a session's user namespace that authenticate their peer by uid
 * (D-Bus EXTERNAL, AT-SPI). Host root is unmapped there (it shows as the
 * overflow uid), so such a server refuses the daemon's own connect; this one
 * has exactly the desktop user's standing, and nothing in the session gains
 * anything. `name` is resolved as `uid` (a symlink planted by the session
 * reaches only what that uid may). The helper connects and hands the
 * descriptor back over a Node IPC channel.
 */
export function connectAs(uid: number, gid: number, dir: string, name: string, timeoutMs = 5000): Promise<Socket> {
  return new Promise<Socket>((resolve, reject) => {
    const child = spawn(USERNS_HELPER, ['connect', String(uid), String(gid), dir, name], { stdio: ['ignore', 'ignore', 'pipe', 'ipc'] });
    let stderr = '';
    let done = false;
    const finish = (err: Error | undefined, sock?: Socket) => {
      if (done) {
        sock?.destroy();
        return;
      }
      done = true;
      clearTimeout(timer);
      if (err) reject(err);
      else resolve(sock!);
    };
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      finish(new Error(`no socket from drums-userns connect within ${timeoutMs} ms`));
    }, timeoutMs);
    child.stderr!.on('data', (d: Buffer) => {
      if (stderr.length < 2000) stderr += d.toString();
    });
    child.on('message', (_msg, handle) => {
      if (handle && typeof (handle as Socket).write === 'function') finish(undefined, handle as Socket);
    });
    child.on('error', (e) => finish(e));
    // The handle is delivered before the channel reports its end; the error is final once both the helper and its channel are gone.
    let exitCode: number | null | undefined;
    let disconnected = false;
    const settle = () => {
      if (exitCode !== undefined && disconnected)
        setImmediate(() => finish(new Error(stderr.trim() || `drums-userns connect exited with ${exitCode} and sent no socket`)));
    };
    child.on('exit', (code) => {
      exitCode = code;
      settle();
    });
    child.on('disconnect', () => {
      disconnected = true;
      settle();
    });
  });
}
