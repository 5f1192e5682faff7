import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, lstatSync, readdirSync, readFileSync, readlinkSync, statSync } from 'node:fs';
import { join } from 'node:path';
import type { SessionInfo } from '../../src/client/client.ts';
import { startDaemon, type TestDaemon } from '../helpers.ts';

const CLAIMS = '/run/drums/subnets';

/** The session's processes as the host sees them: pid, host uid, user namespace, command line. */
function hostProcs(instance: string, id: string): { pid: number; uid: number; userns: string; cmd: string }[] {
  const files = [`/sys/fs/cgroup/pids/drums-${instance}/sessions/${id}/cgroup.procs`, `/sys/fs/cgroup/drums-${instance}/sessions/${id}/cgroup.procs`];
  const file = files.find((f) => existsSync(f));
  assert.ok(file, `no cgroup for ${id}`);
  const out = [];
  for (const pid of readFileSync(file, 'utf8').split('\n').filter(Boolean).map(Number)) {
    try {
      const uid = Number(/^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]);
      out.push({ pid, uid, userns: readlinkSync(`/proc/${pid}/ns/user`), cmd: readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ') });
    } catch {}
  }
  return out;
}

/** Uid-range claims of this instance, by session id. */
function uidClaims(instance: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const f of existsSync(CLAIMS) ? readdirSync(CLAIMS) : []) {
    if (!f.startsWith('uids-')) continue;
    const [inst, id] = readFileSync(join(CLAIMS, f), 'utf8').trim().split(' ');
    if (inst === instance) out.set(id!, f);
  }
  return out;
}

