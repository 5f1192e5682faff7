import { SESSION_OOM_SCORE_ADJ } from './oci-runtime.ts';
import { seccompProfile } from './seccomp.ts';

/** Capabilities a root-in-session exec may hold (no SYS_ADMIN, NET_RAW, MKNOD, SYS_MODULE, SYS_PTRACE...). */
export const ROOT_CAPS = [
  'CAP_CHOWN',
  'CAP_DAC_OVERRIDE',
  'CAP_FOWNER',
  'CAP_FSETID',
  'CAP_KILL',
  'CAP_SETGID',
  'CAP_SETUID',
  'CAP_SETPCAP',
  'CAP_NET_BIND_SERVICE',
  'CAP_SYS_CHROOT',
  'CAP_AUDIT_WRITE',
  'CAP_SETFCAP',
];

export interface SpecInput {
  hostname: string;
  uid: number;
  gid: number;
  home: string;
  args: string[];
  env: Record<string, string>;
  netnsPath: string;
  /** The session's own user namespace (joined by path; the network namespace is owned by it) and its id mapping. */
  userns?: { path: string; base: number; size: number };
  cgroupsPath: string;
  /** Host directory bound at /run/drums (sockets, status). */
  runDir: string;
  /** Host directory bound at /tmp/.X11-unix. */
  x11Dir: string;
  /** Host file bound read-only at /usr/lib/drums/session-init (the init ships with the daemon). */
  initPath: string;
  /** Bench only: let the session opt into KSM (see seccomp.ts). */
  allowMemoryMerge?: boolean;
  memoryBytes: number;
  /** Turn swap off for the session (memory+swap = memory), where the host accounts swap. */
  noSwap?: boolean;
  pids: number;
  /** CPU quota in cores (e.g. 1.5); 0 means unlimited. */
  cpus: number;
  /**
   * The host has cgroup v2 only: the CPU weight is set as cpu.weight itself (100, the v2
   * default, which the CPU guard restores). The OCI `shares` 1024 would be converted by runc
   * < 1.3.2 and crun < 1.23 (Debian trixie's) to weight 39, so a session the guard had demoted
   * and restored came back with 2.5 times its never-demoted neighbours' weight.
   */
  cgroupV2?: boolean;
  /**
   * The session disk's loop device and its write and read limits in bytes/s (0: none), and the whole disk
   * under the image (the overlay's lower), whose reads get the same read limit; see disk-throttle.ts.
   */
  disk?: { major: number; minor: number; writeBytesPerSecond: number; readBytesPerSecond: number; lower?: { major: number; minor: number } };
  shmBytes: number;
  tmpBytes: number;
}

const tmpfs = (destination: string, options: string[]) => ({ destination, type: 'tmpfs', source: 'tmpfs', options });

/** The bundle's blockIO (runc writes blkio.throttle.*_bps_device on v1, io.max on v2); none without limits. */
function blockIO(disk: SpecInput['disk']) {
  if (!disk) return {};
  const rule = (d: { major: number; minor: number }, rate: number) => ({ major: d.major, minor: d.minor, rate: Math.round(rate) });
  const reads = [disk, ...(disk.lower && (disk.lower.major !== disk.major || disk.lower.minor !== disk.minor) ? [disk.lower] : [])];
  const blockIO = {
    ...(disk.writeBytesPerSecond > 0 ? { throttleWriteBpsDevice: [rule(disk, disk.writeBytesPerSecond)] } : {}),
    ...(disk.readBytesPerSecond > 0 ? { throttleReadBpsDevice: reads.map((d) => rule(d, disk.readBytesPerSecond)) } : {}),
  };
  return Object.keys(blockIO).length ? { blockIO } : {};
}

