// The banded PNG encoder (src/display/png-bands.ts): every frame decodes (libpng through sharp,
// and zlib's own Adler-32 check) to exactly the frame's RGB bytes, and only changed bands are
// encoded anew.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import * as zlib from 'node:zlib';
import sharp from 'sharp';
import { BAND_ROWS, BandPngEncoder, adler32, adler32Concat } from '../../src/display/png-bands.ts';
import { bgrxToRgb } from '../../src/display/screenshot.ts';

/** The IDAT payload of a PNG, inflated (zlib checks the Adler-32 itself). */
function inflateIdat(png: Buffer): Buffer {
  let o = 8;
  const idat: Buffer[] = [];
  while (o < png.length) {
    const len = png.readUInt32BE(o);
    const type = png.toString('latin1', o + 4, o + 8);
    const crc = png.readUInt32BE(o + 8 + len);
    assert.equal(zlib.crc32(png.subarray(o + 4, o + 8 + len)), crc, `${type} CRC`);
    if (type === 'IDAT') idat.push(png.subarray(o + 8, o + 8 + len));
    o += 12 + len;
  }
  return zlib.inflateSync(Buffer.concat(idat));
}

async function decodes(png: Buffer, bgrx: Buffer, w: number, h: number): Promise<void> {
  const { data, info } = await sharp(png).raw().toBuffer({ resolveWithObject: true });
  assert.deepEqual([info.width, info.height, info.channels], [w, h, 3]);
  assert.ok(data.equals(bgrxToRgb(bgrx, w * h)), 'decoded RGB differs from the frame');
  assert.equal(inflateIdat(png).length, h * (w * 3 + 1));
}

test('Adler-32 and its concatenation agree with zlib', () => {
  for (const n of [0, 1, 5551, 5552, 5553, 100_000]) {
    const b = randomBytes(n);
    const z = zlib.deflateSync(b, { level: 0 });
    assert.equal(adler32(b), z.readUInt32BE(z.length - 4), `length ${n}`);
    const cut = Math.floor(n / 3);
    assert.equal(adler32Concat(adler32(b.subarray(0, cut)), adler32(b.subarray(cut)), n - cut), adler32(b));
  }
  const ff = Buffer.alloc(300_000, 0xff);
  assert.equal(adler32Concat(adler32(ff), adler32(ff), ff.length), adler32(Buffer.concat([ff, ff])));
});

/** The bands whose bytes differ between two frames (what the caller's damage tracking names). */
const differing = (a: Buffer | null, b: Buffer, w: number) => (k: number) =>
  !a || !a.subarray(k * BAND_ROWS * w * 4, (k + 1) * BAND_ROWS * w * 4).equals(b.subarray(k * BAND_ROWS * w * 4, (k + 1) * BAND_ROWS * w * 4));

test('frames decode exactly; only the bands named changed are encoded again', async () => {
  const w = 333,
    h = 5 * BAND_ROWS + 7;
  const enc = new BandPngEncoder(w, h);
  // Noise in the top half, flat below: both compress differently, neither can be faked.
  const f0 = Buffer.alloc(w * h * 4 + 4, 0x40);
  randomBytes(w * 4 * 40).copy(f0, 0);
  const r0 = enc.encode(f0, () => false);
  assert.equal(r0.changedBands, r0.bands, 'the first frame is encoded whole');
  await decodes(r0.png, f0, w, h);

  // One pixel in the last (short) band.
  const f1 = Buffer.from(f0);
  f1[(h - 1) * w * 4 + 10] ^= 0xff;
  const r1 = enc.encode(f1, differing(f0, f1, w));
  assert.equal(r1.changedBands, 1);
  await decodes(r1.png, f1, w, h);

  // Nothing changed: the same bytes again.
  const r2 = enc.encode(Buffer.from(f1), () => false);
  assert.equal(r2.changedBands, 0);
  assert.ok(r2.png.equals(r1.png));

  // A change in every band but the first.
  const f3 = Buffer.from(f1);
  for (let y = BAND_ROWS; y < h; y += 5) f3[(y * w + 7) * 4] ^= 0x55;
  const r3 = enc.encode(f3, differing(f1, f3, w));
  assert.equal(r3.changedBands, r3.bands - 1);
  await decodes(r3.png, f3, w, h);

  // Everything changed.
  const big = new BandPngEncoder(640, 40 * BAND_ROWS);
  const g0 = randomBytes(640 * 40 * BAND_ROWS * 4);
  await decodes(big.encode(g0, () => true).png, g0, 640, 40 * BAND_ROWS);
  const g1 = randomBytes(g0.length);
  const rg = big.encode(g1, () => true);
  assert.equal(rg.changedBands, 40);
  await decodes(rg.png, g1, 640, 40 * BAND_ROWS);
});

test('reset() forgets the bands: the next frame is encoded whole', async () => {
  const enc = new BandPngEncoder(64, 3 * BAND_ROWS);
  const f = randomBytes(64 * 3 * BAND_ROWS * 4);
  enc.encode(f, () => true);
  enc.reset();
  const g = randomBytes(f.length);
  const r = enc.encode(g, () => false);
  assert.equal(r.changedBands, 3);
  await decodes(r.png, g, 64, 3 * BAND_ROWS);
});

test('kept bands hold only their compressed bytes, however scattered the re-encodes', () => {
  // zlib's sync calls return views of a 64 KiB output chunk: kept as they came, each band of a
  // few hundred bytes held 16 KiB, and a whole slab while any band cut from it lived (a 1280x800
  // encoder grew from 0.8 to 2 MiB over 50 steps, for ~20 KB of compressed bands).
  const w = 1280,
    h = 800;
  const enc = new BandPngEncoder(w, h);
  const f = Buffer.alloc(w * h * 4 + 4, 0x33);
  enc.encode(f, () => true);
  let seed = 7;
  const next = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) % enc.bands;
  for (let step = 0; step < 50; step++) {
    const a = next(),
      b = next();
    f[(a * BAND_ROWS * w + step) * 4] ^= 0x11;
    enc.encode(f, (k) => k === a || k === b || k === a + 1);
  }
  const compressed = enc.compressedBytes();
  assert.ok(compressed > 0);
  // The IHDR chunk (25 bytes) is the only other thing an encoder keeps.
  assert.ok(enc.retainedBytes() <= compressed + 64, `bands hold ${enc.retainedBytes()} bytes for ${compressed} compressed`);
});

test('bands encoded on the worker make the same PNG as encoded here', async () => {
  const { bandPool } = await import('../../src/display/band-pool.ts');
  const w = 300,
    h = 70;
  const frame = Buffer.from(new SharedArrayBuffer(w * h * 4));
  randomBytes(w * h * 4).copy(frame);
  const here = new BandPngEncoder(w, h).encode(frame, () => true).png;
  const enc = new BandPngEncoder(w, h);
  const r = await bandPool.encode(
    frame,
    w,
    h,
    enc.todo(() => true),
  );
  assert.ok(enc.assemble(r.bands).png.equals(here));
  // Then one changed band, on the worker, against the same change encoded here.
  randomBytes(w * 4 * 3).copy(frame, w * 4 * 20);
  const ref = new BandPngEncoder(w, h);
  ref.encode(frame, () => true);
  const r2 = await bandPool.encode(
    frame,
    w,
    h,
    enc.todo((k) => k === 1),
  );
  assert.ok(enc.assemble(r2.bands).png.equals(ref.encode(frame, () => false).png));
  await bandPool.close();
});
