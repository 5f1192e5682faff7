/**
 * A default-style seccomp profile in the spirit of the container runtimes'
 * defaults: everything a desktop needs is allowed; syscalls that reach kernel
 * state shared with the host (mounts, modules, kexec, keyrings, namespaces,
 * BPF, perf, clocks, swap, reboot, cross-process memory access) fail with EPERM.
 * Capabilities are dropped too; seccomp is the second fence.
 *
 * io_uring fails with ENOSYS, as on a kernel built without it: a large kernel surface with a
 * long record of privilege escalations, which seccomp cannot filter by operation (the work is
 * submitted through shared memory, not syscall arguments). Nothing in the images uses it (no
 * liburing or libuv in them, and Chromium, Firefox/Thunderbird, LibreOffice, GLib, VLC and
 * Python's asyncio never call it); what probes for it (libuv, liburing, QEMU) takes ENOSYS as
 * "not there" and falls back to threads or epoll. Docker's and Android's default profiles deny it too.
 */
const DENIED = [
  'acct',
  'add_key',
  'bpf',
  'clock_adjtime',
  'clock_settime',
  'create_module',
  'delete_module',
  'finit_module',
  'fsconfig',
  'fsmount',
  'fsopen',
  'fspick',
  'get_kernel_syms',
  'init_module',
  'ioperm',
  'iopl',
  'kcmp',
  'kexec_file_load',
  'kexec_load',
  'keyctl',
  'lookup_dcookie',
  'mount',
  'mount_setattr',
  'move_mount',
  'name_to_handle_at',
  'nfsservctl',
  'open_by_handle_at',
  'open_tree',
  'perf_event_open',
  'pivot_root',
  'process_vm_readv',
  'process_vm_writev',
  'query_module',
  'quotactl',
  'quotactl_fd',
  'reboot',
  'request_key',
  'setns',
  'settimeofday',
  'stime',
  'swapoff',
  'swapon',
  'sysfs',
  '_sysctl',
  'umount',
  'umount2',
  'uselib',
  'userfaultfd',
  'ustat',
  'vm86',
  'vm86old',
  'syslog',
  'fanotify_init',
  'lsm_set_self_attr',
];

/** io_uring_setup (425), io_uring_enter (426), io_uring_register (427): see above. */
export const IO_URING = ['io_uring_setup', 'io_uring_enter', 'io_uring_register'];

// CLONE_NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET|NEWTIME
const CLONE_NS_FLAGS = [0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000, 0x00000080];
/** What Chromium's namespace sandbox clones (CLONE_NEWUSER|NEWPID|NEWNET): allowed only inside a session's own user namespace. */
const SANDBOX_CLONE_FLAGS = [0x10000000, 0x20000000, 0x40000000];
const AF_NETLINK = 16;
const NETLINK_NETFILTER = 12;
const EPERM = 1;
const ENOSYS = 38;

const PR_SET_MEMORY_MERGE = 67;

/**
 * `allowMemoryMerge`: only for DrumsBench's KSM arm. Otherwise a session may not opt
 * itself into kernel same-page merging (an unprivileged prctl on recent kernels),
 * which would open a cross-session timing channel on any host that runs ksmd.
 */
/**
 * `sandboxNamespaces`: only for a session with its own user namespace. clone() and unshare()
 * may then make the user, PID and network namespaces Chromium's sandbox needs (nested in the
 * session's, so their root is the session's unprivileged host uid; Chromium checks for an
 * unprivileged unshare(CLONE_NEWUSER) before it starts its sandbox); mount, cgroup, UTS, IPC
 * and time namespaces, setns and the mount calls stay denied, and netfilter sockets are refused, so a nested namespace's root can neither mount
 * nor reach nf_tables, the kernel surface unprivileged user namespaces have most often exposed.
 */
export function seccompProfile(opts: { allowMemoryMerge?: boolean; sandboxNamespaces?: boolean } = {}) {
  const deniedClone = opts.sandboxNamespaces ? CLONE_NS_FLAGS.filter((f) => !SANDBOX_CLONE_FLAGS.includes(f)) : CLONE_NS_FLAGS;
  return {
    defaultAction: 'SCMP_ACT_ALLOW',
    architectures: ['SCMP_ARCH_X86_64', 'SCMP_ARCH_X86', 'SCMP_ARCH_X32'],
    syscalls: [
      { names: DENIED, action: 'SCMP_ACT_ERRNO', errnoRet: EPERM },
      // No new namespaces: clone with any CLONE_NEW* flag fails.
      ...(opts.sandboxNamespaces ? [] : [{ names: ['unshare'], action: 'SCMP_ACT_ERRNO', errnoRet: EPERM }]),
      ...deniedClone.map((flag) => ({
        names: opts.sandboxNamespaces ? ['clone', 'unshare'] : ['clone'],
        action: 'SCMP_ACT_ERRNO',
        errnoRet: EPERM,
        args: [{ index: 0, value: flag, valueTwo: flag, op: 'SCMP_CMP_MASKED_EQ' }],
      })),
      ...(opts.allowMemoryMerge
        ? []
        : [
            {
              names: ['prctl'],
              action: 'SCMP_ACT_ERRNO',
              errnoRet: EPERM,
              args: [{ index: 0, value: PR_SET_MEMORY_MERGE, valueTwo: 0, op: 'SCMP_CMP_EQ' }],
            },
          ]),
      ...(opts.sandboxNamespaces
        ? [
            {
              names: ['socket'],
              action: 'SCMP_ACT_ERRNO',
              errnoRet: EPERM,
              args: [
                { index: 0, value: AF_NETLINK, valueTwo: 0, op: 'SCMP_CMP_EQ' },
                { index: 2, value: NETLINK_NETFILTER, valueTwo: 0, op: 'SCMP_CMP_EQ' },
              ],
            },
          ]
        : []),
      { names: IO_URING, action: 'SCMP_ACT_ERRNO', errnoRet: ENOSYS },
      // clone3 passes flags in memory seccomp can't read: make libc fall back to clone.
      { names: ['clone3'], action: 'SCMP_ACT_ERRNO', errnoRet: ENOSYS },
      // ptrace is confined by the PID namespace; keep it for debuggers inside.
    ],
  };
}
