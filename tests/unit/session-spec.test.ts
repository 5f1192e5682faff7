import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { parseScreen, parseSpec } from '../../src/session/spec.ts';
import { parsePool, subnetForSlot } from '../../src/host/network.ts';
import { tableScript } from '../../src/host/nftables.ts';
import { buildSpec } from '../../src/host/oci-spec.ts';
import { blockDeviceOf } from '../../src/host/disk-throttle.ts';

describe('session spec validation', () => {
  it('fills defaults', () => {
    const s = parseSpec({});
    assert.equal(s.image, 'default');
    assert.deepEqual(s.screen, { width: 1280, height: 800, depth: 24 });
    assert.equal(s.egress, false);
    assert.deepEqual(s.hostPorts, []);
    // The limits' defaults (docs/api.md): 2 GiB memory, a 512 MiB disk quota, 1024 pids.
    assert.deepEqual([s.memoryBytes, s.diskBytes, s.pids], [2 * 1024 ** 3, 512 * 1024 ** 2, 1024]);
    // Chromium's sandbox is on unless a spec gives it up (absent when on: older pool templates compare equal).
    assert.equal('browserSandbox' in s, false);
    assert.equal('browserSandbox' in parseSpec({ browserSandbox: true }), false);
    assert.equal(parseSpec({ browserSandbox: false }).browserSandbox, false);
  });
  it('parses screens in both forms and rejects absurd ones, naming the field', () => {
    assert.deepEqual(parseScreen('1920x1080'), { width: 1920, height: 1080, depth: 24 });
    assert.deepEqual(parseScreen({ width: 800, height: 600 }), { width: 800, height: 600, depth: 24 });
    for (const bad of ['0x0', '100000x100000', '12x', 'axb', 5]) {
      assert.throws(
        () => parseScreen(bad),
        (e: Error & { code: string }) => e.code === 'invalid_spec' && /screen/.test(e.message),
      );
    }
  });
  it('rejects negative limits, unknown fields, bad URLs and unsafe flags', () => {
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ memoryMb: -1 }, /memoryMb/],
      [{ pids: 0 }, /pids/],
      [{ cpus: -2 }, /cpus/],
      [{ nope: 1 }, /nope: unknown field/],
      [{ url: 'javascript:alert(1)' }, /url: scheme/],
      [{ url: '--disable-web-security' }, /url/],
      [{ browserFlags: ['--a=$(id)'] }, /browserFlags\[0\]/],
      [{ hostPorts: [70000] }, /hostPorts\[0\]/],
      [{ image: 'A B' }, /image/],
      [{ labels: { 'bad key': 'x' } }, /labels/],
      [{ diskReadMbps: 0 }, /diskReadMbps/],
      [{ diskReadMbps: -8 }, /diskReadMbps/],
      [{ diskReadMbps: 2.5 }, /diskReadMbps/],
      [{ diskReadMbps: '8' }, /diskReadMbps/],
      [{ diskWriteMbps: 2 ** 40 }, /diskWriteMbps/],
      [{ browserSandbox: 'no' }, /browserSandbox/],
    ];
    for (const [body, re] of cases)
      assert.throws(
        () => parseSpec(body),
        (e: Error) => re.test(e.message),
        JSON.stringify(body),
      );
  });
});

describe('subnet pool', () => {
  it('cuts the pool into /30s with the gateway first', () => {
    const pool = parsePool('10.231.0.0/16');
    assert.equal(pool.slots, 16384);
    assert.deepEqual(subnetForSlot(pool, 3), { slot: 3, cidr: '10.231.0.12/30', gateway: '10.231.0.13', address: '10.231.0.14' });
    assert.throws(() => parsePool('10.0.0.0/30'), /prefix/);
    assert.throws(() => parsePool('nonsense'), /DRUMS_SUBNET_POOL/);
  });
});

