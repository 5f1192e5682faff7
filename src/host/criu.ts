import { closeSync, constants, existsSync, fstatSync, openSync, readFileSync, readSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { run } from '../common/exec.ts';

/**
 * CRIU from a tools rootfs (the `criu-tools` image: Debian trixie with sid's CRIU 4.2).
 *
 * Debian 12's CRIU 3.17 cannot dump on kernels >= 6.13 (their vDSO layout
 * changed); CRIU >= 4.1 can, and 4.2 also dumps IP sockets on kernels >= 6.16
 * (which refuse SO_PASSCRED on them), but it is built against a newer libc. So the
 * daemon never installs it on the host: it runs the tools rootfs' own binary
 * through that rootfs' dynamic loader and libraries, from a small wrapper
 * script that runc drives as its `--criu` (runc speaks to it over the swrk RPC).
 * CRIU's own helpers (tar for tmpfs contents, ip) are the host's, from PATH.
 */
export interface Criu {
  /** The wrapper runc is given as `--criu`. */
  path: string;
  /** `criu --version`'s version, e.g. "4.1.1". */
  version: string;
  /** The tools rootfs it runs from. */
  rootfs: string;
}

const LOADER = 'usr/lib64/ld-linux-x86-64.so.2';
const LIB_DIRS = ['usr/lib/x86_64-linux-gnu', 'usr/lib'];
const BINARY = 'usr/sbin/criu';

/**
 * CRIU's settings for runc's dumps and restores (read through CRIU_CONFIG_FILE; runc's
 * RPC has no field for them):
 * - `network-lock skip`: the session's netns is its own and the source is frozen by the
 *   daemon; CRIU's iptables lock needs iptables, which this host does not use.
 * - `ghost-limit`: Chromium keeps 4 MiB deleted-but-open files (BrowserMetrics).
 * - `irmap-scan-path`: overlayfs file handles can't be opened, so CRIU finds the
 *   directories that the session's programs watch with inotify by scanning paths: each
 *   is checked itself first, then (only if it is not the watched one) walked. The fixed
 *   ones are Chromium's and the buses'; the caller adds the desktop user's (`scanPaths`:
 *   GTK's recent files and GIO's monitors in LibreOffice, GIMP and Thunderbird watch
 *   ~/.local/share and ~/.config). Without a path for a watch the dump is refused
 *   ("fsnotify: Can't dump that handle"). A scan path's last component is never followed
 *   (CRIU lstats it: a symlink there is not walked); only the components before it are,
 *   so the session-writable part of each path is its last component alone.
 * A dump adds `unprivileged`: it runs with the sessions' uid (see wrapperScript), which
 * CRIU allows only in that mode (it keeps CAP_CHECKPOINT_RESTORE and the others).
 */
export const CRIU_SCAN_PATHS = ['/usr/share/dbus-1', '/usr/local/share', '/usr/share/applications', '/usr/share/zoneinfo'];
export function criuConfig(scanPaths: string[] = []): string {
  const paths = [...CRIU_SCAN_PATHS.slice(0, 3), ...scanPaths, ...CRIU_SCAN_PATHS.slice(3)];
  return ['network-lock skip', 'ghost-limit 64M', ...paths.map((p) => `irmap-scan-path ${p}`), ''].join('\n');
}
/** The environment variable (passed through runc) that tells the wrapper a call is a dump. */
export const DUMP_ENV = 'DRUMS_CRIU_DUMP';
/**
 * The environment variable (passed through runc) with the `cgroup.procs` files (':'-separated)
 * of the cgroup a restore restores into: the wrapper joins them, then starts CRIU in a new
 * cgroup namespace rooted there (see wrapperScript).
 */
export const CGROUP_ENV = 'DRUMS_CRIU_CGROUP_PROCS';
/**
 * The environment variables (passed through runc) with the host uid and gid a dump runs CRIU as,
 * when not the wrapper's default: a session in its own user namespace runs its processes as its
 * mapped desktop uid (src/host/userns.ts).
 */
export const DUMP_UID_ENV = 'DRUMS_CRIU_UID';
export const DUMP_GID_ENV = 'DRUMS_CRIU_GID';
/**
 * The environment variable (passed through runc) with the pin of the user namespace a restore runs
 * CRIU in, as its root, in a mount namespace of its own: the copy's. CRIU then restores the
 * session's ids (recorded as the session sees them) into the copy's range, and may enter the
 * copy's network namespace, which that user namespace owns (see adoptTaskUserns).
 */
export const USERNS_ENV = 'DRUMS_CRIU_USERNS';

/** Capabilities of this process (CapEff), by name, for the wrapper to keep across its uid change. */
export function effectiveCaps(): string[] {
  const hex = /CapEff:\s*([0-9a-f]+)/.exec(readFileSync('/proc/self/status', 'utf8'))?.[1] ?? '0';
  const bits = BigInt(`0x${hex}`);
  const last = Number(readFileSync('/proc/sys/kernel/cap_last_cap', 'utf8').trim());
  const out: string[] = [];
  for (let i = 0; i <= last; i++) if ((bits >> BigInt(i)) & 1n && CAP_NAMES[i]) out.push(CAP_NAMES[i]!);
  return out;
}

const CAP_NAMES = [
  'chown',
  'dac_override',
  'dac_read_search',
  'fowner',
  'fsetid',
  'kill',
  'setgid',
  'setuid',
  'setpcap',
  'linux_immutable',
  'net_bind_service',
  'net_broadcast',
  'net_admin',
  'net_raw',
  'ipc_lock',
  'ipc_owner',
  'sys_module',
  'sys_rawio',
  'sys_chroot',
  'sys_ptrace',
  'sys_pacct',
  'sys_admin',
  'sys_boot',
  'sys_nice',
  'sys_resource',
  'sys_time',
  'sys_tty_config',
  'mknod',
  'lease',
  'audit_write',
  'audit_control',
  'setfcap',
  'mac_override',
  'mac_admin',
  'syslog',
  'wake_alarm',
  'block_suspend',
  'audit_read',
  'perfmon',
  'bpf',
  'checkpoint_restore',
];

/**
 * The wrapper's text for a tools rootfs. CRIU reads each process's rlimits with prlimit(),
 * which the kernel allows a caller of another uid only with CAP_SYS_RESOURCE; on hosts
 * (this one) whose bounding set lacks it, a dump of the sessions' processes, which all run
 * as the desktop user, still works when CRIU runs as that uid with the caller's other
 * capabilities kept (setpriv, ambient capabilities). A restore runs as root (its restorer
 * sets the tasks' credentials, which an unprivileged CRIU can't). runc passes its
 * environment on: DUMP_ENV=1 marks a dump. Every path is quoted.
 *
 * A restore with CGROUP_ENV set first moves the wrapper into those cgroups and then runs CRIU
 * under `unshare --cgroup`: a dump made in `unprivileged` mode records no cgroups, so CRIU
 * restores the tasks into its own cgroup namespace, and the restored session would otherwise
 * share the host's (seeing every session's cgroup under /sys/fs/cgroup). runc moves CRIU into
 * the container's cgroup only after it has started, too late for the namespace's root, so the
 * wrapper joins it itself (the same cgroups; runc's later move is a no-op). runc's earlier
 * version checks run the wrapper with the same environment; joining and unsharing is
 * harmless for them.
 */
export function wrapperScript(rootfs: string, configFile: string, uid: number, gid: number, caps: string[]): string {
  const q = (p: string) => `'${p.replaceAll("'", `'\\''`)}'`;
  const capList = caps.map((c) => `+${c}`).join(',');
  const criu = `${q(join(rootfs, LOADER))} --library-path ${q(LIB_DIRS.map((d) => join(rootfs, d)).join(':'))} ${q(join(rootfs, BINARY))}`;
  return [
    '#!/bin/sh',
    '# Written by the Drums daemon: runs CRIU 4.x from its tools rootfs (src/host/criu.ts).',
    `if [ "\${${DUMP_ENV}:-}" = 1 ]; then`,
    `  CRIU_CONFIG_FILE=${q(`${configFile}.dump`)}`,
    '  export CRIU_CONFIG_FILE',
    `  u=\${${DUMP_UID_ENV}:-${uid}}`,
    `  g=\${${DUMP_GID_ENV}:-${gid}}`,
    '  case "$u$g" in *[!0-9]*) echo "criu wrapper: bad uid or gid" >&2; exit 1;; esac',
    `  exec setpriv --reuid "$u" --regid "$g" --clear-groups --inh-caps ${capList} --ambient-caps ${capList} ${criu} "$@"`,
    'fi',
    `CRIU_CONFIG_FILE=${q(configFile)}`,
    'export CRIU_CONFIG_FILE',
    `if [ -n "\${${CGROUP_ENV}:-}" ]; then`,
    "  IFS=':'",
    `  for f in \${${CGROUP_ENV}}; do echo $$ > "$f" || exit 1; done`,
    '  unset IFS',
    `  if [ -n "\${${USERNS_ENV}:-}" ]; then exec nsenter "--user=\${${USERNS_ENV}}" unshare --mount --uts --cgroup ${criu} "$@"; fi`,
    `  exec unshare --cgroup ${criu} "$@"`,
    'fi',
    `exec ${criu} "$@"`,
    '',
  ].join('\n');
}

/**
 * Writes (atomically) the wrapper at `wrapperPath` (and its CRIU config beside it) for
 * `rootfs`, running CRIU as `uid`:`gid`, and checks it runs and is CRIU >= 4.1.
 */
export async function installCriu(rootfs: string, wrapperPath: string, uid: number, gid: number, scanPaths: string[] = []): Promise<Criu> {
  for (const f of [LOADER, BINARY]) if (!existsSync(join(rootfs, f))) throw new Error(`the tools rootfs ${rootfs} has no ${f}`);
  const configFile = `${wrapperPath}.conf`;
  writeAtomic(configFile, criuConfig(scanPaths), 0o644);
  writeAtomic(`${configFile}.dump`, `unprivileged\n${criuConfig(scanPaths)}`, 0o644);
  writeAtomic(wrapperPath, wrapperScript(rootfs, configFile, uid, gid, effectiveCaps()), 0o755);
  const r = await run([wrapperPath, '--version'], { timeoutMs: 30_000 });
  const version = /Version:\s*([0-9][0-9.]*)/.exec(r.stdout)?.[1];
  if (!version) throw new Error(`criu --version printed no version: ${r.stdout.trim()}`);
  const [maj = 0, min = 0] = version.split('.').map(Number);
  if (maj < 4 || (maj === 4 && min < 1)) throw new Error(`CRIU ${version} is too old for this kernel (needs >= 4.1)`);
  return { path: wrapperPath, version, rootfs };
}

function writeAtomic(path: string, text: string, mode: number): void {
  let current: string | undefined;
  try {
    current = readFileSync(path, 'utf8');
  } catch {}
  if (current === text) return;
  writeFileSync(`${path}.new`, text, { mode });
  renameSync(`${path}.new`, path);
}

/** The most of a CRIU log read for an error message: its end, where CRIU's errors are. */
export const LOG_TAIL_BYTES = 256 * 1024;

/**
 * The last lines of a CRIU log (dump.log / restore.log in runc's work path), for error messages: its
 * error lines if any, else its last lines. Only the last LOG_TAIL_BYTES are read (the log grows with
 * the session's processes and files), never through a symlink and never blocking on a FIFO.
 */
export function criuLogTail(workPath: string, file: string, lines = 8): string {
  let fd: number | undefined;
  try {
    fd = openSync(join(workPath, file), constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
    const st = fstatSync(fd);
    if (!st.isFile()) return '';
    const buf = Buffer.alloc(Math.min(st.size, LOG_TAIL_BYTES));
    const n = readSync(fd, buf, 0, buf.length, st.size - buf.length);
    const all = buf.subarray(0, n).toString('utf8').trim().split('\n');
    // A tail cut mid-line starts with a partial line: dropped.
    if (st.size > buf.length) all.shift();
    const errs = all.filter((l) => /Error \(|Unsupported|not supported/.test(l));
    return (errs.length ? errs.slice(-lines) : all.slice(-lines)).join(' | ');
  } catch {
    return '';
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

/** One protobuf field as it is on the wire: its number, wire type and the bytes of its value (a varint's value in `varint`). */
interface PbField {
  num: number;
  wire: number;
  raw: Buffer;
  varint?: bigint;
}

function readVarint(b: Buffer, at: number): [bigint, number] {
  let v = 0n;
  let shift = 0n;
  for (;;) {
    if (at >= b.length) throw new Error('truncated varint in a CRIU image');
    const c = b[at++]!;
    v |= BigInt(c & 0x7f) << shift;
    if (!(c & 0x80)) return [v, at];
    shift += 7n;
  }
}

function writeVarint(v: bigint): Buffer {
  const out: number[] = [];
  do {
    let c = Number(v & 0x7fn);
    v >>= 7n;
    if (v) c |= 0x80;
    out.push(c);
  } while (v);
  return Buffer.from(out);
}

function parsePb(b: Buffer): PbField[] {
  const out: PbField[] = [];
  for (let at = 0; at < b.length; ) {
    const [key, a1] = readVarint(b, at);
    const num = Number(key >> 3n);
    const wire = Number(key & 7n);
    at = a1;
    if (wire === 0) {
      const [v, a2] = readVarint(b, at);
      out.push({ num, wire, raw: b.subarray(at, a2), varint: v });
      at = a2;
    } else if (wire === 2) {
      const [len, a2] = readVarint(b, at);
      out.push({ num, wire, raw: b.subarray(a2, a2 + Number(len)) });
      at = a2 + Number(len);
    } else if (wire === 1 || wire === 5) {
      const n = wire === 1 ? 8 : 4;
      out.push({ num, wire, raw: b.subarray(at, at + n) });
      at += n;
    } else throw new Error(`unknown protobuf wire type ${wire} in a CRIU image`);
  }
  return out;
}

function encodePb(fields: PbField[]): Buffer {
  const parts: Buffer[] = [];
  for (const f of fields) {
    parts.push(writeVarint((BigInt(f.num) << 3n) | BigInt(f.wire)));
    if (f.wire === 0) parts.push(writeVarint(f.varint!));
    else if (f.wire === 2) parts.push(writeVarint(BigInt(f.raw.length)), f.raw);
    else parts.push(f.raw);
  }
  return Buffer.concat(parts);
}

/** The first entry of a CRIU image file: after its magic (one u32 for the inventory, two for the others), a u32 size and a protobuf. */
function firstEntry(file: string, magics: number): { head: Buffer; entry: Buffer; rest: Buffer } {
  const b = readFileSync(file);
  const at = 4 * magics;
  const len = b.readUInt32LE(at);
  return { head: b.subarray(0, at), entry: b.subarray(at + 4, at + 4 + len), rest: b.subarray(at + 4 + len) };
}

const INVENTORY_ROOT_IDS = 3;
const CORE_IDS = 4;
/** task_kobj_ids_entry's fields of the namespaces adoptTaskNamespaces makes CRIU's own. */
const IDS_UTS_NS = 8;
const IDS_USER_NS = 10;

/**
 * Makes a checkpoint's tasks' user and UTS namespaces CRIU's own (inventory.img rewritten). A dump
 * of a session in its own user namespace runs in the host's (only there may CRIU suspend the tasks'
 * seccomp filters) and records that namespace as one to create, with the source's id mapping and
 * the tasks' ids as the session sees them. The copy's user namespace is made before the restore
 * (its network namespace belongs to it and its image is mounted through it), and CRIU restores from
 * inside it (the wrapper, USERNS_ENV): with the root ids' user namespace set to the tasks', CRIU
 * creates none and the session's ids land in the copy's range. The UTS namespace likewise: the
 * wrapper makes the copy's (owned by its user namespace), because CRIU restores a UTS namespace
 * through /proc/sys/kernel/hostname, which only host root may write; the hostname is set after.
 * Answers false when there was nothing to change.
 */
export function adoptTaskNamespaces(imagesDir: string): boolean {
  const pstree = firstEntry(join(imagesDir, 'pstree.img'), 2);
  const rootPid = parsePb(pstree.entry).find((f) => f.num === 1)?.varint;
  if (rootPid === undefined) throw new Error('the checkpoint has no root task in pstree.img');
  // The task's namespace ids: ids-<pid>.img (older images: in its core).
  const idsFile = join(imagesDir, `ids-${rootPid}.img`);
  const ids = existsSync(idsFile)
    ? firstEntry(idsFile, 2).entry
    : parsePb(firstEntry(join(imagesDir, `core-${rootPid}.img`), 2).entry).find((f) => f.num === CORE_IDS)?.raw;
  if (!ids) throw new Error(`the checkpoint's root task ${rootPid} has no namespace ids`);
  const taskIds = parsePb(ids);
  const invFile = join(imagesDir, 'inventory.img');
  const inv = firstEntry(invFile, 1);
  const fields = parsePb(inv.entry);
  const root = fields.find((f) => f.num === INVENTORY_ROOT_IDS);
  if (!root) throw new Error('the checkpoint has no root ids in inventory.img');
  const rootIds = parsePb(root.raw);
  let changed = false;
  for (const num of [IDS_USER_NS, IDS_UTS_NS]) {
    const task = taskIds.find((f) => f.num === num)?.varint;
    if (task === undefined) throw new Error(`the checkpoint's root task ${rootPid} has no namespace id ${num}`);
    const mine = rootIds.find((f) => f.num === num);
    if (mine?.varint === task) continue;
    changed = true;
    if (mine) mine.varint = task;
    else rootIds.push({ num, wire: 0, raw: Buffer.alloc(0), varint: task });
  }
  if (!changed) return false;
  root.raw = encodePb(rootIds);
  const entry = encodePb(fields);
  const len = Buffer.alloc(4);
  len.writeUInt32LE(entry.length);
  writeFileSync(`${invFile}.new`, Buffer.concat([inv.head, len, entry, inv.rest]));
  renameSync(`${invFile}.new`, invFile);
  return true;
}
