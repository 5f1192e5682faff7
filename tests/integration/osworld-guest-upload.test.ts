import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { connect, type Socket } from 'node:net';
import { startDaemon, type TestDaemon } from '../helpers.ts';

// The guest server's /setup/upload streams into the session (the daemon holds at most a frame of it), is atomic (a failed upload leaves the old file as it was, and no temporary
// file), and its body limit is enforced as soon as it is passed: 413 at once, then at most a bounded drain
// (8 MiB or 5 s) before the connection is closed.
type S = { id: string; osworld?: { serverPort: number } };
const KiB = 1024;
const MiB = 1024 * KiB;
const LIMIT = MiB;

/** A raw HTTP/1.1 request on its own socket; resolves the status line and whether the server closed it. */
function rawRequest(port: number) {
  const sock: Socket = connect(port, '127.0.0.1');
  let head = '';
  let closed = false;
  const status = new Promise<string>((resolve) => {
    sock.on('data', (d: Buffer) => {
      head += d.toString('latin1');
      const i = head.indexOf('\r\n');
      if (i >= 0) resolve(head.slice(0, i));
    });
  });
  const gone = new Promise<void>((resolve) => sock.once('close', () => resolve()));
  sock.on('close', () => {
    closed = true;
  });
  let error = '';
  sock.on('error', (e) => {
    error = e.message;
  });
  return { sock, status, gone, text: () => head, isClosed: () => closed, error: () => error };
}

function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let t: NodeJS.Timeout;
  return Promise.race([
    p.finally(() => clearTimeout(t)),
    new Promise<T>((_, reject) => {
      t = setTimeout(() => reject(new Error(`${what}: nothing within ${ms} ms`)), ms);
    }),
  ]);
}

/**
 * A multipart /setup/upload body made as it is sent (never whole in this process): file_path, then file_data of
 * `bytes` bytes of a pattern that never repeats a 64 KiB block, hashed as it goes.
 */
function multipartUpload(path: string, bytes: number, seed: number) {
  const boundary = `drums${seed}x${Date.now()}`;
  const head = Buffer.from(
    `--${boundary}\r\nContent-Disposition: form-data; name="file_path"\r\n\r\n${path}\r\n` +
      `--${boundary}\r\nContent-Disposition: form-data; name="file_data"; filename="f"\r\nContent-Type: application/octet-stream\r\n\r\n`,
  );
  const tail = Buffer.from(`\r\n--${boundary}--\r\n`);
  const hash = createHash('sha256');
  const block = Buffer.alloc(64 * KiB);
  for (let i = 0; i < block.length; i++) block[i] = (i * 131 + seed * 7) & 0xff;
  let i = 0;
  let sent = 0;
  /** The next piece of the file's data, or undefined at its end. */
  const next = (): Buffer | undefined => {
    if (sent >= bytes) return undefined;
    const b = Buffer.from(block.subarray(0, Math.min(block.length, bytes - sent)));
    b.writeUInt32LE(i++, 0);
    b.writeUInt32LE(seed, 4);
    sent += b.length;
    hash.update(b);
    return b;
  };
  return { boundary, head, tail, next, length: head.length + bytes + tail.length, digest: () => hash.digest('hex') };
}

/**
 * Sends a generated upload with backpressure. `stopAfter`: destroy the socket after that many file bytes
 * (a client that goes away mid-upload) once `beforeStop` resolves.
 */
function streamUpload(port: number, path: string, bytes: number, seed: number, o: { stopAfter?: number; beforeStop?: () => Promise<void> } = {}) {
  const body = multipartUpload(path, bytes, seed);
  return new Promise<{ status: number; text: string; sha256: string }>((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port,
        method: 'POST',
        path: '/setup/upload',
        headers: { 'content-type': `multipart/form-data; boundary=${body.boundary}`, 'content-length': body.length },
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => {
          text += d;
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, text, sha256: body.digest() }));
      },
    );
    req.on('error', reject);
    req.write(body.head);
    let fileSent = 0;
    const pump = async () => {
      for (;;) {
        if (o.stopAfter !== undefined && fileSent >= o.stopAfter) {
          await o.beforeStop?.();
          req.destroy(new Error('client went away'));
          return;
        }
        const b = body.next();
        if (!b) break;
        fileSent += b.length;
        if (!req.write(b)) await new Promise<void>((r) => req.once('drain', r));
      }
      req.end(body.tail);
    };
    pump().catch(reject);
  });
}

