/**
 * The fast frame path: capture, colour conversion, cursor and encoding with the pixel work in
 * native code (libvips through sharp, Buffer.swap32), and a per-display frame cache driven by
 * the X DAMAGE extension, so an unchanged screen reuses its last encoding.
 *
 * Pipeline of one frame (1280x800: ~4 MB of BGRX):
 *   ShmGetImage → pread into a pooled buffer → the cursor drawn onto the BGRX bytes (only its
 *   own ~32x32 rectangle, in JS) → then either
 *   - unscaled PNG (the default): the banded encoder (png-bands.ts) compares the frame with
 *     the previous one in 16-row bands and deflates only the bands that changed, or
 *   - anything else: swap32 in place (BGRX → XRGB, native) → the buffer read from byte 1 is
 *     RGBX → sharp: drop the 4th band, resize, encode (libvips' thread pool).
 * Per-pixel work on the event loop is only the PNG bands that changed (~0.13 ms each). Every
 * format is exact where it is lossless: PNG and raw decode to the same RGB bytes as the
 * earlier all-JS path (tests/integration/display-frames.test.ts checks that).
 *
 * Damage: one DAMAGE object (level NonEmpty) on the root window per connection. Every
 * DamageNotify bumps `epoch`. A capture sends DamageSubtract just before its GetImage, so the
 * next change after it always notifies again. A cached frame is reused only when, after a
 * round trip (the cursor request, or a sync), the epoch is still the one it was captured at
 * and the cursor (position, serial) is unchanged: events the server sent before answering
 * that round trip have all arrived by then, so "no event" means "no change".
 */
import * as fs from 'node:fs';
import sharp from 'sharp';
import { DisplayError } from './errors.ts';
import { BandPngEncoder } from './png-bands.ts';
import type { XDisplay } from './x-display.ts';
import type { CursorImage, Region, ScreenshotFormat, ScreenshotOptions, ScreenshotResult } from './screenshot.ts';

/**
 * zlib level of the PNG encoder (zlib-ng, no filter). Measured on an xterm screen at 1280x800:
 * level 6 12.4 ms / 33 KB, level 3 6.3 ms / 42 KB, level 1 6.3 ms / 89 KB (CPU per frame).
 */
export const FAST_PNG_COMPRESSION_LEVEL = 3;
/** Cached encodings per display, and their byte budget. */
const CACHE_ENTRIES = 4;
const CACHE_BYTES = 8 * 1024 * 1024;

const MIME: Record<ScreenshotFormat, string> = {
  png: 'image/png',
  jpeg: 'image/jpeg',
  webp: 'image/webp',
  raw: 'application/octet-stream',
};

export interface FrameStats {
  captures: number;
  cacheHits: number;
  damageEvents: number;
  damage: boolean;
}

interface CacheEntry {
  key: string;
  epoch: number;
  cursorKey: string;
  result: ScreenshotResult;
}

/** Per-connection state: the damage object, the epoch counter and the cache. */
class FrameState {
  epoch = 0;
  damageOk = false;
  damageEvents = 0;
  captures = 0;
  cacheHits = 0;
  readonly cache: CacheEntry[] = [];
  /** Reused capture buffers (a fresh 4 MB buffer costs ~2 ms of page faults per frame). */
  private readonly _free: Buffer[] = [];
  /** The banded PNG encoder of the last unscaled PNG region (it keeps that frame's buffer). */
  private _png: { key: string; enc: BandPngEncoder } | null = null;
  private _ext: any = null;
  private _damage = 0;
  private _ready: Promise<void> | null = null;

  private readonly d: XDisplay;
  constructor(d: XDisplay) {
    this.d = d;
  }

  /** Creates the DAMAGE object once; without the extension every frame is captured. */
  ready(): Promise<void> {
    if (!this._ready)
      this._ready = this._attach().catch(() => {
        this.damageOk = false;
      });
    return this._ready;
  }

  private async _attach(): Promise<void> {
    const d = this.d;
    const ext = await d.request<any>('DAMAGE QueryExtension', (cb) => d._x.require('damage', cb as any));
    const id = d._x.AllocID();
    d.on('xevent', (ev: { name?: string; damage?: number }) => {
      if (ev.name === 'DamageNotify' && ev.damage === id) {
        this.epoch++;
        this.damageEvents++;
      }
    });
    ext.Create(id, d.root, ext.ReportLevel.NonEmpty);
    await d.sync();
    this._ext = ext;
    this._damage = id;
    this.damageOk = true;
  }

  /** Empties the damage region: the next change after this request notifies again. */
  subtract(): void {
    if (this.damageOk) this._ext.Subtract(this._damage, 0, 0);
  }

  take(bytes: number): Buffer {
    const i = this._free.findIndex((b) => b.length === bytes + 4);
    return i >= 0 ? this._free.splice(i, 1)[0] : Buffer.allocUnsafeSlow(bytes + 4);
  }

