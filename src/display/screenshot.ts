/**
 * Screenshots: option checks here; the frame itself (capture, colour conversion, cursor,
 * encoding, damage-driven cache) is in frames.ts. bgrxToRgb/compositeCursor/captureRgb are the
 * earlier all-JS path, kept as the reference the fast path is tested against.
 */
import * as fs from 'node:fs';
import { DisplayError } from './errors.ts';
import { captureFrame, type ResolvedShot } from './frames.ts';
import type { CursorImage, Region, ScreenshotFormat, ScreenshotOptions, ScreenshotResult } from './image-types.ts';
import type { XConnection } from './x-connection.ts';

export type { CursorImage, Region, ScreenshotFormat, ScreenshotOptions, ScreenshotResult } from './image-types.ts';

export const DEFAULT_JPEG_QUALITY = 80;
export const PNG_COMPRESSION_LEVEL = 6;
const MAX_SCALE_SIDE = 8192;

const MIME: Record<ScreenshotFormat, string> = {
  png: 'image/png',
  jpeg: 'image/jpeg',
  webp: 'image/webp',
  raw: 'application/octet-stream',
};

function regionError(field: string, problem: string, details?: Record<string, unknown>): DisplayError {
  return new DisplayError('invalid_region', `${field}: ${problem}`, { field, ...details });
}

function isInt(v: unknown): v is number {
  return typeof v === 'number' && Number.isInteger(v);
}

/** Validate a region against the screen; returns the full screen when region is undefined. */
export function validateRegion(region: Region | undefined, screen: { width: number; height: number }, field = 'region'): Region {
  if (region === undefined) return { x: 0, y: 0, width: screen.width, height: screen.height };
  if (region === null || typeof region !== 'object') throw regionError(field, 'must be an object {x, y, width, height}');
  const { x, y, width, height } = region;
  if (!isInt(x) || x < 0 || x >= screen.width) throw regionError(`${field}.x`, `must be an integer within 0..${screen.width - 1}`, { value: x });
  if (!isInt(y) || y < 0 || y >= screen.height) throw regionError(`${field}.y`, `must be an integer within 0..${screen.height - 1}`, { value: y });
  if (!isInt(width) || width < 1 || x + width > screen.width) {
    throw regionError(`${field}.width`, `must be an integer within 1..${screen.width - x} (x + width <= ${screen.width})`, { value: width });
  }
  if (!isInt(height) || height < 1 || y + height > screen.height) {
    throw regionError(`${field}.height`, `must be an integer within 1..${screen.height - y} (y + height <= ${screen.height})`, { value: height });
  }
  return { x, y, width, height };
}

function resolveScale(scale: ScreenshotOptions['scale'], w: number, h: number, prefix = ''): { width: number; height: number } | null {
  if (scale === undefined) return null;
  if (scale === null || typeof scale !== 'object') throw regionError(`${prefix}scale`, 'must be an object {width, height}');
  let { width, height } = scale;
  if (width === undefined && height === undefined) throw regionError(`${prefix}scale`, 'needs width and/or height');
  for (const [k, v] of [
    ['width', width],
    ['height', height],
  ] as const) {
    if (v !== undefined && (!isInt(v) || v < 1 || v > MAX_SCALE_SIDE))
      throw regionError(`${prefix}scale.${k}`, `must be an integer within 1..${MAX_SCALE_SIDE}`, { value: v });
  }
  if (width === undefined) width = Math.max(1, Math.round((w * height!) / h));
  if (height === undefined) height = Math.max(1, Math.round((h * width) / w));
  if (width === w && height === h) return null;
  return { width, height };
}

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

/**
 * Checks screenshot options against a screen and fills in the defaults: the frame captureFrame
 * takes. Field names in errors start with `prefix` (the actions route passes 'screenshot.').
 */
export function resolveShot(options: ScreenshotOptions, screen: { width: number; height: number }, prefix = ''): ResolvedShot {
  const format = options.format ?? 'png';
  if (!(format in MIME))
    throw new DisplayError('invalid_action', `${prefix}format: must be one of png, jpeg, webp, raw (got ${JSON.stringify(format)})`, {
      field: `${prefix}format`,
    });
  const quality = options.quality ?? DEFAULT_JPEG_QUALITY;
  if (!isInt(quality) || quality < 1 || quality > 100)
    throw new DisplayError('invalid_action', `${prefix}quality: must be an integer within 1..100`, { field: `${prefix}quality` });
  const region = validateRegion(options.region, screen, `${prefix}region`);
  const scale = resolveScale(options.scale, region.width, region.height, prefix);
  return { format, quality, region, scale, wantCursor: options.cursor !== false, ...(options.boxScale && scale ? { boxScale: true } : {}) };
}

/** A frame on this connection (the pointer drawn only where the server has XFIXES). */
export function captureResolved(c: XConnection, shot: ResolvedShot): Promise<ScreenshotResult> {
  return captureFrame(c, { ...shot, wantCursor: shot.wantCursor && !!c.fixes });
}

export async function captureScreenshot(c: XConnection, options: ScreenshotOptions = {}): Promise<ScreenshotResult> {
  return captureResolved(c, resolveShot(options, c));
}