/** The daemon's node process (bin/drums may run it under tini). */
function nodePid(pid: number): number {
  if (readFileSync(`/proc/${pid}/comm`, 'utf8').trim() !== 'tini') return pid;
  const kids = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).map(Number);
  // tini also reaps orphaned session processes: the daemon is the child running the CLI.
  const node = kids.find((k) => readFileSync(`/proc/${k}/cmdline`, 'utf8').includes('src/cli/main.ts'));
  assert.ok(node, `no daemon among tini ${pid}'s children ${kids.join(' ')}`);
  return node;
}
const statusKiB = (pid: number, field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]);

/**
 * For one describe block: a daemon of its own and two OSWorld sessions with room for N bodies of
 * `size` bytes between them, destroyed after the block; `sh` runs a shell command in a session.
 */
function bigBodies(n: number, size: number) {
  const big = {
    d: undefined as unknown as TestDaemon,
    sessions: [] as S[],
    sh: async (s: S, cmd: string) => (await big.d.client.exec(s.id, { shell: cmd, timeoutMs: 120_000 })).stdout,
  };
  before(async () => {
    big.d = await startDaemon({ DRUMS_OSWORLD_MAX_BODY: String(512 * MiB) });
    for (let k = 0; k < 2; k++) {
      big.sessions.push(
        (await big.d.client.createSession({
          image: 'minimal',
          diskMb: Math.max(1024, Math.ceil(n / 2) * (size / MiB) + 256),
          labels: { 'drums.osworld': '1' },
        } as never)) as unknown as S,
      );
    }
  });
  after(async () => {
    try {
      for (const s of big.sessions) await big.d.client.destroySession(s.id).catch(() => {});
    } finally {
      await big.d.finish();
    }
  });
  return big;
}

/**
 * The process's RSS growth (MiB) while `work` runs: VmHWM reset to the current RSS first (clear_refs 5),
 * and RSS sampled every 20 ms as a check; the larger of the two peaks, less the RSS at the start.
 */
async function rssGrowth<T>(pid: number, work: () => Promise<T>): Promise<{ result: T; baseMiB: number; peakMiB: number; growthMiB: number }> {
  writeFileSync(`/proc/${pid}/clear_refs`, '5');
  const base = statusKiB(pid, 'VmRSS');
  let peak = base;
  const sampler = setInterval(() => {
    peak = Math.max(peak, statusKiB(pid, 'VmRSS'));
  }, 20);
  let result: T;
  try {
    result = await work();
  } finally {
    clearInterval(sampler);
  }
  peak = Math.max(peak, statusKiB(pid, 'VmHWM'));
  return { result, baseMiB: base / 1024, peakMiB: peak / 1024, growthMiB: (peak - base) / 1024 };
}

