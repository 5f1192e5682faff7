// The fast frame path (src/display/frames.ts): pixel-exact against the earlier all-JS path, and
// the DAMAGE-driven cache (an unchanged screen reuses the last encoding; any change recaptures).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import sharp from 'sharp';
import { startXvfb, type XvfbHandle } from '../../src/testing/xvfb.ts';
import { XDisplay } from '../../src/display/x-display.ts';
import { captureRgb, compositeCursor, type CursorImage } from '../../src/display/screenshot.ts';
import { frameStats, SCRATCH_KEEP, scratchStats, trackDamage } from '../../src/display/frames.ts';

let h: XvfbHandle;
let d: XDisplay;
let gc = 0;

/** Paints random pixels onto the root window: content that no encoder can fake. */
async function paintNoise(x: number, y: number, w: number, hh: number): Promise<void> {
  d.conn.x.PutImage(2, d.root, gc, w, hh, x, y, 0, 24, randomBytes(w * hh * 4));
  await d.conn.sync();
}

before(async () => {
  h = await startXvfb({ windowManager: false });
  d = await XDisplay.open(h.socketPath, { cookie: h.cookie, timeoutMs: 5000 });
  gc = d.conn.x.AllocID();
  d.conn.x.CreateGC(gc, d.root, {});
  await paintNoise(0, 0, 1280, 800);
  await d.move(300, 200);
});

after(async () => {
  await d?.close();
  await h?.stop();
});

async function reference(region: { x: number; y: number; width: number; height: number }): Promise<Buffer> {
  const cur = await d.conn.request<CursorImage>('cursor', (cb) => d.conn.fixes.GetCursorImage(cb));
  const rgb = await captureRgb(d.conn, region);
  compositeCursor(rgb, region.width, region.height, cur, region.x, region.y);
  return rgb;
}

test('PNG and raw are pixel-exact against the all-JS path, cursor included', async () => {
  for (const region of [
    { x: 0, y: 0, width: 1280, height: 800 },
    { x: 290, y: 190, width: 37, height: 29 },
  ]) {
    const want = await reference(region);
    const png = await d.screenshot({ format: 'png', region });
    const { data, info } = await sharp(png.data).raw().toBuffer({ resolveWithObject: true });
    assert.deepEqual([info.width, info.height, info.channels], [region.width, region.height, 3]);
    assert.ok(data.equals(want), `PNG ${region.width}x${region.height} differs from the reference`);
    const raw = await d.screenshot({ format: 'raw', region });
    assert.ok(raw.data.equals(want), 'raw differs from the reference');
  }
  // The cursor really is in there (the region around the pointer differs from cursor: false).
  const region = { x: 290, y: 190, width: 37, height: 29 };
  const a = await d.screenshot({ format: 'raw', region });
  const b = await d.screenshot({ format: 'raw', region, cursor: false });
  assert.ok(!a.data.equals(b.data));
});

test('scaled frames equal a libvips resize of the reference', async () => {
  const full = { x: 0, y: 0, width: 1280, height: 800 };
  const want = await sharp(await reference(full), { raw: { width: 1280, height: 800, channels: 3 } })
    .resize(640, 400, { fit: 'fill' })
    .raw()
    .toBuffer();
  const got = await d.screenshot({ format: 'raw', scale: { width: 640, height: 400 } });
  assert.ok(got.data.equals(want));
});

test('core GetImage path gives the same PNG pixels', async () => {
  const core = await XDisplay.open(h.socketPath, { cookie: h.cookie, timeoutMs: 5000, shm: false });
  try {
    const region = { x: 100, y: 100, width: 64, height: 48 };
    const a = await sharp((await core.screenshot({ format: 'png', region, cursor: false })).data)
      .raw()
      .toBuffer();
    const b = (await d.screenshot({ format: 'raw', region, cursor: false })).data;
    assert.ok(a.equals(b));
  } finally {
    await core.close();
  }
});

test('an unchanged screen reuses the last encoding; damage and cursor moves recapture', async () => {
  assert.equal(await trackDamage(d.conn), true, 'Xvfb has DAMAGE');
  const s0 = frameStats(d.conn);
  const a = await d.screenshot({ format: 'png' });
  const b = await d.screenshot({ format: 'png' });
  const s1 = frameStats(d.conn);
  assert.equal(s1.cacheHits, s0.cacheHits + 1, 'second frame from the cache');
  assert.ok(a.data.equals(b.data));

  // Paint: the next frame is captured again and shows the change.
  await paintNoise(0, 0, 64, 64);
  const c = await d.screenshot({ format: 'png' });
  const s2 = frameStats(d.conn);
  assert.equal(s2.captures, s1.captures + 1, 'damage forces a capture');
  assert.ok(s2.damageEvents > s1.damageEvents);
  assert.ok(!c.data.equals(b.data));
  const want = await reference({ x: 0, y: 0, width: 1280, height: 800 });
  assert.ok((await sharp(c.data).raw().toBuffer()).equals(want));

  // The cursor is not part of the framebuffer's damage: a move must still recapture.
  await d.move(700, 500);
  const e = await d.screenshot({ format: 'png' });
  assert.equal(frameStats(d.conn).captures, s2.captures + 1);
  assert.ok(!e.data.equals(c.data));

  // Different options are cached apart; each is exact.
  const j1 = await d.screenshot({ format: 'jpeg', quality: 50 });
  const j2 = await d.screenshot({ format: 'jpeg', quality: 50 });
  assert.ok(j1.data.equals(j2.data));
  const p2 = await d.screenshot({ format: 'png' });
  assert.ok(p2.data.equals(e.data));
});

