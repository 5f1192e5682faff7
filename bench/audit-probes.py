# Isolation probes run INSIDE session A by `drums audit` (through the daemon's exec).
# Prints one JSON line per probe: {"id", "category", "held": bool, "detail"}.
# held = the fence held (no observation or influence path). Inputs come from env.
import ctypes, errno, json, os, socket, subprocess
E = os.environ
ROOT = os.geteuid() == 0
libc = ctypes.CDLL(None, use_errno=True)
def out(id, cat, held, detail=''):
    print(json.dumps({'id': id, 'category': cat, 'held': bool(held), 'detail': str(detail)[:300]}), flush=True)
def err(): return errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
def sh(cmd):
    r = subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=20); return r.returncode, r.stdout + r.stderr
def connect(host, port, fam=socket.AF_INET):
    try:
        s = socket.socket(fam, socket.SOCK_STREAM); s.settimeout(1.5); s.connect((host, port)); s.close(); return 'CONNECTED'
    except Exception as e: return type(e).__name__ + ':' + str(getattr(e, 'errno', ''))

# Chromium's sandbox needs unshare(CLONE_NEWUSER) in a userns session: held if refused, or if a nested namespace still cannot mount
def nested_userns():
    r, w = os.pipe(); pid = os.fork()
    if pid == 0:
        res = 'refused' if libc.unshare(0x10000000) != 0 else ('mount ok' if libc.mount(b'none', b'/tmp', b'tmpfs', 0, None) == 0 or libc.unshare(0x00020000) == 0 else 'nested, no mount')
        os.write(w, res.encode()); os._exit(0)
    os.close(w); os.waitpid(pid, 0); return os.read(r, 100).decode()
# processes
pids = [p for p in os.listdir('/proc') if p.isdigit()]
cmds = []
for p in pids:
    try: cmds.append(open(f'/proc/{p}/cmdline', 'rb').read().replace(b'\0', b' ').decode())
    except Exception: pass
out('proc.count', 'processes', len(pids) < 60, f'{len(pids)} processes visible')
out('proc.pid1-is-own-init', 'processes', open('/proc/1/comm').read().strip() == 'tini', open('/proc/1/comm').read().strip())
out('proc.sibling-marker-invisible', 'processes', not any(E['B_PROC_MARK'] in c for c in cmds), 'looked for ' + E['B_PROC_MARK'])
out('proc.host-processes-invisible', 'processes', not any(('drums serve' in c or 'runc' in c or 'node ' in c) for c in cmds), '')
# files
for path in E['B_FILES'].split(':'):
    out('files.sibling:' + path, 'files', not os.path.exists(path), path)
out('files.host-marker', 'files', not os.path.exists(E['HOST_MARKER']), E['HOST_MARKER'])
for path in ['/work', '/var/lib/drums', E['STATE_DIR'], '/root/.ssh', '/etc/drums']:
    out('files.host-path:' + path, 'files', not os.path.exists(path) or path in ('/root/.ssh',) and not os.listdir(path), path)
# /proc and /sys leaks
def readable(p):
    try: return len(open(p, 'rb').read(64)) > 0
    except Exception as e: return False
out('proc.kcore-masked', 'proc', not readable('/proc/kcore'), '')
out('proc.keys-masked', 'proc', not readable('/proc/keys'), '')
out('proc.sched_debug-masked', 'proc', not readable('/proc/sched_debug'), '')
def writable(p, data='1'):
    try: open(p, 'w').write(data); return True
    except Exception: return False
out('proc.sys-readonly', 'proc', not writable('/proc/sys/kernel/hostname', 'x'), '')
out('proc.sysrq-readonly', 'proc', not writable('/proc/sysrq-trigger', 'h'), '')
out('sys.ksm-readonly', 'proc', not writable('/sys/kernel/mm/ksm/run', '1'), '')
out('sys.randomize_va_space-readonly', 'proc', not writable('/proc/sys/kernel/randomize_va_space', '2'), '')
mi = open('/proc/self/mountinfo').read()
out('proc.mountinfo-no-state-dir', 'proc', E['STATE_DIR'] not in mi, 'host state dir path in /proc/self/mountinfo' if E['STATE_DIR'] in mi else '')
# X and D-Bus
rc, o = sh('xprop -root ' + E['B_XPROP'])
out('x.sibling-root-property-invisible', 'x11', 'not found' in o or 'no such atom' in o, o.strip()[:120])
out('x.only-own-socket', 'x11', sorted(os.listdir('/tmp/.X11-unix')) == ['X0'], os.listdir('/tmp/.X11-unix'))
out('x.tcp-6000-sibling', 'x11', connect(E['B_ADDR'], 6000) != 'CONNECTED', connect(E['B_ADDR'], 6000))
def abstract(name):
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.settimeout(1); s.connect('\0' + name); s.close(); return 'CONNECTED'
    except Exception as e: return type(e).__name__
out('x.abstract-socket', 'x11', abstract('/tmp/.X11-unix/X0') != 'CONNECTED', abstract('/tmp/.X11-unix/X0'))
out('sockets.sibling-abstract', 'sockets', abstract(E['B_ABSTRACT']) != 'CONNECTED', abstract(E['B_ABSTRACT']))
out('dbus.system-bus-absent', 'dbus', not os.path.exists('/run/dbus/system_bus_socket'), '')
st = os.stat('/run/drums/bus')
# (device, inode): each session's /run/drums is a tmpfs of its own, whose inode numbers restart
mine = f'{st.st_dev}:{st.st_ino}'
out('dbus.own-bus-socket', 'dbus', mine != E['B_BUS_ID'], f'dev:inode {mine} vs sibling {E["B_BUS_ID"]}')
# namespaces differ from the sibling's
bns = dict(x.split('=') for x in E['B_NS'].split(','))
for n in ['pid', 'mnt', 'ipc', 'uts', 'net', 'cgroup']:
    mine = os.readlink(f'/proc/self/ns/{n}')
    out(f'ns.{n}-private', 'namespaces', mine != bns[n], f'{mine} vs sibling {bns[n]}')