describe('osworld guest upload: large bodies stream into the session with bounded daemon memory', () => {
  // DRUMS_TEST_UPLOADS and DRUMS_TEST_UPLOAD_MIB change the load for a measurement (defaults: 4 of 320 MiB).
  const N = Number(process.env.DRUMS_TEST_UPLOADS) || 4;
  const SIZE = (Number(process.env.DRUMS_TEST_UPLOAD_MIB) || 320) * MiB;
  const BOUND_MIB = 160;
  const big = bigBodies(N, SIZE);
  const { sessions, sh } = big;

  it(`${N} concurrent ${SIZE / MiB} MiB uploads to two sessions arrive byte-exact while the daemon's RSS grows by under ${BOUND_MIB} MiB`, async () => {
    const {
      result: results,
      baseMiB,
      peakMiB,
      growthMiB,
    } = await rssGrowth(nodePid(big.d.proc.pid!), () =>
      Promise.all(Array.from({ length: N }, (_, k) => streamUpload(sessions[k % 2]!.osworld!.serverPort, `/home/user/big/${k}.bin`, SIZE, k + 1))),
    );
    process.stderr.write(
      `upload RSS: ${N} x ${SIZE / MiB} MiB: base ${baseMiB.toFixed(0)} MiB, peak ${peakMiB.toFixed(0)} MiB: +${growthMiB.toFixed(0)} MiB\n`,
    );
    for (const [k, r] of results.entries()) {
      assert.equal(r.status, 200, r.text);
      assert.equal(r.text, `File Uploaded: ${SIZE} bytes`);
      const got = (await sh(sessions[k % 2]!, `sha256sum /home/user/big/${k}.bin`)).split(' ')[0];
      assert.equal(got, r.sha256, `upload ${k} arrived byte-exact`);
    }
    for (const [j, s] of sessions.entries()) {
      const want = Array.from({ length: N }, (_, k) => k).filter((k) => k % 2 === j);
      const got = (await sh(s, 'ls -A /home/user/big')).split('\n').filter(Boolean);
      assert.deepEqual(got.sort(), want.map((k) => `${k}.bin`).sort(), 'no temporary file is left');
    }
    // Buffered, the daemon held every body whole, and copies of it: +4859 MiB for 4 x 320 MiB. Streamed, what
    // it holds does not grow with the bodies (+43 to +100 MiB for 4 x 192 MiB, about +70 for 1 x 192 and for
    // 4 x 384 alike: the socket's dropped chunks until V8 collects them), so the bound is flat: half a body.
    assert.ok(growthMiB < BOUND_MIB, `the daemon's RSS grew by ${growthMiB.toFixed(0)} MiB during ${N} uploads of ${SIZE / MiB} MiB`);
    for (const s of sessions) await sh(s, 'rm -rf /home/user/big');
  });

  it('a route that holds its body whole has the smaller limit (DRUMS_OSWORLD_MAX_BUFFERED_BODY, 16 MiB)', async () => {
    const port = sessions[0]!.osworld!.serverPort;
    const big = await fetch(`http://127.0.0.1:${port}/run_bash_script`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ script: `x='${'a'.repeat(17 * MiB)}'` }),
    });
    assert.deepEqual([big.status, await big.json()], [413, { status: 'error', message: `request body is over ${16 * MiB} bytes` }]);
    const small = await fetch(`http://127.0.0.1:${port}/run_bash_script`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ script: `printf %s '${'a'.repeat(MiB)}' | wc -c` }),
    });
    const r = (await small.json()) as { returncode: number; output: string };
    assert.equal(small.status, 200, JSON.stringify(r));
    assert.equal(r.output.trim(), String(MiB), JSON.stringify(r).slice(0, 300));
  });

  it('a client that goes away mid-upload leaves the old file intact and no temporary file', async () => {
    const s = sessions[0]!;
    await sh(s, "mkdir -p /home/user/ab && printf 'old contents\\n' > /home/user/ab/keep");
    // The writer's temporary file fills while the body is still arriving (it is not held in the daemon), and
    // the client leaves once some of it is in the session.
    let grew = 0;
    const tempGrew = async () => {
      for (let t0 = Date.now(); Date.now() - t0 < 60_000 && !grew; ) {
        grew = Number((await sh(s, 'cat /home/user/ab/.drums-upload.* 2>/dev/null | wc -c')).trim());
        if (!grew) await new Promise((r) => setTimeout(r, 200));
      }
    };
    await assert.rejects(
      streamUpload(s.osworld!.serverPort, '/home/user/ab/keep', 256 * MiB, 9, { stopAfter: 32 * MiB, beforeStop: tempGrew }),
      /socket hang up|client went away/,
    );
    assert.ok(grew > 0, 'a temporary file filled in the session while the body was arriving');
    let left = '';
    for (let t0 = Date.now(); Date.now() - t0 < 30_000; ) {
      left = await sh(s, 'ls -A /home/user/ab');
      if (left === 'keep\n') break;
      await new Promise((r) => setTimeout(r, 200));
    }
    assert.equal(left, 'keep\n', 'the temporary file is removed');
    assert.equal(await sh(s, 'cat /home/user/ab/keep'), 'old contents\n', 'the old file is as it was');
    assert.equal(await sh(s, 'ls -A /tmp | grep -c drums-upload || true'), '0\n');
  });
});