  /** Back to the pool: at most two buffers per connection, counting the one the PNG encoder keeps. */
  give(b: Buffer | null): void {
    if (b && this._free.length + (this._png ? 1 : 0) < 2) this._free.push(b);
  }

  /** The PNG encoder for this region (a new region starts a new one). */
  pngEncoder(r: Region): BandPngEncoder {
    const key = `${r.x},${r.y},${r.width},${r.height}`;
    if (this._png?.key !== key) {
      const old = this._png?.enc.reset() ?? null;
      this._png = { key, enc: new BandPngEncoder(r.width, r.height) };
      this.give(old);
    }
    return this._png.enc;
  }

  lookup(key: string, cursorKey: string): ScreenshotResult | null {
    if (!this.damageOk) return null;
    const i = this.cache.findIndex((e) => e.key === key);
    if (i < 0) return null;
    const e = this.cache[i];
    if (e.epoch !== this.epoch || e.cursorKey !== cursorKey) {
      this.cache.splice(i, 1);
      return null;
    }
    this.cache.splice(i, 1);
    this.cache.unshift(e);
    return e.result;
  }

  store(key: string, epoch: number, cursorKey: string, result: ScreenshotResult): void {
    if (!this.damageOk || epoch !== this.epoch) return;
    const i = this.cache.findIndex((e) => e.key === key);
    if (i >= 0) this.cache.splice(i, 1);
    this.cache.unshift({ key, epoch, cursorKey, result });
    let bytes = 0;
    for (let j = 0; j < this.cache.length; j++) {
      bytes += this.cache[j].result.data.length;
      if (j >= CACHE_ENTRIES || (j > 0 && bytes > CACHE_BYTES)) {
        this.cache.length = j;
        break;
      }
    }
  }
}

const states = new WeakMap<XDisplay, FrameState>();
function stateOf(d: XDisplay): FrameState {
  let s = states.get(d);
  if (!s) {
    s = new FrameState(d);
    states.set(d, s);
  }
  return s;
}

/** Counters of one connection's frame path (for tests and the bench). */
export function frameStats(d: XDisplay): FrameStats {
  const s = stateOf(d);
  return { captures: s.captures, cacheHits: s.cacheHits, damageEvents: s.damageEvents, damage: s.damageOk };
}

/** Resolves once the connection's damage tracking is set up (or known to be unavailable). */
export function trackDamage(d: XDisplay): Promise<boolean> {
  const s = stateOf(d);
  return s.ready().then(() => s.damageOk);
}

/** The change counter of a connection: it moves whenever the screen may have changed. */
export function damageEpoch(d: XDisplay): number {
  return stateOf(d).epoch;
}

/**
 * Draws a premultiplied ARGB32 cursor onto a BGRX image whose top-left is (originX, originY)
 * on screen. Same arithmetic, per channel, as compositeCursor on RGB, so the result is exact.
 */
export function compositeCursorBgrx(bgrx: Buffer, width: number, height: number, cur: CursorImage, originX: number, originY: number): void {
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
      const o = (ty * width + tx) * 4;
      const inv = 255 - a;
      bgrx[o + 2] = Math.min(255, ((p >>> 16) & 0xff) + (((bgrx[o + 2] * inv + 127) / 255) | 0));
      bgrx[o + 1] = Math.min(255, ((p >>> 8) & 0xff) + (((bgrx[o + 1] * inv + 127) / 255) | 0));
      bgrx[o] = Math.min(255, (p & 0xff) + (((bgrx[o] * inv + 127) / 255) | 0));
    }
  }
}

/** Captures a rectangle as BGRX into a fresh buffer with one spare byte at the end. */
async function captureBgrx(d: XDisplay, r: Region, out: Buffer, beforeGet: () => void): Promise<Buffer> {
  const bytes = r.width * r.height * 4;
  if (d._shm) {
    const got = await d._shmLock.run(async () => {
      const shm = d._shm;
      if (!shm) return false;
      beforeGet();
      const rep = await d.request<{ size: number }>('ShmGetImage', (cb) =>
        shm.ext.GetImage(d.root, r.x, r.y, r.width, r.height, 0xffffffff, 2 /* ZPixmap */, shm.xid, 0, cb),
      );
      if (rep.size < bytes) throw new DisplayError('x_error', `ShmGetImage returned ${rep.size} bytes, expected ${bytes}`);
      // pread from the tmpfs segment straight into this frame's buffer (the client does not mmap it).
      fs.readSync(shm.fd, out, 0, bytes, 0);
      return true;
    });
    if (got) return out;
  }
  beforeGet();
  const img = await d.request<{ data: Buffer }>('GetImage', (cb) => d._x.GetImage(2 /* ZPixmap */, d.root, r.x, r.y, r.width, r.height, 0xffffffff, cb));
  if (img.data.length < bytes) {
    throw new DisplayError('x_error', `GetImage returned ${img.data.length} bytes for ${r.width}x${r.height} (expected 32 bpp)`);
  }
  img.data.copy(out, 0, 0, bytes);
  return out;
}