describe('generated host configuration', () => {
  it('the nftables table names its owner and drops sessions by default', () => {
    const script = tableScript({ name: 'abcde' } as never);
    assert.match(script, /table inet drums_abcde \{/);
    assert.match(script, /iifname "drabcdeh\*" jump from_session/);
    assert.match(script, /169\.254\.0\.0\/16/);
    assert.match(script, /chain fwd_to_session \{\s+ct state established,related accept\s+counter drop/);
  });
  /** A session's OCI inputs, the same for every spec test below. */
  const input = {
    hostname: 'h',
    uid: 1000,
    gid: 1000,
    home: '/home/user',
    args: ['/x'],
    env: { A: 'b' },
    netnsPath: '/var/run/netns/n',
    cgroupsPath: '/drums-x/s',
    runDir: '/r',
    x11Dir: '/x11',
    initPath: '/init',
    memoryBytes: 1 << 30,
    pids: 100,
    cpus: 0,
    shmBytes: 1,
    tmpBytes: 1,
  };
  it('the OCI spec drops capabilities, sets no_new_privs and seccomp, and joins the session netns', () => {
    const spec = buildSpec(input);
    assert.deepEqual(spec.process.capabilities.effective, []);
    assert.ok(!spec.process.capabilities.bounding.includes('CAP_SYS_ADMIN'));
    assert.ok(!spec.process.capabilities.bounding.includes('CAP_NET_RAW'));
    assert.equal(spec.process.noNewPrivileges, true);
    assert.equal(spec.linux.seccomp.defaultAction, 'SCMP_ACT_ALLOW');
    assert.ok(spec.linux.seccomp.syscalls[0]!.names!.includes('mount'));
    assert.deepEqual(
      spec.linux.namespaces.find((n) => n.type === 'network'),
      { type: 'network', path: '/var/run/netns/n' },
    );
    assert.ok(spec.mounts.some((m) => m.destination === '/sys' && m.options.includes('ro')));
    assert.ok(spec.linux.maskedPaths.includes('/proc/kcore'));
    // cgroup v1: the default shares; v2: cpu.weight 100 itself (runc/crun would turn shares 1024 into 39).
    assert.deepEqual(spec.linux.resources.cpu, { shares: 1024 });
    assert.equal('unified' in spec.linux.resources, false);
    const v2 = buildSpec({ ...input, cpus: 1.5, cgroupV2: true }).linux.resources;
    assert.deepEqual(v2.cpu, { quota: 150_000, period: 100_000 });
    assert.deepEqual((v2 as { unified?: Record<string, string> }).unified, { 'cpu.weight': '100', 'memory.oom.group': '0' });
    assert.equal('blockIO' in spec.linux.resources, false, 'no disk: no blockIO');
  });
  it("the OCI spec limits reads on the session's loop device and the image's disk, writes on the loop device only", () => {
    const io = (disk: Parameters<typeof buildSpec>[0]['disk']) => (buildSpec({ ...input, disk }).linux.resources as { blockIO?: unknown }).blockIO;
    assert.deepEqual(io({ major: 7, minor: 3, writeBytesPerSecond: 100, readBytesPerSecond: 200.4, lower: { major: 254, minor: 0 } }), {
      throttleWriteBpsDevice: [{ major: 7, minor: 3, rate: 100 }],
      throttleReadBpsDevice: [
        { major: 7, minor: 3, rate: 200 },
        { major: 254, minor: 0, rate: 200 },
      ],
    });
    assert.deepEqual(io({ major: 7, minor: 3, writeBytesPerSecond: 0, readBytesPerSecond: 5 }), { throttleReadBpsDevice: [{ major: 7, minor: 3, rate: 5 }] });
    assert.equal(io({ major: 7, minor: 3, writeBytesPerSecond: 0, readBytesPerSecond: 0, lower: { major: 8, minor: 0 } }), undefined);
  });
  it('a throttle rule goes on a whole disk, never on a partition or a filesystem without a device', () => {
    assert.equal(blockDeviceOf('/proc'), undefined);
    assert.equal(blockDeviceOf('/nonexistent/path'), undefined);
    const root = blockDeviceOf('/');
    if (root) assert.equal(existsSync(`/sys/dev/block/${root.major}:${root.minor}/partition`), false);
  });
});