describe('osworld guest /file: large replies stream from the session with bounded daemon memory', () => {
  const N = Number(process.env.DRUMS_TEST_UPLOADS) || 4;
  const SIZE = (Number(process.env.DRUMS_TEST_UPLOAD_MIB) || 320) * MiB;
  const BOUND_MIB = 160;
  const big = bigBodies(N, SIZE);
  const { sessions, sh } = big;

  it(`${N} concurrent /file downloads of ${SIZE / MiB} MiB files arrive byte-exact while the daemon's RSS grows by under ${BOUND_MIB} MiB`, async () => {
    // Files made in the sessions, on a daemon of its own (an upload's garbage would hide a buffered reply).
    const digests: string[] = [];
    for (let k = 0; k < N; k++) {
      const out = await sh(
        sessions[k % 2]!,
        `mkdir -p /home/user/big && head -c ${SIZE} /dev/urandom > /home/user/big/${k}.bin && sha256sum /home/user/big/${k}.bin`,
      );
      digests.push(out.split(' ')[0]!);
    }
    const {
      result: got,
      baseMiB,
      growthMiB,
    } = await rssGrowth(nodePid(big.d.proc.pid!), () =>
      Promise.all(
        Array.from({ length: N }, async (_, k) => {
          const r = await fetch(`http://127.0.0.1:${sessions[k % 2]!.osworld!.serverPort}/file`, {
            method: 'POST',
            body: new URLSearchParams({ file_path: `/home/user/big/${k}.bin` }),
          });
          const hash = createHash('sha256');
          let bytes = 0;
          for await (const c of r.body!) {
            hash.update(c);
            bytes += c.length;
          }
          return { status: r.status, bytes, sha256: hash.digest('hex') };
        }),
      ),
    );
    process.stderr.write(`download RSS: ${N} x ${SIZE / MiB} MiB: base ${baseMiB.toFixed(0)} MiB: +${growthMiB.toFixed(0)} MiB\n`);
    for (const [k, r] of got.entries()) assert.deepEqual(r, { status: 200, bytes: SIZE, sha256: digests[k] });
    assert.ok(growthMiB < BOUND_MIB, `the daemon's RSS grew by ${growthMiB.toFixed(0)} MiB during ${N} downloads of ${SIZE / MiB} MiB`);
    for (const s of sessions) await sh(s, 'rm -rf /home/user/big');
  });
});

