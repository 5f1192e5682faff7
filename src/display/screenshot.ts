/**
 * The screenshot types, and the earlier all-JS capture path (bgrxToRgb, compositeCursor,
 * captureRgb), kept as the reference the fast path in frames.ts is tested against. Screenshots
 * themselves (options resolved against the screen, capture, encoding, the damage-driven cache)
 * are frames.ts: resolveShot, captureResolved, captureScreenshot.
 */
import * as fs from 'node:fs';
import { DisplayError } from './errors.ts';
import type { CursorImage, Region } from './image-types.ts';
import type { XConnection } from './x-connection.ts';

export type { CursorImage, Region, ScreenshotFormat, ScreenshotOptions, ScreenshotResult } from './image-types.ts';

/**
 * BGRX (32 bpp, LSB first) → tightly packed RGB. A Uint32 loop when the source is 4-byte
 * aligned (the SHM buffer always is), a byte loop otherwise.
 */
export function bgrxToRgb(src: Buffer, pixels: number, dst: Buffer = Buffer.allocUnsafe(pixels * 3)): Buffer {
  if (src.byteOffset % 4 === 0) {
    const s = new Uint32Array(src.buffer, src.byteOffset, pixels);
    let j = 0;
    for (let i = 0; i < pixels; i++) {
      const p = s[i];
      dst[j] = (p >>> 16) & 0xff;
      dst[j + 1] = (p >>> 8) & 0xff;
      dst[j + 2] = p & 0xff;
      j += 3;
    }
  } else {
    let j = 0;
    for (let i = 0, o = 0; i < pixels; i++, o += 4) {
      dst[j] = src[o + 2];
      dst[j + 1] = src[o + 1];
      dst[j + 2] = src[o];
      j += 3;
    }
  }
  return dst;
}

/** Draw a premultiplied ARGB32 cursor onto an RGB image whose top-left is (originX, originY) on screen. */
export function compositeCursor(rgb: Buffer, width: number, height: number, cur: CursorImage, originX: number, originY: number): void {
  const left = cur.x - cur.xhot - originX;
  const top = cur.y - cur.yhot - originY;
  const cw = cur.width;
  const img = cur.cursorImage;
  for (let cy = 0; cy < cur.height; cy++) {
    const ty = top + cy;
    if (ty < 0 || ty >= height) continue;
    for (let cx = 0; cx < cw; cx++) {
      const tx = left + cx;
      if (tx < 0 || tx >= width) continue;
      const p = img.readUInt32LE((cy * cw + cx) * 4);
      const a = p >>> 24;
      if (a === 0) continue;
      const o = (ty * width + tx) * 3;
      const inv = 255 - a;
      rgb[o] = Math.min(255, ((p >>> 16) & 0xff) + (((rgb[o] * inv + 127) / 255) | 0));
      rgb[o + 1] = Math.min(255, ((p >>> 8) & 0xff) + (((rgb[o + 1] * inv + 127) / 255) | 0));
      rgb[o + 2] = Math.min(255, (p & 0xff) + (((rgb[o + 2] * inv + 127) / 255) | 0));
    }
  }
}

/** Capture a rectangle as packed RGB (no cursor). */
export async function captureRgb(c: XConnection, r: Region): Promise<Buffer> {
  const pixels = r.width * r.height;
  if (c.shm) {
    return c.shmLock.run(async () => {
      const shm = c.shm;
      if (!shm) return captureCoreRgb(c, r);
      const rep = await c.request<{ size: number }>('ShmGetImage', (cb) =>
        shm.ext.GetImage(c.root, r.x, r.y, r.width, r.height, 0xffffffff, 2 /* ZPixmap */, shm.xid, 0, cb),
      );
      const bytes = pixels * 4;
      if (rep.size < bytes) throw new DisplayError('x_error', `ShmGetImage returned ${rep.size} bytes, expected ${bytes}`);
      // pread from the tmpfs segment (the client does not mmap it).
      const bgrx = Buffer.allocUnsafe(bytes);
      fs.readSync(shm.fd, bgrx, 0, bytes, 0);
      return bgrxToRgb(bgrx, pixels);
    });
  }
  return captureCoreRgb(c, r);
}

async function captureCoreRgb(c: XConnection, r: Region): Promise<Buffer> {
  const img = await c.request<{ data: Buffer; depth: number }>('GetImage', (cb) =>
    c.x.GetImage(2 /* ZPixmap */, c.root, r.x, r.y, r.width, r.height, 0xffffffff, cb),
  );
  if (img.data.length < r.width * r.height * 4) {
    throw new DisplayError('x_error', `GetImage returned ${img.data.length} bytes for ${r.width}x${r.height} (expected 32 bpp)`);
  }
  return bgrxToRgb(img.data, r.width * r.height);
}