test('a captured frame says where its time went; a reused one does not', async () => {
  await paintNoise(0, 0, 1280, 40);
  const png = await d.screenshot({ format: 'png' });
  const t = png.timing;
  assert.ok(t, 'a captured PNG carries its stages');
  for (const k of ['cursor', 'grab', 'draw', 'colour', 'encode'] as const) assert.ok(Number.isFinite(t[k]) && t[k] >= 0, `${k}: ${t[k]}`);
  // The painted rows (bands 0-2) at least, never more than all 50 bands of 1280x800.
  assert.ok(t.bands && t.bands[0] >= 3 && t.bands[1] === 50, JSON.stringify(t.bands));
  const again = await d.screenshot({ format: 'png' });
  assert.equal(again.timing, undefined, 'a frame from the cache has no stages');
  const jpeg = await d.screenshot({ format: 'jpeg', quality: 61 });
  assert.ok(jpeg.timing && jpeg.timing.encode > 0 && jpeg.timing.bands === undefined);
});

test('many back-to-back small changes are never missed', async () => {
  for (let i = 0; i < 20; i++) {
    await d.screenshot({ format: 'raw', region: { x: 0, y: 0, width: 32, height: 32 }, cursor: false });
    await paintNoise(0, 0, 32, 32);
    const want = await captureRgb(d.conn, { x: 0, y: 0, width: 32, height: 32 });
    const got = await d.screenshot({ format: 'raw', region: { x: 0, y: 0, width: 32, height: 32 }, cursor: false });
    assert.ok(got.data.equals(want), `round ${i}`);
  }
});

test('connections share the capture buffers: more connections do not hold more frames', async () => {
  const others = await Promise.all([1, 2, 3].map(() => XDisplay.open(h.socketPath, { cookie: h.cookie, timeoutMs: 5000 })));
  try {
    const full = { x: 0, y: 0, width: 1280, height: 800 };
    await d.screenshot({ format: 'png', cursor: false });
    const start = scratchStats();
    assert.ok(start.kept >= 1, 'a full-screen buffer is kept after a frame');
    for (const o of others) {
      await paintNoise(0, 0, 1280, 800);
      const want = await reference(full);
      const png = await o.screenshot({ format: 'png' });
      const { data } = await sharp(png.data).raw().toBuffer({ resolveWithObject: true });
      assert.ok(data.equals(want), 'a frame from a reused buffer is exact');
    }
    assert.equal(scratchStats().allocated, start.allocated, 'frames of other connections, one at a time, reuse the kept buffer');
    // At once: one buffer per frame in flight, all given back, at most SCRATCH_KEEP kept.
    await paintNoise(0, 0, 1280, 800);
    await Promise.all([d, ...others].map((x) => x.screenshot({ format: 'png' })));
    const end = scratchStats();
    assert.equal(end.inUse, 0);
    assert.ok(end.kept <= SCRATCH_KEEP, `kept ${end.kept}`);
  } finally {
    for (const o of others) await o.close();
  }
});

test('banded PNGs stay exact while other clients draw, also during the capture', async () => {
  const full = { x: 0, y: 0, width: 1280, height: 800 };
  const painter = await XDisplay.open(h.socketPath, { cookie: h.cookie, timeoutMs: 5000 });
  try {
    const pgc = painter.conn.x.AllocID();
    painter.conn.x.CreateGC(pgc, painter.root, {});
    const paint = async (x: number, y: number, w: number, hh: number) => {
      painter.conn.x.PutImage(2, painter.root, pgc, w, hh, x, y, 0, 24, randomBytes(w * hh * 4));
      await painter.conn.sync();
    };
    await d.screenshot({ format: 'png' });
    // One small change at a time, somewhere new each round (band edges included), and the pointer moves.
    for (let i = 0; i < 6; i++) {
      await paint((i * 211) % 1200, (i * 131 + 15) % 760, 40, 18);
      // Another connection's JPEG swaps a shared capture buffer in place: a banded frame reads
      // only its changed bands into such a buffer, and must never encode a band it did not read.
      await painter.screenshot({ format: 'jpeg' });
      await d.move(100 + i * 150, 50 + i * 120);
      const png = await d.screenshot({ format: 'png' });
      assert.ok((await sharp(png.data).raw().toBuffer()).equals(await reference(full)), `round ${i}`);
    }
    // Drawing while frames are taken: once the drawing stops, the next frame shows all of it.
    let drawing = true;
    const drawer = (async () => {
      for (let i = 0; drawing; i++) await paint((i * 97) % 1240, (i * 61) % 780, 40, 20);
    })();
    for (let i = 0; i < 15; i++) await d.screenshot({ format: 'png' });
    drawing = false;
    await drawer;
    const png = await d.screenshot({ format: 'png' });
    assert.ok((await sharp(png.data).raw().toBuffer()).equals(await reference(full)), 'a band stayed stale after concurrent drawing');
  } finally {
    await painter.close();
  }
});
