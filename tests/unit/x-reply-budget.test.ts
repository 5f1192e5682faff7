// The daemon's X client against an X server a session controls (issue 27, finding 7): a fake server on a unix socket
// that claims a reply of 16 GiB (length 0xffffffff) must fail the open or the request with a bounded error, at once,
// without the client allocating or buffering the claim; a server answering in budget still works; the cookie goes out
// in the connection setup.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isDisplayError } from '../../src/display/errors.ts';
import { XConnection } from '../../src/display/x-connection.ts';
import { newXCookie, setupRequest } from '../../src/display/xauth.ts';

const XTEST_OPCODE = 132;
const BIGREQ_OPCODE = 133;
const HUGE = 0xffffffff;

/** A minimal connection setup success reply: one 640x480 screen, one depth of 24 with one TrueColor visual. */
function setupReply(width = 640, height = 480): Buffer {
  const vendor = Buffer.from('fake');
  const fixed = Buffer.alloc(32);
  fixed.writeUInt32LE(1, 0); // release
  fixed.writeUInt32LE(0x00200000, 4); // resource id base
  fixed.writeUInt32LE(0x001fffff, 8); // resource id mask
  fixed.writeUInt16LE(vendor.length, 16);
  fixed.writeUInt16LE(0xffff, 18); // max request length
  fixed[20] = 1; // screens
  fixed[21] = 1; // pixmap formats
  fixed[26] = 8; // min keycode
  fixed[27] = 255; // max keycode
  const format = Buffer.from([24, 32, 32, 0, 0, 0, 0, 0]);
  const screen = Buffer.alloc(40);
  screen.writeUInt32LE(0x100, 0); // root
  screen.writeUInt32LE(0x20, 4); // colormap
  screen.writeUInt32LE(0xffffff, 8);
  screen.writeUInt16LE(width, 20);
  screen.writeUInt16LE(height, 22);
  screen.writeUInt16LE(200, 24);
  screen.writeUInt16LE(150, 26);
  screen.writeUInt16LE(1, 28);
  screen.writeUInt16LE(1, 30);
  screen.writeUInt32LE(0x21, 32); // root visual
  screen[38] = 24; // root depth
  screen[39] = 1; // depths
  const depth = Buffer.from([24, 0, 1, 0, 0, 0, 0, 0]);
  const visual = Buffer.alloc(24);
  visual.writeUInt32LE(0x21, 0);
  visual[4] = 4; // TrueColor
  visual[5] = 8;
  visual.writeUInt16LE(256, 6);
  visual.writeUInt32LE(0xff0000, 8);
  visual.writeUInt32LE(0xff00, 12);
  visual.writeUInt32LE(0xff, 16);
  const body = Buffer.concat([fixed.subarray(0, 32), vendor, format, screen, depth, visual]);
  const head = Buffer.alloc(8);
  head[0] = 1;
  head.writeUInt16LE(11, 2);
  head.writeUInt16LE(body.length / 4, 6);
  return Buffer.concat([head, body]);
}

function reply(seq: number, fill: (b: Buffer) => void = () => {}, length = 0): Buffer {
  const b = Buffer.alloc(32);
  b[0] = 1;
  b.writeUInt16LE(seq & 0xffff, 2);
  b.writeUInt32LE(length, 4);
  fill(b);
  return b;
}

interface Fake {
  path: string;
  /** The connection setup request each client sent. */
  setups: Buffer[];
  /** From the next reply on, every reply claims 16 GiB and is followed by 8 MiB of filler. */
  arm(): void;
  /** Resolves when the fake sees the client hang up. */
  hungUp: Promise<void>;
  close(): Promise<void>;
}

/**
 * A fake X server: answers the connection setup, QueryExtension (XTEST and BIG-REQUESTS), BigReqEnable, XTEST GetVersion
 * and GetInputFocus; other
 * requests get no reply. Armed, its next reply claims length 0xffffffff (16 GiB) and it keeps writing.
 */
