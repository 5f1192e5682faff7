import { closeSync, constants, existsSync, mkdirSync, openSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { join } from 'node:path';
import { log } from '../common/log.ts';
import { instanceCgroup } from './instance.ts';
import { CGROUP_ROOT, cgroupMode, type Pressure, readPressure } from './cgroup-fs.ts';

/**
 * CPU and memory fairness on the host, for cgroup v1 (and the hybrid layout)
 * and v2:
 *  - the daemon gets a CPU cgroup of its own, `drums-<inst>/daemon`, a sibling
 *    of the sessions' parent `drums-<inst>/sessions` with twice its weight, so
 *    however many sessions spin, the daemon keeps at least 2/3 of a contended
 *    CPU for itself (weights are work-conserving: it takes only what it uses);
 *  - a client on the same host (a bench's harness) may join a sibling with the
 *    daemon's weight, `drums-<inst>/client`;
 *  - host pressure (PSI) for /metrics (a session's: cgroup-fs.ts).
 * Only the CPU controllers are touched for the daemon: its memory cgroup is
 * whatever the service manager gave it.
 */
export const DAEMON_CPU_SHARES = 2048; // v1; sessions' parent keeps the default 1024
export const DAEMON_CPU_WEIGHT = 200; // v2; default 100

const V1_CPU_CONTROLLERS = ['cpu', 'cpuacct'];

export function daemonCgroupName(instName: string): string {
  return `${instanceCgroup(instName)}/daemon`;
}

/**
 * The CPU cgroup a client of the daemon on the same host joins (a bench's harness: it is the
 * instrument, and its stalls would count as the sessions'), beside the daemon's with the same weight.
 * Where autogroups are on, a root-cgroup task's nice counts only inside its autogroup, which weighs
 * as nice 0 at the root: a cgroup is the one lever that works on v1 and v2 alike.
 */
export function clientCgroupName(instName: string): string {
  return `${instanceCgroup(instName)}/client`;
}

/** The roots of the hierarchies that hold the CPU controllers (v1: cpu and cpuacct; v2: the unified one). */
function cpuRoots(): string[] {
  if (cgroupMode() === 'v2') return [CGROUP_ROOT];
  return V1_CPU_CONTROLLERS.map((c) => join(CGROUP_ROOT, c)).filter((d) => existsSync(d));
}

/** One CPU cgroup's directories (`name` relative to the root, e.g. `drums-<inst>/daemon`). */
function cpuCgroupDirs(name: string): string[] {
  return cpuRoots().map((r) => join(r, name));
}

/** v2: the cpu controller enabled for the children of each level from the root down to `name`'s parent. */
function enableCpuDown(name: string): void {
  if (cgroupMode() !== 'v2') return;
  let dir = CGROUP_ROOT;
  for (const part of name.split('/').slice(0, -1)) {
    if (!readFileSync(join(dir, 'cgroup.subtree_control'), 'utf8').split(/\s+/).includes('cpu')) writeFileSync(join(dir, 'cgroup.subtree_control'), '+cpu');
    dir = join(dir, part);
    mkdirSync(dir, { recursive: true });
  }
  if (!readFileSync(join(dir, 'cgroup.subtree_control'), 'utf8').split(/\s+/).includes('cpu')) writeFileSync(join(dir, 'cgroup.subtree_control'), '+cpu');
}

/** Makes the CPU cgroup `name` with the daemon's weight and moves `pid` (all its threads) into it. */
function enterCpuCgroup(name: string, pid: number): void {
  enableCpuDown(name);
  for (const dir of cpuCgroupDirs(name)) {
    mkdirSync(dir, { recursive: true });
    if (existsSync(join(dir, 'cpu.shares'))) writeFileSync(join(dir, 'cpu.shares'), String(DAEMON_CPU_SHARES));
    if (existsSync(join(dir, 'cpu.weight'))) writeFileSync(join(dir, 'cpu.weight'), String(DAEMON_CPU_WEIGHT));
    writeFileSync(join(dir, 'cgroup.procs'), String(pid));
  }
}

/** Moves `pid` out of the CPU cgroup `name` to the root, if it is there. */
function leaveCpuCgroup(name: string, pid: number): void {
  for (const root of cpuRoots()) {
    const dir = join(root, name);
    if (!existsSync(dir)) continue;
    try {
      const procs = readFileSync(join(dir, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean);
      if (procs.includes(String(pid))) writeFileSync(join(root, 'cgroup.procs'), String(pid));
    } catch {}
  }
}

/** Removes the CPU cgroup `name` if it is empty. Returns the directories removed. */
function removeCpuCgroup(name: string): string[] {
  const removed: string[] = [];
  for (const dir of cpuCgroupDirs(name)) {
    try {
      rmdirSync(dir);
      removed.push(dir);
    } catch {}
  }
  return removed;
}

/**
 * Moves this process into its own CPU cgroup with a guaranteed share. On a
 * v2 host where the process is already in a non-root cgroup (a systemd
 * service, say: see the unit's CPUWeight), it stays where its manager put it.
 * Returns what it did, for the log.
 */
export function enterDaemonCgroup(instName: string): string {
  try {
    if (cgroupMode() === 'v2') {
      const own = readFileSync('/proc/self/cgroup', 'utf8')
        .split('\n')
        .find((l) => l.startsWith('0::'))
        ?.slice(3)
        .trim();
      if (own && own !== '/') return `kept cgroup ${own} (set by the service manager)`;
    }
    enterCpuCgroup(daemonCgroupName(instName), process.pid);
    // The daemon is the last thing the host's OOM killer should pick; sessions run at +500. Lowering it
    // needs CAP_SYS_RESOURCE, which a root in a container may lack: the cgroup above stands without it.
    try {
      writeFileSync('/proc/self/oom_score_adj', '-500');
    } catch (e) {
      log('warn', 'could not lower the daemon OOM score (needs CAP_SYS_RESOURCE)', { error: String(e) });
    }
    return `joined ${daemonCgroupName(instName)}`;
  } catch (e) {
    log('warn', 'could not give the daemon its own cgroup; it competes with sessions on equal terms', { error: String(e) });
    return 'failed';
  }
}

/** Moves this process back to the root CPU cgroup and removes the daemon cgroup (at stop). */
export function leaveDaemonCgroup(instName: string): void {
  leaveCpuCgroup(daemonCgroupName(instName), process.pid);
  removeCpuCgroup(daemonCgroupName(instName));
}

/**
 * Moves this process (a client of instance `instName` on this host) into the client cgroup. Returns
 * the cgroup's name, or undefined where it could not (not root, no CPU controller).
 */
export function enterClientCgroup(instName: string): string | undefined {
  try {
    enterCpuCgroup(clientCgroupName(instName), process.pid);
    return clientCgroupName(instName);
  } catch {
    leaveClientCgroup(instName);
    return undefined;
  }
}

/**
 * Moves this process out of the client cgroup and removes the cgroup if that left it empty, and the
 * instance's top cgroup too if the daemon's sweep has been and left it only for the client.
 */
export function leaveClientCgroup(instName: string): void {
  leaveCpuCgroup(clientCgroupName(instName), process.pid);
  if (removeCpuCgroup(clientCgroupName(instName)).length) removeCpuCgroup(instanceCgroup(instName));
}

/** Why a process may not join the client cgroup (the API maps each to a stable error code). */
export class ClientJoinError extends Error {
  readonly reason: 'not_found' | 'not_owned' | 'unavailable';
  constructor(reason: ClientJoinError['reason'], message: string) {
    super(message);
    this.reason = reason;
  }
}

/** The uids of a /proc/<pid>/status (real, effective, saved, filesystem) and its Tgid. */
function statusIds(text: string): { uids: number[]; tgid: number } {
  const uids = (/^Uid:\s+(.*)$/m.exec(text)?.[1] ?? '').trim().split(/\s+/).map(Number);
  return { uids, tgid: Number(/^Tgid:\s+(\d+)$/m.exec(text)?.[1] ?? -1) };
}

/**
 * Moves process `pid` (all its threads) into instance `instName`'s client cgroup for a caller of uid
 * `callerUid` (the owner of the API connection's peer socket). The daemon is root and the caller may not be,
 * so it checks before it writes: the pid names a process (not a thread) whose real, effective, saved and
 * filesystem uids are all the caller's (root may name any), that is not the daemon nor in any Drums
 * instance's cgroups (moving a session's process would take it out of its limits). The checks and the
 * write go through a descriptor of `/proc/<pid>` held from first to last: it stays bound to that process,
 * so if the process ends (and its pid is taken by another) the reads through it fail rather than
 * describe the newcomer; a last read after the write finds whether the pid still named the process checked.
 * (Node has no pidfd_open; an open /proc/<pid> directory is what pidfds were made to replace, and binds the same way.)
 * Returns the client cgroup's name.
 */
export function joinClientCgroupFor(instName: string, pid: number, callerUid: number): string {
  const gone = () => new ClientJoinError('not_found', `no process ${pid} (it may have ended); pass the pid of a running process of yours`);
  let fd: number;
  try {
    fd = openSync(`/proc/${pid}`, constants.O_RDONLY | constants.O_DIRECTORY);
  } catch {
    throw gone();
  }
  try {
    const via = `/proc/self/fd/${fd}`;
    const read = (f: string) => {
      try {
        return readFileSync(`${via}/${f}`, 'utf8').slice(0, 64 * 1024);
      } catch {
        throw gone();
      }
    };
    const { uids, tgid } = statusIds(read('status'));
    if (tgid !== pid) throw new ClientJoinError('not_found', `${pid} is a thread, not a process; pass its process id (${tgid})`);
    if (callerUid !== 0 && (uids.length !== 4 || uids.some((u) => u !== callerUid)))
      throw new ClientJoinError('not_owned', `process ${pid} is not yours (uid ${callerUid}): only a process whose every uid is the caller's may be moved`);
    if (pid === process.pid) throw new ClientJoinError('not_owned', 'the daemon itself cannot join the client cgroup');
    if (pid === 1) throw new ClientJoinError('not_owned', "process 1 is the host's init, not a client: pass the pid of a program of yours");
    // A kernel thread (kthreadd and its children: only root passes the uid check for them) cannot
    // change cgroup; the write would fail with EINVAL. It is a bad pid, not the host's fault.
    if (isKernelThread(read('stat')))
      throw new ClientJoinError('not_owned', `process ${pid} is a kernel thread, not a client: pass the pid of a program of yours`);
    // Any Drums instance's cgroup (sessions, daemon) but the client's own: a session's process must keep its limits.
    const cgroups = read('cgroup');
    if (/:\/drums-[^/\n]+\/(sessions|daemon)(\/|$)/m.test(cgroups) || /:\/drums-[^/\n]+-daemon$/m.test(cgroups))
      throw new ClientJoinError('not_owned', `process ${pid} belongs to a Drums session or daemon, not to a client`);
    try {
      enterCpuCgroup(clientCgroupName(instName), pid);
    } catch (e) {
      read('stat'); // a process that ended in between is a 404, not the host's fault
      throw new ClientJoinError('unavailable', `could not move ${pid} into ${clientCgroupName(instName)}: ${(e as Error).message}`);
    }
    read('stat');
    return clientCgroupName(instName);
  } finally {
    closeSync(fd);
  }
}

/** PF_KTHREAD in the flags of /proc/<pid>/stat (the 9th field; the 2nd, comm, may hold spaces and parentheses). */
export function isKernelThread(stat: string): boolean {
  const flags = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[6]);
  return Number.isFinite(flags) && (flags & 0x00200000) !== 0;
}

/** Moves a child the client started (one that is not part of the instrument) out of the client cgroup to the root. */
export function moveOutOfClientCgroup(instName: string, pid: number): void {
  leaveCpuCgroup(clientCgroupName(instName), pid);
}

/**
 * Removes the daemon's and the client's CPU cgroups if they are empty (the sweep's part), and those of
 * the layout before one top cgroup per instance (`drums-<inst>-daemon`, `drums-<inst>-client` at the
 * root). Returns what it removed.
 */
export function removeInstanceCpuCgroups(instName: string): string[] {
  const names = [daemonCgroupName(instName), clientCgroupName(instName), `drums-${instName}-daemon`, `drums-${instName}-client`];
  return names.flatMap(removeCpuCgroup);
}

/** The default CPU quota of a session: the configured one (DRUMS_DEFAULT_CPUS; 0 = none), else half the host's cores, at least one core. */
export function defaultSessionCpus(configured?: number): number {
  return configured ?? Math.max(1, cpus().length / 2);
}

/** Host-wide PSI. */
export function hostPressure(): Pressure[] {
  return (['cpu', 'memory', 'io'] as const).flatMap((r) => readPressure(`/proc/pressure/${r}`, r));
}
