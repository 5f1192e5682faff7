// Screenshots: formats, region, scale, cursor compositing, SHM and core paths, validation.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import sharp from 'sharp';
import { startXvfb, waitExit, type XvfbHandle } from '../../src/testing/xvfb.ts';
import { XDisplay } from '../../src/display/x-display.ts';
import { isDisplayError } from '../../src/display/errors.ts';

let h: XvfbHandle;
let d: XDisplay;
const BG = [0x33, 0x66, 0x99];

before(async () => {
  h = await startXvfb({ windowManager: false });
  assert.ok(await waitExit(h.spawnClient('xsetroot', ['-solid', '#336699']), 5000));
  d = await XDisplay.open(h.socketPath, { cookie: h.cookie, timeoutMs: 5000 });
  await d.move(5, 5);
});

after(async () => {
  await d?.close();
  await h?.stop();
  assert.ok(h.xvfb.exitCode !== null || h.xvfb.signalCode !== null, 'Xvfb still running');
});

async function pixel(data: Buffer, x: number, y: number): Promise<number[]> {
  const { data: raw, info } = await sharp(data).raw().toBuffer({ resolveWithObject: true });
  const o = (y * info.width + x) * info.channels;
  return [raw[o], raw[o + 1], raw[o + 2]];
}

test('uses MIT-SHM through the fd-passing socket', () => {
  assert.equal(d.shmEnabled, true);
  assert.equal(d.hasCursorImage, true);
  assert.deepEqual(d.screenSize(), { width: 1280, height: 800 });
});

test('png is exact, with the right size and pixel colour', async () => {
  const s = await d.screenshot({ format: 'png' });
  assert.equal(s.mimeType, 'image/png');
  assert.deepEqual([s.width, s.height], [1280, 800]);
  const meta = await sharp(s.data).metadata();
  assert.deepEqual([meta.width, meta.height, meta.format], [1280, 800, 'png']);
  assert.deepEqual(await pixel(s.data, 640, 400), BG);
});

test('raw is tightly packed RGB', async () => {
  const s = await d.screenshot({ format: 'raw' });
  assert.equal(s.data.length, 1280 * 800 * 3);
  const o = (400 * 1280 + 640) * 3;
  assert.deepEqual([...s.data.subarray(o, o + 3)], BG);
});

test('jpeg and webp decode to the right size and about the right colour', async () => {
  for (const format of ['jpeg', 'webp'] as const) {
    const s = await d.screenshot({ format, quality: 90 });
    const meta = await sharp(s.data).metadata();
    assert.deepEqual([meta.width, meta.height, meta.format], [1280, 800, format]);
    const p = await pixel(s.data, 640, 400);
    p.forEach((v, i) => assert.ok(Math.abs(v - BG[i]) <= 6, `${format} channel ${i}: ${v}`));
  }
});

test('region and scale', async () => {
  const r = await d.screenshot({ format: 'png', region: { x: 10, y: 20, width: 100, height: 50 } });
  assert.deepEqual([r.width, r.height], [100, 50]);
  assert.deepEqual((await sharp(r.data).metadata()).width, 100);
  const s = await d.screenshot({ format: 'png', scale: { width: 640, height: 400 } });
  assert.deepEqual([s.width, s.height, s.scaleX, s.scaleY], [640, 400, 2, 2]);
  assert.deepEqual((await sharp(s.data).metadata()).height, 400);
  const a = await d.screenshot({ format: 'raw', scale: { width: 1024 } });
  assert.deepEqual([a.width, a.height, a.data.length], [1024, 640, 1024 * 640 * 3]);
});

test('the cursor is composited at the pointer, and can be left out', async () => {
  await d.move(600, 400);
  const region = { x: 590, y: 390, width: 40, height: 40 };
  const withCursor = await d.screenshot({ format: 'raw', region });
  const without = await d.screenshot({ format: 'raw', region, cursor: false });
  let differing = 0;
  for (let i = 0; i < withCursor.data.length; i += 3) {
    if (withCursor.data[i] !== BG[0] || withCursor.data[i + 1] !== BG[1] || withCursor.data[i + 2] !== BG[2]) differing++;
  }
  assert.ok(differing > 20, `cursor drew only ${differing} pixels`);
  for (let i = 0; i < without.data.length; i += 3) assert.deepEqual([...without.data.subarray(i, i + 3)], BG);
  await d.move(5, 5);
});

test('concurrent screenshots share the single SHM segment safely', async () => {
  const shots = await Promise.all(
    [...Array(6)].map((_, i) => d.screenshot({ format: i % 2 ? 'raw' : 'png', region: { x: i * 10, y: 0, width: 64 + i, height: 32 } })),
  );
  shots.forEach((s, i) => assert.equal(s.width, 64 + i));
});

test('core GetImage fallback gives the same pixels', async () => {
  const core = await XDisplay.open(h.socketPath, { cookie: h.cookie, timeoutMs: 5000, shm: false });
  try {
    assert.equal(core.shmEnabled, false);
    const s = await core.screenshot({ format: 'raw', region: { x: 100, y: 100, width: 8, height: 8 }, cursor: false });
    assert.deepEqual([...s.data.subarray(0, 3)], BG);
  } finally {
    await core.close();
  }
});

test('regions outside the screen are rejected with invalid_region naming the field', async () => {
  const cases: Array<[object, RegExp]> = [
    [{ x: 1200, y: 0, width: 100, height: 10 }, /^region\.width: /],
    [{ x: -1, y: 0, width: 10, height: 10 }, /^region\.x: /],
    [{ x: 0, y: 800, width: 10, height: 10 }, /^region\.y: /],
    [{ x: 0, y: 700, width: 10, height: 101 }, /^region\.height: /],
    [{ x: 0, y: 0, width: 0, height: 10 }, /^region\.width: /],
  ];
  for (const [region, re] of cases) {
    await assert.rejects(d.screenshot({ region: region as never }), (err: unknown) => isDisplayError(err, 'invalid_region') && re.test((err as Error).message));
  }
  await assert.rejects(d.screenshot({ scale: { width: 0, height: 10 } }), (err: unknown) => isDisplayError(err, 'invalid_region'));
  await assert.rejects(d.screenshot({ format: 'gif' as never }), (err: unknown) => isDisplayError(err, 'invalid_action'));
});
