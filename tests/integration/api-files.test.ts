import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync, realpathSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import type { DrumsApiError, SessionInfo } from '../../src/client/client.ts';
import { startDaemon, type TestDaemon } from '../helpers.ts';

// Session files through the API (confinement), streaming exec, and an X server crash → `broken`.
describe('session files, streaming exec, X crash (minimal image)', () => {
  let d: TestDaemon;
  let s: SessionInfo;
  const code = (status: number, c: string) => (e: DrumsApiError) => {
    assert.equal(e.status, status, `${e.code}: ${e.message}`);
    assert.equal(e.code, c, e.message);
    return true;
  };

  before(async () => {
    d = await startDaemon();
    s = await d.client.createSession({ image: 'minimal' });
  });
  after(async () => {
    if (s) await d.client.destroySession(s.id).catch(() => {});
    await d.finish();
  });

  it('writes, reads, stats, lists and deletes files (binary-safe, parents created)', async () => {
    const bytes = Buffer.from([0, 1, 2, 255, 254, 10, 13, 0]);
    await d.client.writeFile(s.id, '/home/user/a/b/c.bin', bytes, { mode: '0600' });
    assert.deepEqual(await d.client.readFile(s.id, '/home/user/a/b/c.bin'), bytes);
    const st = await d.client.statFile(s.id, '/home/user/a/b/c.bin');
    assert.deepEqual([st.type, st.size, st.mode, st.uid, st.gid, st.name], ['file', 8, '0600', 1000, 1000, 'c.bin']);
    await d.client.writeFile(s.id, '/home/user/a/b/ünï cödé; rm -rf ~', 'x');
    const ls = await d.client.listFiles(s.id, '/home/user/a/b');
    assert.deepEqual(
      ls.entries.map((e) => e.name),
      ['c.bin', 'ünï cödé; rm -rf ~'],
    );
    assert.equal((await d.client.exec(s.id, { argv: ['cat', '/home/user/a/b/ünï cödé; rm -rf ~'] })).stdout, 'x');
    assert.equal((await d.client.statFile(s.id, '/home/user/a')).type, 'directory');
    await assert.rejects(d.client.deleteFile(s.id, '/home/user/a'), code(409, 'directory_not_empty'));
    await d.client.deleteFile(s.id, '/home/user/a', { recursive: true });
    await assert.rejects(d.client.statFile(s.id, '/home/user/a'), code(404, 'file_not_found'));
  });

  it('maps errors to codes and refuses bad paths', async () => {
    await assert.rejects(d.client.readFile(s.id, '/nope/x'), code(404, 'file_not_found'));
    await assert.rejects(d.client.readFile(s.id, '/etc/shadow'), code(403, 'file_forbidden'));
    await assert.rejects(d.client.readFile(s.id, '/etc'), code(400, 'is_a_directory'));
    await assert.rejects(d.client.listFiles(s.id, '/etc/hostname'), code(400, 'not_a_directory'));
    await assert.rejects(d.client.readFile(s.id, '/dev/zero'), code(400, 'not_a_regular_file'));
    await assert.rejects(d.client.writeFile(s.id, '/etc/passwd', 'pwned'), code(403, 'file_forbidden'));
    await assert.rejects(d.client.readFile(s.id, 'relative/path'), code(400, 'invalid_path'));
    await assert.rejects(d.client.readFile(s.id, '/a\0b'), code(400, 'invalid_path'));
    await assert.rejects(d.client.readFile(s.id, '/' + 'a'.repeat(5000)), code(400, 'invalid_path'));
    await assert.rejects(d.client.deleteFile(s.id, '/', { root: true, recursive: true }), code(400, 'invalid_path'));
    await assert.rejects(d.client.writeFile(s.id, '/tmp/m', 'x', { mode: '99' }), code(400, 'invalid_request'));
    await assert.rejects(d.client.readFile('s0000000000', '/etc/hostname'), code(404, 'session_not_found'));
    const r = await fetch(`${d.url}/v1/sessions/${s.id}/files`, { headers: { authorization: `Bearer ${d.token}` } });
    assert.equal(r.status, 400);
  });

  it('paths resolve inside the session: symlinks, .., /proc/self/root never reach the host', async () => {
    // A host file the session must never see.
    const hostDir = mkdtempSync('/var/tmp/drums-host-secret-');
    const secret = join(hostDir, 'secret');
    writeFileSync(secret, 'HOST SECRET\n', { mode: 0o644 });
    try {
      // A symlink inside the session to the host path resolves in the session's root, where it does not exist.
      await d.client.exec(s.id, { argv: ['ln', '-s', secret, '/home/user/link'] });
      await assert.rejects(d.client.readFile(s.id, '/home/user/link'), code(404, 'file_not_found'));
      await assert.rejects(d.client.readFile(s.id, `/home/user/../../../../..${secret}`), code(404, 'file_not_found'));
      await assert.rejects(d.client.readFile(s.id, `/proc/self/root${secret}`), code(404, 'file_not_found'));
      // The session's /etc/hostname is its own, whichever way it is named.
      for (const p of ['/etc/hostname', '/home/../etc/hostname', '/proc/self/root/etc/hostname']) {
        assert.equal((await d.client.readFile(s.id, p, { root: true })).toString().trim(), s.id, p);
      }
      // Another process's root is not reachable even as root-in-session (no CAP_SYS_PTRACE).
      await assert.rejects(d.client.readFile(s.id, '/proc/1/root/etc/hostname', { root: true }), code(403, 'file_forbidden'));
      // A symlink to /etc/shadow: root-in-session reads the SESSION's shadow, not the host's.
      await d.client.exec(s.id, { argv: ['ln', '-s', '/etc/shadow', '/home/user/sh'] });
      await assert.rejects(d.client.readFile(s.id, '/home/user/sh'), code(403, 'file_forbidden'));
      const sessShadow = (await d.client.readFile(s.id, '/home/user/sh', { root: true })).toString();
      assert.notEqual(sessShadow, readFileSync('/etc/shadow', 'utf8'));
      // Writing through a symlink to a host path writes inside the session; the host file is untouched.
      await d.client.exec(s.id, { argv: ['ln', '-s', secret, '/tmp/wlink'] });
      await assert.rejects(d.client.writeFile(s.id, '/tmp/wlink', 'overwritten', { root: true }), code(404, 'file_not_found'));
      await d.client.exec(s.id, { argv: ['mkdir', '-p', hostDir], root: true });
      await d.client.writeFile(s.id, '/tmp/wlink', 'overwritten', { root: true });
      assert.equal(readFileSync(secret, 'utf8'), 'HOST SECRET\n');
      assert.equal((await d.client.readFile(s.id, secret, { root: true })).toString(), 'overwritten');
      await d.client.deleteFile(s.id, `/proc/self/root${hostDir}`, { root: true, recursive: true });
      assert.ok(existsSync(secret), 'deleting the same path in the session leaves the host alone');
    } finally {
      rmSync(hostDir, { recursive: true, force: true });
    }
  });

  it('writing over an image file changes only the session upper layer', async () => {
    const rec = JSON.parse(readFileSync(join(d.stateDir, 'sessions', s.id, 'session.json'), 'utf8')) as { imageDir: string };
    assert.match(rec.imageDir, /\/images\/minimal-[0-9a-f]{12}\/rootfs$/);
    // The overlay's lower layer is the session dir's `lower`: a link to the image rootfs, or (in a session with
    // its own user namespace) the image's idmapped mount, the same files (same device and inodes), no copy.
    const mountinfo = readFileSync('/proc/self/mountinfo', 'utf8').split('\n');
    const overlay = mountinfo.find((l) => l.includes(join(d.stateDir, 'sessions', s.id, 'bundle', 'rootfs')))!;
    assert.match(overlay, /lowerdir=lower,/);
    const lowerdir = join(d.stateDir, 'sessions', s.id, 'lower');
    if (s.userns)
      assert.ok(
        mountinfo.some((l) => l.split(' ')[4] === lowerdir),
        'the idmapped image is mounted on lower',
      );
    else assert.equal(realpathSync(lowerdir), rec.imageDir);
    const [a, b] = [statSync(join(lowerdir, 'etc', 'debian_version')), statSync(join(rec.imageDir, 'etc', 'debian_version'))];
    assert.deepEqual([a.dev, a.ino], [b.dev, b.ino]);
    const before = readFileSync(join(lowerdir, 'etc', 'debian_version'));
    await d.client.writeFile(s.id, '/etc/debian_version', 'changed\n', { root: true });
    assert.equal((await d.client.readFile(s.id, '/etc/debian_version')).toString(), 'changed\n');
    assert.deepEqual(readFileSync(join(lowerdir, 'etc', 'debian_version')), before, 'the image is unchanged');
    assert.equal(readFileSync(join(d.stateDir, 'sessions', s.id, 'disk', 'upper', 'etc', 'debian_version'), 'utf8'), 'changed\n');
    assert.ok(statSync(join(lowerdir, 'etc', 'debian_version')).size > 2);
  });

  it('CLI cp copies in and out', async () => {
    const dir = mkdtempSync('/tmp/drums-cp-');
    try {
      writeFileSync(join(dir, 'in.txt'), 'via cp\n');
      const up = d.cli(['session', 'cp', join(dir, 'in.txt'), `${s.id}:/home/user/cp/in.txt`]);
      assert.equal(up.status, 0, up.stderr);
      const down = d.cli(['session', 'cp', `${s.id}:/home/user/cp/in.txt`, join(dir, 'out.txt')]);
      assert.equal(down.status, 0, down.stderr);
      assert.equal(readFileSync(join(dir, 'out.txt'), 'utf8'), 'via cp\n');
      const bad = d.cli(['session', 'cp', `${s.id}:/nope`, join(dir, 'x')]);
      assert.equal(bad.status, 2);
      assert.match(bad.stderr, /file_not_found/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('streaming exec sends output as it comes, then the exit', async () => {
    const seen: { stream: string; data: string; at: number }[] = [];
    const t0 = performance.now();
    const fin = await d.client.execStream(s.id, { shell: 'echo one; sleep 0.5; echo two >&2; exit 5' }, (stream, data) =>
      seen.push({ stream, data, at: performance.now() - t0 }),
    );
    assert.equal(fin.exitCode, 5);
    assert.deepEqual(
      seen.map((x) => [x.stream, x.data]),
      [
        ['stdout', 'one\n'],
        ['stderr', 'two\n'],
      ],
    );
    assert.ok(seen[1]!.at - seen[0]!.at > 300, 'the first line arrived before the command finished');
    const slow = await d.client.execStream(s.id, { argv: ['sleep', '10'], timeoutMs: 300 }, () => {});
    assert.equal(slow.timedOut, true);
    const r = await fetch(`${d.url}/v1/sessions/${s.id}/exec?stream=1`, {
      method: 'POST',
      headers: { authorization: `Bearer ${d.token}` },
      body: '{"argv": 3}',
    });
    assert.equal(r.status, 400);
  });

  it('exec honours cwd, env and stdin, caps the output and says so, and refuses bad fields', async () => {
    const r = await d.client.exec(s.id, { shell: 'pwd; echo "$GREETING"; cat; id -u', cwd: '/tmp', env: { GREETING: 'hi there' }, stdin: 'from stdin\n' });
    assert.equal(r.exitCode, 0, r.stderr);
    assert.deepEqual(r.stdout.split('\n'), ['/tmp', 'hi there', 'from stdin', '1000', '']);
    assert.equal(r.truncated, false);
    const big = await d.client.exec(s.id, { shell: 'head -c 100000 /dev/zero | tr "\\0" x; echo done >&2', maxOutputBytes: 1000 });
    assert.equal(big.truncated, true);
    assert.ok(big.stdout.length <= 1000 && big.stdout.length > 0, `stdout ${big.stdout.length} bytes`);
    assert.equal((await d.client.exec(s.id, { argv: ['id', '-u'], root: true })).stdout.trim(), '0');
    for (const bad of [
      { argv: ['true'], cwd: 'relative' },
      { argv: ['true'], stdin: 5 },
      { argv: ['true'], maxOutputBytes: -1 },
      { argv: ['true'], shell: 'true' },
      { argv: ['true'], bogus: 1 },
    ]) {
      await assert.rejects(d.client.exec(s.id, bad as never), (e: DrumsApiError) => e.status === 400);
    }
  });

  it('the event stream sends JPEG frames at the asked rate', async () => {
    const ac = new AbortController();
    const res = await fetch(`${d.url}/v1/sessions/${s.id}/events?fps=4`, { headers: { authorization: `Bearer ${d.token}` }, signal: ac.signal });
    assert.equal(res.status, 200);
    const frames: { generation: number; width: number; format: string; data: string }[] = [];
    const t0 = performance.now();
    let buf = '';
    const reader = res.body!.getReader();
    try {
      while (performance.now() - t0 < 2000) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += Buffer.from(value).toString('utf8');
        let i: number;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const ev = buf.slice(0, i);
          buf = buf.slice(i + 2);
          if (/^event: frame$/m.test(ev)) frames.push(JSON.parse(/^data: (.*)$/m.exec(ev)![1]!));
        }
      }
    } finally {
      ac.abort();
      await reader.cancel().catch(() => {});
    }
    // 4 fps for 2 s: about 8 frames (the first comes at once); never more than the rate allows.
    assert.ok(frames.length >= 4 && frames.length <= 10, `${frames.length} frames in 2 s at fps=4`);
    const jpeg = Buffer.from(frames[0]!.data, 'base64');
    assert.deepEqual([...jpeg.subarray(0, 2)], [0xff, 0xd8]);
    assert.equal(frames[0]!.format, 'jpeg');
    await assert.rejects(d.client.request('GET', `/v1/sessions/${s.id}/events?fps=50`), code(400, 'invalid_request'));
  });

  it('an action or screenshot during a reset gets 409 session_resetting; the new generation works after it', async () => {
    const before = (await d.client.getSession(s.id)).generation;
    const reset = d.client.resetSession(s.id);
    // Catch the session while it is resetting (a minimal reset takes a few hundred ms).
    let seen = false;
    for (let i = 0; i < 400 && !seen; i++) {
      if ((await d.client.getSession(s.id)).state === 'resetting') seen = true;
      else await new Promise((r) => setTimeout(r, 2));
    }
    assert.ok(seen, 'saw the session in state resetting');
    await assert.rejects(d.client.act(s.id, { actions: [{ type: 'click', x: 1, y: 1 }] }), code(409, 'session_resetting'));
    await assert.rejects(d.client.screenshotEx(s.id, {}), code(409, 'session_resetting'));
    const r = await reset;
    assert.equal(r.generation, before + 1);
    const ok = await d.client.act(s.id, { actions: [{ type: 'click', x: 1, y: 1 }], generation: r.generation });
    assert.equal(ok.generation, r.generation);
  });

  it('an X server crash marks the session broken (the daemon lives); reset repairs it', async () => {
    await d.client.screenshotEx(s.id, { format: 'png' }); // the daemon holds an X connection now
    // Kill this session's Xvfb from inside the session (its own PID namespace; found by executable).
    await d.client.exec(s.id, { shell: 'for p in /proc/[0-9]*; do [ "$(readlink $p/exe)" = /usr/bin/Xvfb ] && kill -KILL ${p#/proc/}; done; true' });
    const end = Date.now() + 15_000;
    let state = '';
    while (Date.now() < end && (state = (await d.client.getSession(s.id)).state) !== 'broken') await new Promise((r) => setTimeout(r, 100));
    assert.equal(state, 'broken');
    assert.match((await d.client.getSession(s.id)).brokenReason ?? '', /X server|exited/);
    await assert.rejects(d.client.screenshotEx(s.id, {}), code(409, 'session_broken'));
    await assert.rejects(d.client.act(s.id, { actions: [{ type: 'click', x: 1, y: 1 }] }), code(409, 'session_broken'));
    const r = await d.client.resetSession(s.id);
    assert.equal(r.state, 'ready');
    const shot = await d.client.screenshotEx(s.id, { format: 'raw' });
    assert.equal(shot.generation, r.generation);
    await assert.rejects(d.client.screenshotEx(s.id, { generation: r.generation - 1 }), code(409, 'stale_generation'));
  });
});