describe('osworld guest upload: atomic, and the body limit enforced early', () => {
  let d: TestDaemon;
  let s: S;
  let base: string;
  let port: number;
  before(async () => {
    d = await startDaemon({ DRUMS_OSWORLD_MAX_BODY: String(LIMIT) });
    s = (await d.client.createSession({ image: 'minimal', diskMb: 64, labels: { 'drums.osworld': '1' } } as never)) as unknown as S;
    port = s.osworld!.serverPort;
    base = `http://127.0.0.1:${port}`;
  });
  after(async () => {
    try {
      if (s) await d.client.destroySession(s.id).catch(() => {});
    } finally {
      await d.finish();
    }
  });

  const sh = async (cmd: string) => (await d.client.exec(s.id, { shell: cmd })).stdout;
  const upload = (bytes: number, path: string, fill = 0x61) => {
    const form = new FormData();
    form.set('file_path', path);
    form.set('file_data', new Blob([Buffer.alloc(bytes, fill)]), 'f');
    return fetch(`${base}/setup/upload`, { method: 'POST', body: form });
  };

  it('an upload that fails on a full disk leaves the old file intact and no temporary file', async () => {
    await sh("mkdir -p /home/user/up && printf 'old contents\\n' > /home/user/up/keep && chmod 640 /home/user/up/keep");
    // Fill the session's disk (its own 64 MiB quota), then upload more than is left over the old file.
    await sh('dd if=/dev/zero of=/home/user/fill bs=1M 2>/dev/null; sync; true');
    const r = await upload(900 * KiB, '/home/user/up/keep');
    const body = await r.text();
    assert.equal(r.status, 507, body);
    assert.match((JSON.parse(body) as { error: string }).error, /Failed to upload file: .*No space left on device/);
    assert.equal(await sh('cat /home/user/up/keep'), 'old contents\n', 'the old file is as it was');
    assert.equal(await sh('ls -A /home/user/up'), 'keep\n', 'no temporary file is left');
    // With room again the same upload replaces the file whole and keeps its mode.
    await sh('rm -f /home/user/fill');
    const ok = await upload(900 * KiB, '/home/user/up/keep');
    assert.equal(ok.status, 200, await ok.text());
    assert.equal((await sh('stat -c "%s %a" /home/user/up/keep')).trim(), `${900 * KiB} 640`);
    assert.equal(await sh('ls -A /home/user/up'), 'keep\n');
    // A new file in a new directory gets the umask's mode; a directory target is 400 and stays a directory.
    const fresh = await upload(10, '/home/user/up/new/dir/f');
    assert.equal(fresh.status, 200, await fresh.text());
    assert.equal((await sh('stat -c "%s %a" /home/user/up/new/dir/f')).trim(), '10 644');
    const dir = await upload(10, '/home/user/up/new');
    assert.equal(dir.status, 400, await dir.text());
    assert.equal(await sh('ls -A /home/user/up/new'), 'dir\n');
    // A symlink at the target is followed (the link stays, its target gets the data); a loop of links is 400.
    await sh('ln -s up/keep /home/user/lnk && ln -s loop /home/user/loop');
    const vialink = await upload(5, '/home/user/lnk');
    assert.equal(vialink.status, 200, await vialink.text());
    assert.equal((await sh('readlink /home/user/lnk; stat -c %s /home/user/up/keep')).trim(), 'up/keep\n5');
    const loop = await upload(5, '/home/user/loop');
    assert.equal(loop.status, 400, await loop.text());
    assert.equal(await sh('ls -A /home/user/up'), 'keep\nnew\n', 'no temporary file is left');
  });

  it('a declared Content-Length over the limit is 413 before any body byte, and the connection is closed soon after', async () => {
    await sh("printf 'old\\n' > /home/user/declared");
    const c = rawRequest(port);
    c.sock.write(
      `POST /setup/upload HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: multipart/form-data; boundary=xyz\r\nContent-Length: ${2 * LIMIT}\r\n\r\n--xyz\r\n`,
    );
    // The body is never sent: a server that waits for it to end never answers.
    assert.match(await within(c.status, 20_000, 'the 413'), /^HTTP\/1\.1 413 /);
    await within(c.gone, 20_000, 'the close');
    assert.match(c.text(), /request body is over 1048576 bytes/);
    assert.equal(await sh('cat /home/user/declared'), 'old\n');
  });

  it('a chunked body that grows past the limit is refused at once and the server stops reading', async () => {
    const c = rawRequest(port);
    c.sock.write('POST /setup/upload HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: multipart/form-data; boundary=xyz\r\nTransfer-Encoding: chunked\r\n\r\n');
    const chunk = Buffer.alloc(64 * KiB, 0x62);
    let sent = 0;
    let answered = false;
    void c.status.then(() => {
      answered = true;
    });
    // Keep streaming as a hostile client would. A server that reads to the end never answers, and the cap ends
    // the loop; one that stops reading answers 413 and then closes the socket under the writer.
    while (!c.isClosed() && sent < 256 * MiB) {
      c.sock.write(`${chunk.length.toString(16)}\r\n`);
      c.sock.write(chunk);
      const ok = c.sock.write('\r\n');
      sent += chunk.length;
      if (!ok) await within(new Promise<void>((r) => c.sock.once('drain', r).once('close', r)), 30_000, 'drain').catch(() => {});
    }
    assert.ok(answered, `no answer after ${sent} bytes (${c.error() || 'no socket error'})`);
    assert.match(await c.status, /^HTTP\/1\.1 413 /);
    assert.ok(c.isClosed(), `the server kept reading: ${sent} bytes sent`);
    assert.ok(sent < 64 * MiB, `${sent} bytes sent before the server closed`);
    c.sock.destroy();
    // The session and its guest server carry on.
    const small = await upload(1000, '/home/user/after');
    assert.equal(small.status, 200, await small.text());
  });

  it('file_data before file_path, and other forms: the same answers as a whole-form parse', async () => {
    await sh("mkdir -p /home/user/ord && printf 'old\\n' > /home/user/ord/f");
    const form = new FormData();
    form.set('file_data', new Blob([Buffer.alloc(300 * KiB, 0x63)]), 'f');
    form.set('file_path', '/home/user/ord/f');
    const r = await fetch(`${base}/setup/upload`, { method: 'POST', body: form });
    assert.equal(r.status, 200, await r.text());
    const want = createHash('sha256')
      .update(Buffer.alloc(300 * KiB, 0x63))
      .digest('hex');
    assert.equal((await sh('sha256sum < /home/user/ord/f')).split(' ')[0], want);
    // A file with no file_path, a path with a NUL, a form that is not multipart: 400, and nothing left behind.
    const nopath = new FormData();
    nopath.set('file_data', new Blob([Buffer.alloc(200 * KiB, 0x64)]), 'f');
    const a = await fetch(`${base}/setup/upload`, { method: 'POST', body: nopath });
    assert.equal(a.status, 400, await a.text());
    const nul = new FormData();
    nul.set('file_path', '/home/user/ord/f\0x');
    nul.set('file_data', new Blob([Buffer.alloc(10, 0x64)]), 'f');
    const b = await fetch(`${base}/setup/upload`, { method: 'POST', body: nul });
    assert.deepEqual([b.status, await b.json()], [400, { error: 'file_path: the path contains a NUL byte' }]);
    const c = await fetch(`${base}/setup/upload`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"file_path":"/home/user/ord/f"}',
    });
    assert.deepEqual([c.status, await c.json()], [400, { error: 'file_path and file_data are required' }]);
    assert.equal(await sh('ls -A /home/user/ord; ls -A /tmp | grep -c drums-upload || true'), 'f\n0\n');
  });

  it('an upload whose body crosses the limit mid-stream is 413, leaves the old file intact and no temporary file', async () => {
    await sh("mkdir -p /home/user/cross && printf 'old\\n' > /home/user/cross/f");
    const body = multipartUpload('/home/user/cross/f', 4 * MiB, 3);
    const c = rawRequest(port);
    c.sock.write(
      `POST /setup/upload HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: multipart/form-data; boundary=${body.boundary}\r\nTransfer-Encoding: chunked\r\n\r\n`,
    );
    const chunk = (b: Buffer) => {
      c.sock.write(`${b.length.toString(16)}\r\n`);
      c.sock.write(b);
      return c.sock.write('\r\n');
    };
    chunk(body.head);
    for (let b = body.next(); b && !c.isClosed(); b = body.next()) {
      if (!chunk(b)) await within(new Promise<void>((r) => c.sock.once('drain', r).once('close', r)), 30_000, 'drain').catch(() => {});
    }
    assert.match(await within(c.status, 20_000, 'the 413'), /^HTTP\/1\.1 413 /);
    c.sock.destroy();
    let left = '';
    for (let t0 = Date.now(); Date.now() - t0 < 30_000; ) {
      left = await sh('ls -A /home/user/cross');
      if (left === 'f\n') break;
      await new Promise((r) => setTimeout(r, 200));
    }
    assert.equal(left, 'f\n', 'no temporary file is left');
    assert.equal(await sh('cat /home/user/cross/f'), 'old\n');
  });
});