# SysV shared memory made by the sibling
shmget = libc.shmget; shmget.restype = ctypes.c_int
r = shmget(int(E['B_SHM_KEY']), 0, 0)
out('ipc.sibling-sysv-shm', 'ipc', r < 0, 'shmget: ' + ('found' if r >= 0 else err()))
out('ipc.sibling-mqueue', 'ipc', not os.path.exists('/dev/mqueue/' + E['B_MQ']), '')
# cgroups
cg = open('/proc/self/cgroup').read()
out('cgroup.namespaced', 'cgroup', all(l.endswith(':/') for l in cg.strip().split('\n') if l and not l.startswith('0::') or l.endswith(':/')), cg.strip().split('\n')[0])
out('cgroup.readonly', 'cgroup', not writable('/sys/fs/cgroup/pids/pids.max', 'max') and not writable('/sys/fs/cgroup/memory/memory.limit_in_bytes', '-1'), '')
# network (targets are listeners the audit started)
for name, host, port in [('net.sibling-address', E['B_ADDR'], int(E['B_PORT'])), ('net.sibling-gateway', E['B_GW'], int(E['HOST_PORT'])),
                         ('net.own-gateway-unlisted-port', E['A_GW'], int(E['HOST_PORT'])), ('net.host-loopback-listener', '127.0.0.1', int(E['HOST_LO_PORT'])),
                         ('net.host-primary-address', E['HOST_ADDR'], int(E['HOST_PORT'])), ('net.metadata-169.254.169.254', '169.254.169.254', int(E['TARGET_PORT'])),
                         ('net.private-10/8', E['TARGET_10'], int(E['TARGET_PORT'])), ('net.private-192.168/16', E['TARGET_192'], int(E['TARGET_PORT'])),
                         ('net.private-172.16/12', E['TARGET_172'], int(E['TARGET_PORT']))]:
    r = connect(host, port)
    out(name, 'network', r != 'CONNECTED', f'{host}:{port} {r}')
out('net.ipv6-disabled', 'network', open('/proc/sys/net/ipv6/conf/all/disable_ipv6').read().strip() == '1', '')
# capabilities and escapes
def sc(name, *a):
    return 'ok' if getattr(libc, name)(*a) == 0 else err()
out('cap.mount', 'capabilities', sc('mount', b'none', b'/mnt', b'tmpfs', 0, None) != 'ok', sc('mount', b'none', b'/mnt', b'tmpfs', 0, None))
r = libc.syscall(175, None, 0, b'')
out('cap.init_module', 'capabilities', r != 0, err())
# io_uring_setup(1, &params): the seccomp profile makes it ENOSYS (a kernel surface seccomp cannot filter by operation)
params = ctypes.create_string_buffer(120)
r = libc.syscall(425, 1, params)
out('seccomp.io_uring-denied', 'capabilities', r == -1 and ctypes.get_errno() == errno.ENOSYS, err() if r == -1 else f'fd {r}')
if r >= 0: os.close(r)
for nm, fam, ty, pr in [('cap.raw-socket', socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP), ('cap.packet-socket', socket.AF_PACKET, socket.SOCK_RAW, 0)]:
    try: socket.socket(fam, ty, pr); out(nm, 'capabilities', False, 'opened')
    except OSError as e: out(nm, 'capabilities', True, errno.errorcode.get(e.errno))
r = libc.ptrace(16, int(E['HOST_PID']), None, None)
out('cap.ptrace-host-pid', 'capabilities', r != 0, err())
r = libc.mknod(b'/tmp/.audit-blk', 0o60600, os.makedev(253, 0))
out('cap.mknod-block-device', 'capabilities', r != 0 or not readable('/tmp/.audit-blk'), err() if r else 'created')
out('dev.no-host-disks', 'devices', not any(d.startswith(('vd', 'sd', 'nvme', 'xvd', 'mem', 'kmsg')) for d in os.listdir('/dev')), ' '.join(sorted(os.listdir('/dev'))))
nu = nested_userns()
out('cap.unshare-userns', 'capabilities', nu in ('refused', 'nested, no mount'), nu)
out('cap.unshare-mountns', 'capabilities', sc('unshare', 0x00020000) != 'ok', '')
# users: the session's ids are a range of its own on the host (uid 0 here is not host root)
um = open('/proc/self/uid_map').read().split()
out('users.session-root-not-host-root', 'users', len(um) == 3 and um[1] != '0' and int(um[2]) <= 65536, ' '.join(um))
try:
    nul = os.stat('/dev/null').st_uid
    os.chmod('/dev/null', 0o666)
    out('users.host-root-files-out-of-reach', 'users', False, f'chmod of /dev/null (owner {nul}) succeeded')
except OSError as e:
    out('users.host-root-files-out-of-reach', 'users', True, errno.errorcode.get(e.errno))
capeff = int([l for l in open('/proc/self/status') if l.startswith('CapEff')][0].split()[1], 16)
out('cap.no-sys-admin', 'capabilities', not capeff & (1 << 21), hex(capeff))
st = open('/proc/self/status').read()
out('cap.no-new-privs-seccomp', 'capabilities', 'NoNewPrivs:\t1' in st and 'Seccomp:\t2' in st, '')
