import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import { startDaemon, type TestDaemon } from '../helpers.ts';

// The guest server's /setup/upload is atomic (a failed upload leaves the old file as it was, and no temporary
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
});