async function fakeServer(dir: string, name: string, armed: boolean): Promise<Fake> {
  const path = join(dir, name);
  const setups: Buffer[] = [];
  let huge = armed;
  let hangUp!: () => void;
  const hungUp = new Promise<void>((r) => (hangUp = r));
  const answer = (sock: Socket, seq: number, build: () => Buffer) => {
    if (!huge) return sock.write(build());
    sock.write(reply(seq, () => {}, HUGE));
    const filler = Buffer.alloc(1 << 20, 0x41);
    for (let i = 0; i < 8 && !sock.destroyed; i++) sock.write(filler);
  };
  const srv: Server = createServer((sock) => {
    sock.on('error', () => {});
    sock.on('close', () => hangUp());
    let buf = Buffer.alloc(0);
    let seq = 0;
    let setupDone = false;
    sock.on('data', (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      if (!setupDone) {
        if (buf.length < 12) return;
        const pad = (n: number) => n + ((4 - (n % 4)) % 4);
        const n = 12 + pad(buf.readUInt16LE(6)) + pad(buf.readUInt16LE(8));
        if (buf.length < n) return;
        setups.push(buf.subarray(0, n));
        buf = buf.subarray(n);
        setupDone = true;
        sock.write(setupReply());
      }
      while (buf.length >= 4) {
        const len = buf.readUInt16LE(2) * 4;
        if (len < 4 || buf.length < len) return;
        const req = buf.subarray(0, len);
        buf = buf.subarray(len);
        seq++;
        const op = req[0]!;
        if (op === 98) {
          const extName = req.toString('latin1', 8, 8 + req.readUInt16LE(4));
          answer(sock, seq, () =>
            reply(seq, (b) => {
              const opcode = { XTEST: XTEST_OPCODE, 'BIG-REQUESTS': BIGREQ_OPCODE }[extName] ?? 0;
              b[8] = opcode ? 1 : 0;
              b[9] = opcode;
            }),
          );
        } else if (op === XTEST_OPCODE && req[1] === 0) {
          answer(sock, seq, () =>
            reply(seq, (b) => {
              b[1] = 2;
              b.writeUInt16LE(2, 8);
            }),
          );
        } else if (op === BIGREQ_OPCODE) {
          answer(sock, seq, () => reply(seq, (b) => b.writeUInt32LE(0x3fffff, 8)));
        } else if (op === 43) {
          answer(sock, seq, () => reply(seq, (b) => b.writeUInt32LE(0x100, 8)));
        }
      }
    });
  });
  await new Promise<void>((r) => srv.listen(path, r));
  return {
    path,
    setups,
    hungUp,
    arm: () => {
      huge = true;
    },
    close: () => new Promise((r) => srv.close(() => r())),
  };
}

let dir: string;
before(() => {
  dir = mkdtempSync(join(tmpdir(), 'drums-xbudget-'));
});
after(() => rmSync(dir, { recursive: true, force: true }));

test('a fake X server that answers in budget: the connection opens and sends the cookie in its setup', async () => {
  const fake = await fakeServer(dir, 'ok', false);
  const cookie = newXCookie();
  try {
    const c = await XConnection.open(fake.path, { timeoutMs: 3000, shm: false, cookie });
    assert.deepEqual([c.width, c.height], [640, 480]);
    await c.sync();
    c.close();
    assert.ok(fake.setups[0]!.equals(setupRequest(cookie)), 'the setup carries MIT-MAGIC-COOKIE-1 and the cookie');
  } finally {
    await fake.close();
  }
});

test('a reply claiming 16 GiB during the open: refused at once with connect_failed, nothing buffered', async () => {
  const fake = await fakeServer(dir, 'huge-open', true);
  const rss0 = process.memoryUsage().rss;
  const t0 = performance.now();
  try {
    await assert.rejects(XConnection.open(fake.path, { timeoutMs: 4000, shm: false }), (e: unknown) => {
      assert.ok(isDisplayError(e, 'connect_failed'), `connect_failed, got ${(e as Error).message}`);
      assert.match((e as Error).message, /budget of \d+ bytes/);
      return true;
    });
    assert.ok(performance.now() - t0 < 2000, 'refused at once, not at the deadline');
    await fake.hungUp;
    assert.ok(process.memoryUsage().rss - rss0 < 64 * 1024 ** 2, 'the claim was not buffered');
  } finally {
    await fake.close();
  }
});

test('a reply claiming 16 GiB on an open connection: that request fails with display_closed, bounded, and so do later ones', async () => {
  const fake = await fakeServer(dir, 'huge-later', false);
  try {
    const c = await XConnection.open(fake.path, { timeoutMs: 4000, shm: false });
    fake.arm();
    const t0 = performance.now();
    await assert.rejects(c.sync(), (e: unknown) => {
      assert.ok(isDisplayError(e, 'display_closed'), `display_closed, got ${(e as Error).message}`);
      assert.match((e as Error).message, /claimed a packet of 17179869\d{3} bytes, beyond the reply budget/);
      return true;
    });
    assert.ok(performance.now() - t0 < 2000, 'failed at once, not at the deadline');
    assert.equal(c.closed, true);
    await assert.rejects(c.sync(), (e: unknown) => isDisplayError(e, 'display_closed'));
  } finally {
    await fake.close();
  }
});

test('a server claiming a screen beyond the budget is refused at the open', async () => {
  const fake = await fakeServer(dir, 'big-screen', false);
  try {
    await assert.rejects(XConnection.open(fake.path, { timeoutMs: 3000, shm: false, maxReplyBytes: 1024 * 1024 }), (e: unknown) => {
      assert.ok(isDisplayError(e, 'connect_failed'));
      assert.match((e as Error).message, /larger than the \d+-byte reply budget/);
      return true;
    });
  } finally {
    await fake.close();
  }
});
