import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { run } from '../common/exec.ts';

/**
 * CRIU from a tools rootfs (the `criu-tools` image: Debian trixie with CRIU 4.x).
 *
 * Debian 12's CRIU 3.17 cannot dump on kernels >= 6.13 (their vDSO layout
 * changed); CRIU >= 4.1 can, but it is built against trixie's libc. So the
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
 *   directories that Chromium and the buses watch with inotify by scanning these.
 * A dump adds `unprivileged`: it runs with the sessions' uid (see wrapperScript), which
 * CRIU allows only in that mode (it keeps CAP_CHECKPOINT_RESTORE and the others).
 */
export const CRIU_CONFIG = ['network-lock skip', 'ghost-limit 64M', 'irmap-scan-path /usr/share/zoneinfo', 'irmap-scan-path /usr/share/dbus-1', ''].join('\n');
export const CRIU_DUMP_CONFIG = `unprivileged\n${CRIU_CONFIG}`;
/** The environment variable (passed through runc) that tells the wrapper a call is a dump. */
export const DUMP_ENV = 'DRUMS_CRIU_DUMP';
/**
 * The environment variable (passed through runc) with the `cgroup.procs` files (':'-separated)
 * of the cgroup a restore restores into: the wrapper joins them, then starts CRIU in a new
 * cgroup namespace rooted there (see wrapperScript).
 */
export const CGROUP_ENV = 'DRUMS_CRIU_CGROUP_PROCS';

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
    `  exec setpriv --reuid ${uid} --regid ${gid} --clear-groups --inh-caps ${capList} --ambient-caps ${capList} ${criu} "$@"`,
    'fi',
    `CRIU_CONFIG_FILE=${q(configFile)}`,
    'export CRIU_CONFIG_FILE',
    `if [ -n "\${${CGROUP_ENV}:-}" ]; then`,
    "  IFS=':'",
    `  for f in \${${CGROUP_ENV}}; do echo $$ > "$f" || exit 1; done`,
    '  unset IFS',
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
export async function installCriu(rootfs: string, wrapperPath: string, uid: number, gid: number): Promise<Criu> {
  for (const f of [LOADER, BINARY]) if (!existsSync(join(rootfs, f))) throw new Error(`the tools rootfs ${rootfs} has no ${f}`);
  const configFile = `${wrapperPath}.conf`;
  writeAtomic(configFile, CRIU_CONFIG, 0o644);
  writeAtomic(`${configFile}.dump`, CRIU_DUMP_CONFIG, 0o644);
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

/** The last lines of a CRIU log (dump.log / restore.log in runc's work path), for error messages. */
export function criuLogTail(workPath: string, file: string, lines = 8): string {
  try {
    const all = readFileSync(join(workPath, file), 'utf8').trim().split('\n');
    const errs = all.filter((l) => /Error \(|Unsupported|not supported/.test(l));
    return (errs.length ? errs.slice(-lines) : all.slice(-lines)).join(' | ');
  } catch {
    return '';
  }
}
