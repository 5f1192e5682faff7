// The box downscale of the frame stream's thumbnails (frames.ts shrinkBgrx): each output pixel
// is the rounded mean of its box, per channel, BGRX in and RGB out; boxFactor picks only whole
// factors 2..16 that fit both ways.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { boxFactor, shrinkBgrx } from '../../src/display/frames.ts';

function reference(bgrx: Buffer, w: number, h: number, f: number): Buffer {
  const out = Buffer.alloc((w / f) * (h / f) * 3);
  for (let oy = 0; oy < h / f; oy++)
    for (let ox = 0; ox < w / f; ox++) {
      const sum = [0, 0, 0];
      for (let y = oy * f; y < oy * f + f; y++)
        for (let x = ox * f; x < ox * f + f; x++) {
          const o = (y * w + x) * 4;
          sum[0] += bgrx[o + 2]!;
          sum[1] += bgrx[o + 1]!;
          sum[2] += bgrx[o]!;
        }
      for (let c = 0; c < 3; c++) out[(oy * (w / f) + ox) * 3 + c] = Math.floor((sum[c]! + Math.floor((f * f) / 2)) / (f * f));
    }
  return out;
}

test('shrinkBgrx equals the per-channel rounded box mean, for every factor up to 16, X byte ignored', () => {
  let seed = 7;
  const rnd = () => (seed = (seed * 1103515245 + 12345) >>> 0) >>> 24;
  for (const f of [2, 3, 4, 8, 16]) {
    const w = f * 5,
      h = f * 3;
    const img = Buffer.alloc(w * h * 4 + 4);
    for (let i = 0; i < w * h * 4; i++) img[i] = rnd();
    assert.deepEqual(shrinkBgrx(img, w, h, f), reference(img, w, h, f), `factor ${f}`);
    // All 255: the lanes hold 16 x 16 x 255 without carrying into each other.
    img.fill(255);
    assert.ok(
      shrinkBgrx(img, w, h, f).every((b) => b === 255),
      `white at factor ${f}`,
    );
  }
  // A capture buffer that is a view at an odd offset is read correctly too.
  const base = Buffer.alloc(8 * 8 * 4 + 1);
  for (let i = 0; i < base.length; i++) base[i] = (i * 37) & 0xff;
  const view = base.subarray(1);
  assert.deepEqual(shrinkBgrx(view, 8, 8, 4), reference(view, 8, 8, 4));
});

test('boxFactor: whole factors 2..16 that fit both ways, else 0 (libvips resizes)', () => {
  const r = { x: 0, y: 0, width: 1280, height: 800 };
  assert.equal(boxFactor(r, { width: 320, height: 200 }), 4);
  assert.equal(boxFactor(r, { width: 640, height: 400 }), 2);
  assert.equal(boxFactor(r, { width: 1280, height: 800 }), 0);
  assert.equal(boxFactor(r, { width: 320, height: 400 }), 0);
  assert.equal(boxFactor(r, { width: 300, height: 200 }), 0);
  assert.equal(boxFactor(r, { width: 40, height: 25 }), 0); // factor 32
});