async function waitFor<T>(what: string, fn: () => T | undefined | Promise<T | undefined>, ms = 60_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

// A user namespace per session (the default; spec userns false or DRUMS_USERNS=0 gives the host ids).
describe('user namespace per session', () => {
  let d: TestDaemon;
  let env: NodeJS.ProcessEnv;
  before(async () => {
    d = await startDaemon();
    env = { DRUMS_STATE_DIR: d.stateDir, DRUMS_INSTANCE: d.instance, DRUMS_TOKEN: d.token };
  });
  after(async () => {
    await d.finish();
    assert.deepEqual([...uidClaims(d.instance).keys()], [], 'uid claims left');
  });

  it('each session gets its own host uid range; the image is owned right; root-in-session is unprivileged on the host', async () => {
    const a = await d.client.createSession({ image: 'minimal', userns: true });
    const b = await d.client.createSession({ image: 'minimal', userns: true });
    const c = await d.client.createSession({ image: 'minimal', userns: false });
    try {
      const ra = a.userns!,
        rb = b.userns!;
      assert.ok(ra && rb, 'userns sessions report their range');
      assert.equal(c.userns, null);
      assert.equal(ra.size, 65536);
      assert.ok(ra.hostUidBase >= 65536 && rb.hostUidBase >= 65536);
      assert.ok(ra.hostUidBase + ra.size <= rb.hostUidBase || rb.hostUidBase + rb.size <= ra.hostUidBase, 'ranges overlap');
      // Claimed host-wide and named with the owner.
      const claims = uidClaims(d.instance);
      assert.ok(claims.has(a.id) && claims.has(b.id) && !claims.has(c.id), JSON.stringify([...claims]));

      // Inside: the usual ids, and the image's files owned by root (not nobody), the home by the user.
      const inside = await d.client.exec(a.id, {
        shell: 'id -u; stat -c %u:%g /etc/passwd /usr/bin /home/user; cat /proc/self/uid_map; touch /home/user/mine && echo made',
      });
      assert.equal(inside.exitCode, 0, inside.stderr);
      const lines = inside.stdout.trim().split('\n');
      assert.deepEqual(lines.slice(0, 4), ['1000', '0:0', '0:0', '1000:1000']);
      assert.deepEqual(lines[4]!.trim().split(/\s+/).map(Number), [0, ra.hostUidBase, 65536]);
      // On the host, the file the desktop user made is owned by the session's own host uid.
      const upper = join(d.stateDir, 'sessions', a.id, 'disk', 'upper', 'home', 'user', 'mine');
      assert.equal(statSync(upper).uid, ra.hostUidBase + 1000);

      // No copy of the image: the session's lower is a read-only idmapped mount of the image's own rootfs, and
      // the session holds on the host only what it wrote (its sparse disk image and small files; minimal is ~490 MiB).
      const sdir = join(d.stateDir, 'sessions', a.id);
      const mi = readFileSync('/proc/self/mountinfo', 'utf8')
        .split('\n')
        .map((l) => l.split(' '));
      const lower = mi.find((f) => f[4] === join(sdir, 'lower'));
      assert.ok(lower, 'no lower mount');
      assert.ok(lower[3]!.endsWith('/rootfs') && !lower[3]!.startsWith(sdir), lower.join(' '));
      assert.match(lower[5]!, /(^|,)idmapped(,|$)/, lower.join(' '));
      assert.match(lower[5]!, /(^|,)ro(,|$)/, lower.join(' '));
      const mountpoints = new Set(mi.map((f) => f[4]).filter((m) => m?.startsWith(sdir + '/')));
      const held = (p: string): number => {
        const st = lstatSync(p);
        if (!st.isDirectory()) return st.blocks * 512;
        return readdirSync(p).reduce((n, e) => n + (mountpoints.has(join(p, e)) ? 0 : held(join(p, e))), st.blocks * 512);
      };
      assert.ok(held(sdir) < 64 * 1024 ** 2, `the session holds ${held(sdir)} bytes on the host`);

      // Host view: A's desktop processes run as base+1000, B's as its own, C's as host uid 1000.
      const pa = hostProcs(d.instance, a.id),
        pb = hostProcs(d.instance, b.id),
        pc = hostProcs(d.instance, c.id);
      assert.ok(pa.length && pa.every((p) => p.uid === ra.hostUidBase + 1000), JSON.stringify(pa));
      assert.ok(pb.length && pb.every((p) => p.uid === rb.hostUidBase + 1000), JSON.stringify(pb));
      assert.ok(pc.every((p) => p.uid === 1000));
      const hostUserns = readlinkSync('/proc/self/ns/user');
      assert.ok(pa.every((p) => p.userns !== hostUserns && p.userns !== pb[0]!.userns));

      // Root-in-session is the session's base uid on the host, never 0.
      const mark = String(41_000_000 + Math.floor(Math.random() * 999_999));
      const r = await d.client.exec(a.id, { shell: `id -u; setsid sleep ${mark} >/dev/null 2>&1 < /dev/null & echo started`, root: true });
      assert.match(r.stdout, /^0\n/);
      const sleeper = await waitFor('the root sleeper', () => hostProcs(d.instance, a.id).find((p) => p.cmd.includes(`sleep ${mark}`)));
      assert.equal(sleeper.uid, ra.hostUidBase);
      // ...and cannot touch what host root owns, even with CAP_DAC_OVERRIDE in the session.
      // (/dev/null is the host's node, bound in: its owner, host root, is not mapped, so CAP_FOWNER does not reach it.)
      const w = await d.client.exec(a.id, { shell: 'stat -c %u /dev/null /usr/lib/drums/session-init; chmod 0666 /dev/null 2>/dev/null; echo $?', root: true });
      assert.deepEqual(w.stdout.trim().split('\n'), ['65534', '65534', '1'], 'host-root files show as nobody and root-in-session cannot chmod them');

      // Reset keeps the range; the fresh generation is owned the same way.
      const ar = await d.client.resetSession(a.id);
      assert.deepEqual(ar.userns, ra);
      const after = await d.client.exec(a.id, { shell: 'id -u; stat -c %u /etc/passwd; ls /home/user/mine 2>&1 || true' });
      assert.match(after.stdout, /^1000\n0\n.*No such file/s);
      assert.ok(hostProcs(d.instance, a.id).every((p) => p.uid === ra.hostUidBase + 1000));

      // Destroy releases the range and leaves no pin.
      await d.client.destroySession(b.id);
      assert.ok(!uidClaims(d.instance).has(b.id));
      assert.ok(!readFileSync('/proc/self/mountinfo', 'utf8').includes(`/sessions/${b.id}/`));
    } finally {
      for (const s of [a, b, c]) await d.client.destroySession(s.id).catch(() => {});
    }
  });

  it('Chromium runs with its own sandbox in a userns session (renderers in a nested namespace), --no-sandbox without one', async () => {
    const url = 'data:text/html,<title>sandboxed</title><body style="background:%2322cc22"></body>';
    const a = await d.client.createSession({ image: 'default', url, userns: true });
    const c = await d.client.createSession({ image: 'default', url, userns: false });
    try {
      const pa = hostProcs(d.instance, a.id).filter((p) => p.cmd.includes('/usr/lib/chromium/chromium'));
      const browser = pa.find((p) => !p.cmd.includes('--type='));
      assert.ok(browser, JSON.stringify(pa));
      assert.ok(!browser.cmd.includes('--no-sandbox'), browser.cmd);
      // The sandboxed children are in user namespaces nested in the session's, still the session's host uid.
      const renderer = await waitFor('a renderer', () => hostProcs(d.instance, a.id).find((p) => p.cmd.includes('--type=renderer')));
      assert.notEqual(renderer.userns, browser.userns);
      assert.equal(renderer.uid, a.userns!.hostUidBase + 1000);
      const pc = hostProcs(d.instance, c.id).find((p) => p.cmd.includes('/usr/lib/chromium/chromium') && !p.cmd.includes('--type='));
      assert.ok(pc?.cmd.includes('--no-sandbox'));
      // Unprivileged namespaces nested in the session cannot mount or make a mount namespace.
      const nested = await d.client.exec(a.id, {
        argv: ['python3', '-c', NESTED_PY],
      });
      assert.equal(nested.stdout.trim(), 'unshare-user ok; mount EPERM; unshare-mnt EPERM', nested.stderr);
      const plain = await d.client.exec(c.id, { argv: ['python3', '-c', NESTED_PY] });
      assert.match(plain.stdout, /^unshare-user EPERM/);
      // The daemon reads the accessibility tree over the session's AT-SPI bus, which refuses host root (unmapped
      // in the session's namespace): it connects as the session's desktop user instead.
      const tree = await waitFor('the page in the a11y tree', async () => {
        const x = (await d.client.a11y(a.id, { format: 'xml' })) as string;
        return x.includes('sandboxed') ? x : undefined;
      });
      assert.match(tree, /<application[^>]*name="Chromium"/);
      // Chromium refuses --no-zygote with its sandbox (a memory fork's source asks for it): such a session starts without it.
      const z = await d.client.createSession({ image: 'default', url, userns: true, browserFlags: ['--no-zygote'] });
      try {
        const bz = hostProcs(d.instance, z.id).find((p) => p.cmd.includes('/usr/lib/chromium/chromium') && !p.cmd.includes('--type='));
        assert.ok(bz?.cmd.includes('--no-sandbox') && bz.cmd.includes('--no-zygote'), bz?.cmd);
      } finally {
        await d.client.destroySession(z.id).catch(() => {});
      }
    } finally {
      for (const s of [a, c]) await d.client.destroySession(s.id).catch(() => {});
    }
  });

  it('a disk fork re-owns the copied layer to the copy’s own range', async () => {
    const src = await d.client.createSession({ image: 'minimal', userns: true });
    let copies: SessionInfo[] = [];
    try {
      await d.client.exec(src.id, { shell: 'echo hi > /home/user/forked' });
      copies = (await d.client.forkSession(src.id, { count: 1 })).copies;
      const [f] = copies as [SessionInfo];
      assert.ok(f.userns && f.userns.hostUidBase !== src.userns!.hostUidBase);
      assert.equal(statSync(join(d.stateDir, 'sessions', f.id, 'disk', 'upper', 'home', 'user', 'forked')).uid, f.userns.hostUidBase + 1000);
      const r = await d.client.exec(f.id, {
        shell: 'stat -c %u /home/user/forked /home/user; cat /home/user/forked; echo more >> /home/user/forked && echo ok',
      });
      assert.equal(r.stdout.trim(), '1000\n1000\nhi\nok');
    } finally {
      for (const s of [src, ...copies]) await d.client.destroySession(s.id).catch(() => {});
    }
  });

  it('a restarted daemon adopts a userns session with its range and claim', async () => {
    const a = await d.client.createSession({ image: 'minimal', userns: true });
    // kill -9 of the daemon itself (the launcher's child is a wrapper).
    const exited = new Promise((r) => d.proc.once('exit', r));
    process.kill((JSON.parse(readFileSync(join(d.stateDir, 'daemon.json'), 'utf8')) as { pid: number }).pid, 'SIGKILL');
    await exited;
    d = await startDaemon(env);
    const got = await d.client.getSession(a.id);
    assert.equal(got.state, 'ready');
    assert.deepEqual(got.userns, a.userns);
    assert.ok(uidClaims(d.instance).has(a.id), 'the adopted session keeps its claim');
    const r = await d.client.exec(a.id, { shell: 'id -u; stat -c %u /etc/passwd' });
    assert.equal(r.stdout.trim(), '1000\n0');
    await d.client.destroySession(a.id);
    assert.ok(!uidClaims(d.instance).has(a.id));
  });

  it("a session's inotify instances are charged to its own host uid: one that exhausts the per-uid limit stops only itself", async () => {
    // The host's per-uid limit, whatever it is here (the kernel's default is 128; setup no longer raises it).
    const limit = Number(readFileSync('/proc/sys/fs/inotify/max_user_instances', 'utf8').trim());
    assert.ok(limit <= 65536, `fs.inotify.max_user_instances=${limit}: too many instances to open in a test`);
    const a = await d.client.createSession({ image: 'minimal' });
    const b = await d.client.createSession({ image: 'minimal' });
    let c: SessionInfo | undefined;
    let holder: Promise<unknown> | undefined;
    try {
      const install = `cat > /tmp/ino.py <<'EOF'\n${INOTIFY_PY}\nEOF`;
      for (const s of [a, b]) assert.equal((await d.client.exec(s.id, { shell: install })).exitCode, 0);
      // A opens inotify instances until the kernel refuses, and holds them.
      holder = d.client.exec(a.id, { shell: 'exec python3 /tmp/ino.py 1000000 /tmp/ino.out', timeoutMs: 300_000 }).catch((e) => e);
      const held = await waitFor('a to hold its instances', async () => {
        const r = await d.client.exec(a.id, { shell: 'cat /tmp/ino.out 2>/dev/null' });
        return /^\d+ \w+$/.test(r.stdout.trim()) ? r.stdout.trim().split(' ') : undefined;
      });
      const nA = Number(held[0]);
      // Refused by the per-uid count (EMFILE before any fd table was full), within a few of the host's whole limit:
      // inside the session's own namespace there is no such limit, so the host level's is what stopped it.
      assert.equal(held[1], 'EMFILE', held.join(' '));
      assert.ok(nA <= limit && nA >= limit - 64, `a opened ${nA} of ${limit}`);
      const host = (uid: number, n: number) =>
        execFileSync('setpriv', [`--reuid=${uid}`, `--regid=${uid}`, '--clear-groups', '/usr/bin/python3', '-c', INOTIFY_PY, String(n)], {
          encoding: 'utf8',
        }).trim();
      // The count sits on the owner of a's namespace, its base uid: that uid has none left on the host...
      assert.equal(host(a.userns!.hostUidBase, 10), '0 EMFILE');
      // ...and not on the uid its processes run as (the desktop, base + 1000), nor on the host's uid 1000.
      assert.equal(host(a.userns!.hostUidBase + 1000, 10), '10 none');
      assert.equal(host(1000, 10), '10 none');
      // b has a whole limit of its own: together they hold about twice what one uid may (the old cap: 128, ~40 sessions).
      const rb = await d.client.exec(b.id, { shell: `python3 /tmp/ino.py ${limit}`, timeoutMs: 120_000 });
      const [nB, errB] = rb.stdout.trim().split(' ');
      assert.equal(errB, 'EMFILE', rb.stdout + rb.stderr);
      assert.ok(Number(nB) >= limit - 64, `b opened ${nB} of ${limit} while a held ${nA}`);
      assert.ok(nA + Number(nB) > Math.max(limit, 128));
      console.log(`# inotify: per-uid limit ${limit}; a held ${nA}, b opened ${nB} meanwhile`);
      // A new session's desktop (D-Bus, which watches with inotify) comes up while a holds all of its own.
      c = await d.client.createSession({ image: 'minimal' });
      assert.equal(c.state, 'ready');
      const rc = await d.client.exec(c.id, { shell: `${install}\npython3 /tmp/ino.py 10` });
      assert.equal(rc.stdout.trim(), '10 none', rc.stderr);
      // Let go: a's instances are given back with its processes.
      await d.client.exec(a.id, { shell: 'kill $(cat /tmp/ino.pid)' });
      await holder;
      holder = undefined;
      await waitFor("a's instances to be given back", () => (host(a.userns!.hostUidBase, 10) === '10 none' ? true : undefined), 30_000);
    } finally {
      if (holder) {
        await d.client.exec(a.id, { shell: 'kill $(cat /tmp/ino.pid)' }).catch(() => {});
        await holder;
      }
      for (const s of [a, b, c]) if (s) await d.client.destroySession(s.id);
    }
  });

  it('bad input: userns must be a boolean', async () => {
    await assert.rejects(d.client.createSession({ image: 'minimal', userns: 'yes' as unknown as boolean }), (e: { status: number; code: string }) => {
      assert.equal(e.status, 400);
      assert.equal(e.code, 'invalid_spec');
      return true;
    });
  });
});

/**
 * Opens up to argv[1] inotify instances, in as many processes as the fd table needs, and prints "<opened> <errno
 * that stopped it, or none>". With argv[2] it writes that there, its pid to /tmp/ino.pid, and holds them until killed.
 */
const INOTIFY_PY = `
import ctypes, errno, os, resource, sys, time
l = ctypes.CDLL(None, use_errno=True)
want = int(sys.argv[1])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
per = max(16, hard - 64)
r, w = os.pipe()
k, keep = os.pipe()
total, err = 0, 'none'
while total < want and err == 'none':
    cap = min(per, want - total)
    if os.fork() == 0:
        os.close(keep)
        fds, e = [], 'none'
        while len(fds) < cap:
            fd = l.inotify_init1(0)
            if fd < 0:
                e = errno.errorcode.get(ctypes.get_errno(), '?')
                break
            fds.append(fd)
        os.write(w, ('%d %s\\n' % (len(fds), e)).encode())
        os.read(k, 1)
        os._exit(0)
    n, err = os.read(r, 64).decode().split()
    total += int(n)
out = '%d %s' % (total, err)
if len(sys.argv) > 2:
    open('/tmp/ino.pid', 'w').write(str(os.getpid()))
    open(sys.argv[2], 'w').write(out + '\\n')
    time.sleep(3600)
print(out, flush=True)
`;

/** In a child: unshare a user namespace, then try to mount and to unshare a mount namespace. */
const NESTED_PY = `
import ctypes, errno, os
l = ctypes.CDLL(None, use_errno=True)
e = lambda: errno.errorcode.get(ctypes.get_errno(), '?')
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    out = []
    if l.unshare(0x10000000) != 0:
        out.append('unshare-user ' + e())
    else:
        out.append('unshare-user ok')
        out.append('mount ' + ('ok' if l.mount(b'none', b'/tmp', b'tmpfs', 0, None) == 0 else e()))
        out.append('unshare-mnt ' + ('ok' if l.unshare(0x00020000) == 0 else e()))
    os.write(w, '; '.join(out).encode()); os._exit(0)
os.close(w); os.waitpid(pid, 0); print(os.read(r, 4096).decode())
`;
