import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync, writeFileSync, rmSync } from 'node:fs';
import type { SessionInfo } from '../../src/client/client.ts';
import { startDaemon, runPrefix, type TestDaemon } from '../helpers.ts';

// Two live sessions of the default image, probed from inside each other.
describe('isolation between two sessions', () => {
  let d: TestDaemon;
  let a: SessionInfo;
  let b: SessionInfo;
  const prefix = runPrefix();
  const hostMarker = `/root/drums-host-marker-${prefix}`;
  const exec = (s: SessionInfo, shell: string, root = false) => d.client.exec(s.id, { shell, root, timeoutMs: 20_000 });

  before(async () => {
    writeFileSync(hostMarker, 'host secret\n');
    d = await startDaemon();
    [a, b] = await Promise.all([d.client.createSession({ image: 'default' }), d.client.createSession({ image: 'default' })]);
  });
  after(async () => {
    rmSync(hostMarker, { force: true });
    for (const s of [a, b]) if (s) await d.client.destroySession(s.id).catch(() => {});
    await d.finish();
  });

  it('each session sees only its own processes, in its own namespaces', async () => {
    const pa = await exec(a, 'ps -eo pid,comm --no-headers');
    const pb = await exec(b, 'ps -eo pid,comm --no-headers');
    // PID 1 is tini in both, and neither sees the other's (or the host's) processes.
    assert.match(pa.stdout, /^\s*1 tini$/m);
    assert.match(pb.stdout, /^\s*1 tini$/m);
    assert.doesNotMatch(pa.stdout, /node|runc|systemd|process_api/);
    const count = (s: string) => s.trim().split('\n').length;
    assert.ok(count(pa.stdout) < 30, pa.stdout);
    const ns = async (s: SessionInfo) => (await exec(s, 'for n in pid mnt ipc uts net cgroup; do readlink /proc/self/ns/$n; done')).stdout.trim().split('\n');
    const [na, nb] = [await ns(a), await ns(b)];
    const host = ['pid', 'mnt', 'ipc', 'uts', 'net', 'cgroup'].map((n) => `${n}:[${0}]`);
    void host;
    for (let i = 0; i < 6; i++) assert.notEqual(na[i], nb[i], `namespace ${i} shared`);
  });

  it('files written in one session are absent from the other and from the host', async () => {
    const tag = `secret-${prefix}`;
    await exec(a, `echo ${tag} > /tmp/${tag} && echo ${tag} > /home/user/${tag} && echo ${tag} > /dev/shm/${tag}`);
    await exec(a, `echo ${tag} > /etc/${tag}`, true);
    const probe = await exec(b, `cat /tmp/${tag} /home/user/${tag} /etc/${tag} /dev/shm/${tag} 2>&1; ls /tmp /dev/shm`);
    assert.doesNotMatch(probe.stdout, new RegExp(`^${tag}$`, 'm'));
    for (const p of [`/tmp/${tag}`, `/home/user/${tag}`, `/etc/${tag}`]) assert.equal(existsSync(p), false, `${p} on host`);
    // The host's files outside the image are not visible inside.
    const inside = await exec(b, `cat ${hostMarker} 2>&1; ls / ; ls /work 2>&1; ls /var/lib/drums 2>&1`, true);
    assert.doesNotMatch(inside.stdout, /host secret/);
    assert.match(inside.stdout, /No such file/);
  });

  it('no host path shows inside a session (mountinfo, mounts, cgroup)', async () => {
    const r = await exec(a, 'cat /proc/self/mountinfo /proc/mounts /proc/self/cgroup', true);
    for (const leak of [d.stateDir, '/var/lib/drums', '/work/', '/var/tmp', '/root']) {
      assert.ok(
        !r.stdout.includes(leak),
        `'${leak}' visible in the session:\n${r.stdout
          .split('\n')
          .filter((l) => l.includes(leak))
          .join('\n')}`,
      );
    }
    assert.match(r.stdout, /lowerdir=lower,upperdir=disk\/upper,workdir=disk\/work/);
  });

  it('X servers and D-Bus buses are private', async () => {
    await exec(a, 'xprop -root -f DRUMS_PROBE 8s -set DRUMS_PROBE from-a');
    const inB = await exec(b, 'xprop -root DRUMS_PROBE');
    assert.match(inB.stdout, /not found|no such atom/);
    const inA = await exec(a, 'xprop -root DRUMS_PROBE');
    assert.match(inA.stdout, /from-a/);
    // Only one X socket is visible, and no abstract X socket exists in the session.
    const socks = await exec(b, 'ls /tmp/.X11-unix; cat /proc/net/unix');
    assert.match(socks.stdout, /^X0$/m);
    assert.doesNotMatch(socks.stdout, /@\/tmp\/\.X11-unix/);
    // D-Bus: each bus has its own unique names; a name taken on A's bus is absent on B's.
    await exec(a, 'dbus-send --session --print-reply --dest=org.freedesktop.DBus / org.freedesktop.DBus.ListNames > /tmp/names');
    const la = (await exec(a, 'cat /tmp/names')).stdout;
    assert.match(la, /org\.a11y\.Bus/);
    const bBus = (await exec(b, 'ls -la /run/drums')).stdout;
    assert.match(bBus, /bus/);
    const machineA = (await exec(a, 'cat /etc/machine-id')).stdout.trim();
    const machineB = (await exec(b, 'cat /etc/machine-id')).stdout.trim();
    assert.match(machineA, /^[0-9a-f]{32}$/);
    assert.notEqual(machineA, machineB);
  });

  it('sessions cannot reach each other over the network', async () => {
    const port = 18000 + Math.floor(Math.random() * 1000);
    const listen = d.client.exec(b.id, { shell: `timeout 8 python3 -m http.server ${port} --bind 0.0.0.0 >/dev/null 2>&1; true`, timeoutMs: 20_000 });
    await exec(
      b,
      `for i in $(seq 50); do python3 -c "import socket; socket.create_connection(('127.0.0.1', ${port}), 0.2)" 2>/dev/null && break; sleep 0.1; done`,
    );
    const probe = await exec(
      a,
      `python3 -c "
import socket
for host in ['${b.network.address}', '${b.network.gateway}']:
    try:
        socket.create_connection((host, ${port}), 1.5); print(host, 'OPEN')
    except Exception as e: print(host, 'blocked', type(e).__name__)
"`,
    );
    assert.doesNotMatch(probe.stdout, /OPEN/, probe.stdout);
    assert.equal((probe.stdout.match(/blocked/g) ?? []).length, 2, probe.stdout + probe.stderr);
    await listen;
  });

  it('processes cannot mount, load modules, open raw sockets, ptrace outside or write /sys', async () => {
    const py = `python3 -c "
import ctypes, errno, os, socket
libc = ctypes.CDLL(None, use_errno=True)
def sc(name, *args):
    r = getattr(libc, name)(*args); return 'ok' if r == 0 else errno.errorcode[ctypes.get_errno()]
print('mount', sc('mount', b'none', b'/mnt', b'tmpfs', 0, None))
print('init_module', 'ok' if libc.syscall(175, None, 0, b'') == 0 else errno.errorcode[ctypes.get_errno()])
try:
    socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP); print('raw ok')
except OSError as e: print('raw', errno.errorcode[e.errno])
try:
    socket.socket(socket.AF_PACKET, socket.SOCK_RAW); print('packet ok')
except OSError as e: print('packet', errno.errorcode[e.errno])
print('ptrace', 'ok' if libc.ptrace(16, ${process.pid}, None, None) == 0 else errno.errorcode[ctypes.get_errno()])
try:
    open('/sys/kernel/mm/ksm/run', 'w').write('1'); print('sys ok')
except OSError as e: print('sys', errno.errorcode[e.errno])
print('unshare', sc('unshare', 0x20000000))
print('ksm', 'ok' if libc.prctl(67, 1, 0, 0, 0) == 0 else errno.errorcode[ctypes.get_errno()])
"`;
    for (const root of [false, true]) {
      const r = await exec(a, py, root);
      assert.equal(r.exitCode, 0, r.stderr);
      assert.doesNotMatch(r.stdout, / ok$/m, `${root ? 'root' : 'user'}:\n${r.stdout}`);
      assert.match(r.stdout, /^mount E/m);
      assert.match(r.stdout, /^raw E/m);
      assert.match(r.stdout, /^ptrace ESRCH/m);
      assert.match(r.stdout, /^ksm EPERM/m, 'a session may not opt into cross-session page merging');
    }
    const caps = await exec(a, 'grep Cap /proc/self/status', true);
    const eff = BigInt('0x' + /CapEff:\s+(\w+)/.exec(caps.stdout)![1]);
    assert.equal(eff & (1n << 21n), 0n, 'CAP_SYS_ADMIN held');
    assert.equal(eff & (1n << 13n), 0n, 'CAP_NET_RAW held');
    const nnp = await exec(a, 'grep -E "NoNewPrivs|Seccomp:" /proc/self/status');
    assert.match(nnp.stdout, /NoNewPrivs:\s+1/);
    assert.match(nnp.stdout, /Seccomp:\s+2/);
  });

  it("killing one session's processes leaves the other working", async () => {
    await exec(a, 'kill -9 -1', true).catch(() => {});
    // B still answers and its X server is alive.
    const x = await exec(b, 'xdpyinfo | grep -c dimensions');
    assert.equal(x.stdout.trim(), '1');
    let st = await d.client.getSession(a.id);
    for (let i = 0; i < 50 && st.state === 'ready'; i++) {
      await new Promise((r) => setTimeout(r, 100));
      st = await d.client.getSession(a.id);
    }
    assert.equal(st.state, 'broken');
    assert.equal((await d.client.getSession(b.id)).state, 'ready');
    void readFileSync;
  });
});