export function buildSpec(i: SpecInput) {
  const period = 100_000;
  return {
    ociVersion: '1.0.2',
    process: {
      terminal: false,
      user: { uid: i.uid, gid: i.gid, additionalGids: [i.gid] },
      args: i.args,
      env: Object.entries(i.env).map(([k, v]) => `${k}=${v}`),
      cwd: i.home,
      // The desktop runs with no capabilities at all; the bounding set caps what
      // a root-in-session exec can ever hold.
      capabilities: { bounding: ROOT_CAPS, effective: [], permitted: [], inheritable: [], ambient: [] },
      noNewPrivileges: true,
      oomScoreAdj: SESSION_OOM_SCORE_ADJ,
    },
    root: { path: 'rootfs', readonly: false },
    hostname: i.hostname,
    mounts: [
      { destination: '/proc', type: 'proc', source: 'proc', options: ['nosuid', 'noexec', 'nodev'] },
      tmpfs('/dev', ['nosuid', 'strictatime', 'mode=755', 'size=65536k']),
      { destination: '/dev/pts', type: 'devpts', source: 'devpts', options: ['nosuid', 'noexec', 'newinstance', 'ptmxmode=0666', 'mode=0620', `gid=5`] },
      tmpfs('/dev/shm', ['nosuid', 'noexec', 'nodev', 'mode=1777', `size=${i.shmBytes}`]),
      { destination: '/dev/mqueue', type: 'mqueue', source: 'mqueue', options: ['nosuid', 'noexec', 'nodev'] },
      { destination: '/sys', type: 'sysfs', source: 'sysfs', options: ['nosuid', 'noexec', 'nodev', 'ro'] },
      { destination: '/sys/fs/cgroup', type: 'cgroup', source: 'cgroup', options: ['nosuid', 'noexec', 'nodev', 'relatime', 'ro'] },
      tmpfs('/tmp', ['nosuid', 'nodev', 'mode=1777', `size=${i.tmpBytes}`]),
      tmpfs('/run', ['nosuid', 'nodev', 'mode=755', 'size=65536k']),
      { destination: '/run/drums', type: 'bind', source: i.runDir, options: ['rbind', 'nosuid', 'nodev', 'noexec'] },
      { destination: '/tmp/.X11-unix', type: 'bind', source: i.x11Dir, options: ['rbind', 'nosuid', 'nodev', 'noexec'] },
      { destination: '/usr/lib/drums/session-init', type: 'bind', source: i.initPath, options: ['bind', 'ro', 'nosuid', 'nodev'] },
    ],
    linux: {
      namespaces: [
        ...(i.userns ? [{ type: 'user', path: i.userns.path }] : []),
        { type: 'pid' },
        { type: 'ipc' },
        { type: 'uts' },
        { type: 'mount' },
        { type: 'cgroup' },
        { type: 'network', path: i.netnsPath },
      ],
      ...(i.userns
        ? {
            uidMappings: [{ containerID: 0, hostID: i.userns.base, size: i.userns.size }],
            gidMappings: [{ containerID: 0, hostID: i.userns.base, size: i.userns.size }],
          }
        : {}),
      cgroupsPath: i.cgroupsPath,
      resources: {
        devices: [{ allow: false, access: 'rwm' }],
        memory: i.noSwap ? { limit: i.memoryBytes, swap: i.memoryBytes } : { limit: i.memoryBytes },
        pids: { limit: i.pids },
        cpu: { ...(i.cpus > 0 ? { quota: Math.round(i.cpus * period), period } : {}), ...(i.cgroupV2 ? {} : { shares: 1024 }) },
        // memory.oom.group 0: an OOM kill takes the one process the kernel picks, never the whole session.
        ...(i.cgroupV2 ? { unified: { 'cpu.weight': '100', 'memory.oom.group': '0' } } : {}),
        ...blockIO(i.disk),
      },
      sysctl: {
        'net.ipv6.conf.all.disable_ipv6': '1',
        'net.ipv6.conf.default.disable_ipv6': '1',
      },
      maskedPaths: [
        '/proc/acpi',
        '/proc/asound',
        '/proc/kcore',
        '/proc/keys',
        '/proc/latency_stats',
        '/proc/timer_list',
        '/proc/timer_stats',
        '/proc/sched_debug',
        '/proc/scsi',
        '/sys/firmware',
        '/sys/devices/virtual/powercap',
      ],
      readonlyPaths: ['/proc/bus', '/proc/fs', '/proc/irq', '/proc/sys', '/proc/sysrq-trigger'],
      seccomp: seccompProfile({ allowMemoryMerge: i.allowMemoryMerge, sandboxNamespaces: !!i.userns }),
    },
  };
}