/** BGRX (plus ≥1 spare byte) → a sharp pipeline over RGB, all native. */
export function rgbPipeline(bgrxPlus: Buffer, width: number, height: number): ReturnType<typeof sharp> {
  const bytes = width * height * 4;
  bgrxPlus.subarray(0, bytes).swap32();
  // Read from byte 1, XRGB XRGB … is R G B X R G B X …: RGBA with a meaningless 4th band.
  const rgbx = bgrxPlus.subarray(1, 1 + bytes);
  return sharp(rgbx, { raw: { width, height, channels: 4 } }).removeAlpha();
}

export interface ResolvedShot {
  format: ScreenshotFormat;
  quality: number;
  region: Region;
  scale: { width: number; height: number } | null;
  wantCursor: boolean;
}

/** Encodes a BGRX frame (consumed: swapped in place) as a screenshot result. */
export async function encodeBgrx(bgrxPlus: Buffer, o: ResolvedShot): Promise<ScreenshotResult> {
  const { region, scale, format, quality } = o;
  let img = rgbPipeline(bgrxPlus, region.width, region.height);
  if (scale) {
    // Flatten to 3 bands before the resize, so the spare byte never acts as alpha.
    const rgb = await img.raw().toBuffer();
    img = sharp(rgb, { raw: { width: region.width, height: region.height, channels: 3 } }).resize(scale.width, scale.height, { fit: 'fill' });
  }
  switch (format) {
    case 'png':
      img = img.png({ compressionLevel: FAST_PNG_COMPRESSION_LEVEL, adaptiveFiltering: false });
      break;
    // No Huffman optimisation pass: it halves encode time (16 → 8 ms at 1280x800) for a few % in size.
    case 'jpeg':
      img = img.jpeg({ quality, optimiseCoding: false });
      break;
    case 'webp':
      img = img.webp({ quality, effort: 0 });
      break;
    case 'raw':
      img = img.raw();
      break;
  }
  const data = await img.toBuffer();
  const out: ScreenshotResult = {
    data,
    width: scale ? scale.width : region.width,
    height: scale ? scale.height : region.height,
    format,
    mimeType: MIME[format],
  };
  if (scale) {
    out.scaleX = region.width / scale.width;
    out.scaleY = region.height / scale.height;
  }
  return out;
}

function cacheKey(o: ResolvedShot): string {
  const r = o.region;
  return `${o.format}/${o.quality}/${r.x},${r.y},${r.width},${r.height}/${o.scale ? `${o.scale.width}x${o.scale.height}` : '-'}/${o.wantCursor ? 1 : 0}`;
}

/** One frame: from the cache when nothing changed, else captured and encoded. */
export async function captureFrame(d: XDisplay, o: ResolvedShot, _opts?: ScreenshotOptions): Promise<ScreenshotResult & { cached?: boolean }> {
  const st = stateOf(d);
  await st.ready();
  // The round trip that makes the epoch current: the cursor request, or a sync.
  let cursor: (CursorImage & { cursorSerial?: number }) | null = null;
  if (o.wantCursor)
    cursor = await d.request<CursorImage & { cursorSerial?: number }>('XFixesGetCursorImage', (cb) => d._fixes.GetCursorImage(cb)).catch(() => null);
  else await d.sync();
  const cursorKey = cursor ? `${cursor.x},${cursor.y},${cursor.cursorSerial ?? cursor.cursorImage.length}` : '-';
  const key = cacheKey(o);
  const hit = st.lookup(key, cursorKey);
  if (hit) {
    st.cacheHits++;
    return { ...hit, cached: true };
  }
  let epoch = st.epoch;
  let buf: Buffer | null = st.take(o.region.width * o.region.height * 4);
  let result: ScreenshotResult;
  try {
    const bgrx = await captureBgrx(d, o.region, buf, () => {
      epoch = st.epoch;
      st.subtract();
    });
    st.captures++;
    if (cursor) compositeCursorBgrx(bgrx, o.region.width, o.region.height, cursor, o.region.x, o.region.y);
    if (o.format === 'png' && !o.scale) {
      // Unscaled PNG (the step's default): only the bands of rows that changed are encoded.
      const r = st.pngEncoder(o.region).encode(bgrx);
      buf = r.recycled;
      result = { data: r.png, width: o.region.width, height: o.region.height, format: 'png', mimeType: MIME.png };
    } else result = await encodeBgrx(bgrx, o);
  } finally {
    // libvips has finished reading the buffer once toBuffer() settled; the PNG encoder keeps
    // its frame and hands back the previous one.
    st.give(buf);
  }
  st.store(key, epoch, cursorKey, result);
  return result;
}
