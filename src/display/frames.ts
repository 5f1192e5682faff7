/**
 * The fast frame path: capture, colour conversion, cursor and encoding with the pixel work in
 * native code (libvips through sharp, Buffer.swap32), and a per-display frame cache driven by
 * the X DAMAGE extension, so an unchanged screen reuses its last encoding.
 *
 * Pipeline of one frame (1280x800: ~4 MB of BGRX):
 *   ShmGetImage → pread into a scratch buffer (shared by all connections) → the cursor drawn
 *   onto the BGRX bytes (only its own ~32x32 rectangle, in JS) → then either
 *   - unscaled PNG (the default): the banded encoder (png-bands.ts) deflates only the 16-row
 *     bands that damage or the pointer touched since its last frame (encodeBands), or
 *   - anything else: swap32 in place (BGRX → XRGB, native) → the buffer read from byte 1 is
 *     RGBX → sharp: drop the 4th band, resize, encode (libvips' thread pool).
 * The PNG bands that changed are filtered and deflated on a worker thread (band-pool.ts), the
 * rest in libvips' pool: per-pixel work on the event loop is the cursor's rectangle. PNG and
 * raw are exact: they decode to the same RGB bytes as the earlier all-JS path
 * (tests/integration/display-frames.test.ts checks that).
 *
 * Damage: one DAMAGE object (level NonEmpty) on the root window per connection. Every
 * DamageNotify bumps `epoch`. A capture sends DamageSubtract just before its GetImage, so the
 * next change after it always notifies again. A cached frame is reused only when, after a
 * round trip (the cursor request, or a sync), the epoch is still the one it was captured at
 * and the cursor (position, serial) is unchanged: events the server sent before answering
 * that round trip have all arrived by then, so "no event" means "no change". A second DAMAGE
 * object (level RawRectangles, never subtracted) tells the banded PNG encoder which rows
 * changed, ordered against the capture by the events' sequence numbers (FrameState.rowSeq).
 */
import * as fs from 'node:fs';
import sharp from 'sharp';
import { DisplayError } from './errors.ts';
import { BAND_ROWS, BandPngEncoder } from './png-bands.ts';
import { bandPool } from './band-pool.ts';
import { Lock } from './x-connection.ts';
import type { XConnection } from './x-connection.ts';
import type { CursorImage, Region, ScreenshotFormat, ScreenshotOptions, ScreenshotResult } from './image-types.ts';

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
  /**
   * For the banded PNG encoder: per screen row, the highest sequence number of a DamageNotify
   * (level RawRectangles: one event per drawing operation) that touched it. An event's sequence
   * number is that of the last request of ours the server had processed when the damage
   * happened, so a row is unchanged since a GetImage sent after request S iff its number is < S.
   */
  rowSeq: Float64Array | null = null;
  /** Banded PNG encoders by region and cursor, with the sequence number of their last capture. */
  readonly png = new Map<string, { enc: BandPngEncoder; seq: number; cursorRows: [number, number] | null }>();
  /**
   * Banded PNG frames one at a time (plan, capture, encode on a worker, assemble): a frame planned
   * while another's bands are on the worker would assemble bands of two moments.
   */
  readonly pngLock = new Lock();
  private _ext: any = null;
  private _damage = 0;
  private _raw = 0;
  private _ready: Promise<void> | null = null;

  private readonly c: XConnection;
  constructor(c: XConnection) {
    this.c = c;
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
    const c = this.c;
    const ext = await c.request<any>('DAMAGE QueryExtension', (cb) => c.x.require('damage', cb as any));
    const id = c.x.AllocID();
    const raw = c.x.AllocID();
    const rows = new Float64Array(c.height);
    c.on('xevent', (ev: { name?: string; damage?: number; seq?: number; area?: { y: number; h: number } }) => {
      if (ev.name !== 'DamageNotify') return;
      if (ev.damage === id) {
        this.epoch++;
        this.damageEvents++;
      } else if (ev.damage === raw && ev.area) {
        const seq = ev.seq ?? Number.POSITIVE_INFINITY;
        for (let y = Math.max(0, ev.area.y), end = Math.min(rows.length, ev.area.y + ev.area.h); y < end; y++) if (rows[y]! < seq) rows[y] = seq;
      }
    });
    ext.Create(id, c.root, ext.ReportLevel.NonEmpty);
    ext.Create(raw, c.root, ext.ReportLevel.RawRectangles);
    await c.sync();
    this._raw = raw;
    this.rowSeq = rows;
    this._ext = ext;
    this._damage = id;
    this.damageOk = true;
  }

  /** Empties the damage region: the next change after this request notifies again. */
  subtract(): void {
    if (!this.damageOk) return;
    this._ext.Subtract(this._damage, 0, 0);
    // The raw object reports every drawing operation whatever its region holds; emptying the
    // region only keeps the server's bookkeeping small.
    this._ext.Subtract(this._raw, 0, 0);
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

/**
 * Capture buffers, shared by every connection of the process: a frame's BGRX bytes live only
 * from its GetImage to the end of its encode, so the daemon needs as many as it encodes at once,
 * not one per session (per connection that was ~4 MB of RSS per session that ever took a
 * screenshot). A reused buffer also saves the ~2 ms of page faults a fresh 4 MB one costs.
 * Buffers are kept up to SCRATCH_KEEP (beyond that, a burst's extra ones are left to the GC);
 * a buffer larger than asked is handed out as a view of the right length.
 */
export const SCRATCH_KEEP = 4;
class ScratchPool {
  private readonly _free: Buffer[] = [];
  /** Buffers handed out and not yet given back (for tests and the bench). */
  inUse = 0;
  allocated = 0;

  get kept(): number {
    return this._free.length;
  }

  take(bytes: number): Buffer {
    this.inUse++;
    // The smallest kept buffer that fits.
    let best = -1;
    for (let i = 0; i < this._free.length; i++) if (this._free[i].length >= bytes && (best < 0 || this._free[i].length < this._free[best].length)) best = i;
    if (best >= 0) return this._free.splice(best, 1)[0].subarray(0, bytes);
    this.allocated++;
    // Shared memory: the band encoder's worker reads the frame in place (band-pool.ts).
    return Buffer.from(new SharedArrayBuffer(bytes));
  }

  give(b: Buffer): void {
    this.inUse--;
    // The whole underlying buffer goes back (take() may have handed out a view of it).
    const whole = Buffer.from(b.buffer, 0, b.buffer.byteLength);
    if (this._free.length < SCRATCH_KEEP) this._free.push(whole);
    else {
      // Keep the largest ones: a full-screen frame then never allocates.
      const i = this._free.reduce((m, x, j, a) => (x.length < a[m].length ? j : m), 0);
      if (this._free[i].length < whole.length) this._free[i] = whole;
    }
  }
}
const scratch = new ScratchPool();

/** The shared capture buffers: kept, in use, and allocated so far. */
export function scratchStats(): { kept: number; inUse: number; allocated: number } {
  return { kept: scratch.kept, inUse: scratch.inUse, allocated: scratch.allocated };
}

const states = new WeakMap<XConnection, FrameState>();
function stateOf(c: XConnection): FrameState {
  let s = states.get(c);
  if (!s) {
    s = new FrameState(c);
    states.set(c, s);
  }
  return s;
}

/** Counters of one connection's frame path (for tests and the bench). */
export function frameStats(c: XConnection): FrameStats {
  const s = stateOf(c);
  return { captures: s.captures, cacheHits: s.cacheHits, damageEvents: s.damageEvents, damage: s.damageOk };
}

/** Resolves once the connection's damage tracking is set up (or known to be unavailable). */
export function trackDamage(c: XConnection): Promise<boolean> {
  const s = stateOf(c);
  return s.ready().then(() => s.damageOk);
}

/** The change counter of a connection: it moves whenever the screen may have changed. */
export function damageEpoch(c: XConnection): number {
  return stateOf(c).epoch;
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

/**
 * Captures a rectangle as BGRX into `out` (a scratch buffer with at least one spare byte at the
 * end). `rowsWanted`, called once the capture's reply is in, may name the only row ranges
 * ([y0, y1) of the region) the caller will read: then only those are copied out of the MIT-SHM
 * segment (the banded PNG path reads the few bands that changed, not all 4 MB; the copy of a
 * whole 1280x800 frame cost ~1-2 ms of the daemon's CPU per step); the other rows of `out` are
 * left as they were.
 */
async function captureBgrx(c: XConnection, r: Region, out: Buffer, beforeGet: () => void, rowsWanted?: () => Array<[number, number]> | null): Promise<Buffer> {
  const bytes = r.width * r.height * 4;
  if (c.shm) {
    const got = await c.shmLock.run(async () => {
      const shm = c.shm;
      if (!shm) return false;
      beforeGet();
      const rep = await c.request<{ size: number }>('ShmGetImage', (cb) =>
        shm.ext.GetImage(c.root, r.x, r.y, r.width, r.height, 0xffffffff, 2 /* ZPixmap */, shm.xid, 0, cb),
      );
      if (rep.size < bytes) throw new DisplayError('x_error', `ShmGetImage returned ${rep.size} bytes, expected ${bytes}`);
      // pread from the tmpfs segment straight into this frame's buffer (the client does not mmap it).
      const ranges = rowsWanted?.();
      if (!ranges) fs.readSync(shm.fd, out, 0, bytes, 0);
      else {
        const stride = r.width * 4;
        for (const [y0, y1] of ranges) fs.readSync(shm.fd, out, y0 * stride, (y1 - y0) * stride, y0 * stride);
      }
      return true;
    });
    if (got) return out;
  }
  beforeGet();
  const img = await c.request<{ data: Buffer }>('GetImage', (cb) => c.x.GetImage(2 /* ZPixmap */, c.root, r.x, r.y, r.width, r.height, 0xffffffff, cb));
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
  /** A whole-factor downscale as a box average (ScreenshotOptions.boxScale). */
  boxScale?: boolean;
}

/** The whole factor f (2..16) by which `scale` shrinks `region` both ways, or 0. */
export function boxFactor(region: Region, scale: { width: number; height: number }): number {
  const f = region.width / scale.width;
  return Number.isInteger(f) && f >= 2 && f <= 16 && region.height === scale.height * f ? f : 0;
}

/**
 * BGRX (width x height) → RGB shrunk by a whole factor f, each output pixel the rounded mean
 * of its f x f box. One pass over the capture, on 32-bit words: B and R are summed in the two
 * 16-bit lanes of one word (at most 16 x 16 x 255 < 2^16, so no lane overflows), G apart.
 * About 1 ms for 1280x800 → 320x200, where a libvips resize of the same frame costs ~8 ms CPU
 * (its 3-band copy of the whole frame first, then the resize).
 */
export function shrinkBgrx(bgrx: Buffer, width: number, height: number, f: number): Buffer {
  const ow = width / f,
    oh = height / f,
    n = f * f,
    half = n >> 1;
  const src = bgrx.byteOffset % 4 === 0 ? bgrx : Buffer.from(bgrx.subarray(0, width * height * 4));
  const px = new Uint32Array(src.buffer, src.byteOffset, width * height);
  const out = Buffer.allocUnsafe(ow * oh * 3);
  const rb = new Uint32Array(ow),
    gg = new Uint32Array(ow);
  let o = 0;
  for (let oy = 0; oy < oh; oy++) {
    rb.fill(0);
    gg.fill(0);
    for (let dy = 0; dy < f; dy++) {
      let i = (oy * f + dy) * width;
      for (let ox = 0; ox < ow; ox++) {
        let a = 0,
          g = 0;
        for (let dx = 0; dx < f; dx++) {
          const p = px[i++]!;
          a += p & 0xff00ff;
          g += (p >>> 8) & 0xff;
        }
        rb[ox]! += a;
        gg[ox]! += g;
      }
    }
    for (let ox = 0; ox < ow; ox++) {
      const a = rb[ox]!;
      out[o++] = ((a >>> 16) + half) / n;
      out[o++] = (gg[ox]! + half) / n;
      out[o++] = ((a & 0xffff) + half) / n;
    }
  }
  return out;
}

// ─── Resolving screenshot options: checked once against the screen, then captured as given ───

export const DEFAULT_JPEG_QUALITY = 80;
const MAX_SCALE_SIDE = 8192;

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

/** Encodes a BGRX frame (consumed: swapped in place) as a screenshot result. */
export async function encodeBgrx(bgrxPlus: Buffer, o: ResolvedShot): Promise<ScreenshotResult> {
  const { region, scale, format, quality } = o;
  const f = scale && o.boxScale ? boxFactor(region, scale) : 0;
  const t0 = performance.now();
  let img = f
    ? sharp(shrinkBgrx(bgrxPlus, region.width, region.height, f), { raw: { width: scale!.width, height: scale!.height, channels: 3 } })
    : rgbPipeline(bgrxPlus, region.width, region.height);
  const t1 = performance.now();
  if (scale && !f) {
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
    timing: { cursor: 0, grab: 0, draw: 0, colour: t1 - t0, encode: performance.now() - t1 },
  };
  if (scale) {
    out.scaleX = region.width / scale.width;
    out.scaleY = region.height / scale.height;
  }
  return out;
}

function cacheKey(o: ResolvedShot): string {
  const r = o.region;
  return `${o.format}/${o.quality}/${r.x},${r.y},${r.width},${r.height}/${o.scale ? `${o.scale.width}x${o.scale.height}` : '-'}/${o.wantCursor ? 1 : 0}${o.boxScale ? '/box' : ''}`;
}

/** Banded encoders kept per connection (region × cursor); each holds only compressed bands. */
const PNG_ENCODERS = 2;

interface BandPlan {
  e: { enc: BandPngEncoder; seq: number; cursorRows: [number, number] | null };
  /** Per band: encode it anew (it may have changed, or was never encoded). */
  need: boolean[];
  cur: [number, number] | null;
}

/**
 * Unscaled PNG (the step's default): only the bands that may have changed since this
 * encoder's last frame are encoded again: rows with damage numbered at or after that frame's
 * capture, and the rows of the pointer then and now (the cursor is drawn in, not damage).
 * Planned once the capture's reply is in: the event carrying any damage before its GetImage
 * has arrived with (before) the reply, and later damage is the next frame's.
 */
function planBands(st: FrameState, o: ResolvedShot, cursor: CursorImage | null): BandPlan {
  const r = o.region;
  const key = `${r.x},${r.y},${r.width},${r.height}/${cursor ? 1 : 0}`;
  let e = st.png.get(key);
  if (!e) {
    if (st.png.size >= PNG_ENCODERS) st.png.delete(st.png.keys().next().value!);
    e = { enc: new BandPngEncoder(r.width, r.height), seq: 0, cursorRows: null };
  }
  st.png.delete(key);
  st.png.set(key, e);
  const rows = st.rowSeq!;
  const since = e.seq;
  const cur: [number, number] | null = cursor ? [cursor.y - cursor.yhot - r.y, cursor.y - cursor.yhot - r.y + cursor.height] : null;
  const was = e.cursorRows;
  const need = e.enc.pending((k) => {
    const y0 = k * BAND_ROWS,
      y1 = Math.min(r.height, y0 + BAND_ROWS);
    if (cur && cur[0] < y1 && cur[1] > y0) return true;
    if (was && was[0] < y1 && was[1] > y0) return true;
    for (let y = r.y + y0; y < r.y + y1; y++) if (rows[y]! >= since) return true;
    return false;
  });
  return { e, need, cur };
}

/** The row ranges of the bands a plan encodes (adjacent bands merged). */
function planRows(p: BandPlan, height: number): Array<[number, number]> {
  const out: Array<[number, number]> = [];
  for (let k = 0; k < p.need.length; k++) {
    if (!p.need[k]) continue;
    const y0 = k * BAND_ROWS,
      y1 = Math.min(height, y0 + BAND_ROWS);
    const last = out[out.length - 1];
    if (last && last[1] === y0) last[1] = y1;
    else out.push([y0, y1]);
  }
  return out;
}

async function encodeBands(p: BandPlan, bgrx: Buffer, o: ResolvedShot, seq: number): Promise<ScreenshotResult> {
  const r = o.region;
  const t0 = performance.now();
  const enc = p.e.enc;
  // The changed bands are filtered and deflated on a worker (the event loop only dispatches and
  // concatenates); a buffer that is not shared (none today) is encoded here.
  const todo = enc.todo((k) => p.need[k]!);
  let out: ReturnType<BandPngEncoder['encode']>;
  if (bgrx.buffer instanceof SharedArrayBuffer && todo.length) {
    const w = await bandPool.encode(bgrx, enc.width, enc.height, todo);
    out = { ...enc.assemble(w.bands), filterMs: w.filterMs, deflateMs: w.deflateMs };
  } else out = enc.encode(bgrx, (k) => p.need[k]!);
  p.e.seq = seq;
  p.e.cursorRows = p.cur;
  // What is not filter or deflate (the message, the chunks, their CRC, the concatenation) counts as encode.
  const rest = performance.now() - t0 - out.filterMs - out.deflateMs;
  return {
    data: out.png,
    width: r.width,
    height: r.height,
    format: 'png',
    mimeType: MIME.png,
    timing: { cursor: 0, grab: 0, draw: 0, colour: out.filterMs, encode: out.deflateMs + rest, bands: [out.changedBands, out.bands] },
  };
}

/** One frame: from the cache when nothing changed, else captured and encoded. */
export async function captureFrame(c: XConnection, o: ResolvedShot, _opts?: ScreenshotOptions): Promise<ScreenshotResult & { cached?: boolean }> {
  const st = stateOf(c);
  await st.ready();
  // The round trip that makes the epoch current: the cursor request, or a sync.
  let cursor: (CursorImage & { cursorSerial?: number }) | null = null;
  const t0 = performance.now();
  if (o.wantCursor)
    cursor = await c.request<CursorImage & { cursorSerial?: number }>('XFixesGetCursorImage', (cb) => c.fixes.GetCursorImage(cb)).catch(() => null);
  else await c.sync();
  const cursorKey = cursor ? `${cursor.x},${cursor.y},${cursor.cursorSerial ?? cursor.cursorImage.length}` : '-';
  const key = cacheKey(o);
  const hit = st.lookup(key, cursorKey);
  if (hit) {
    st.cacheHits++;
    const { timing: _, ...kept } = hit;
    return { ...kept, cached: true };
  }
  const banded = o.format === 'png' && !o.scale && st.rowSeq !== null;
  const cursorMs = performance.now() - t0;
  return banded
    ? st.pngLock.run(() => captureFresh(c, st, o, cursor, cursorKey, key, true, cursorMs))
    : captureFresh(c, st, o, cursor, cursorKey, key, false, cursorMs);
}

async function captureFresh(
  c: XConnection,
  st: FrameState,
  o: ResolvedShot,
  cursor: (CursorImage & { cursorSerial?: number }) | null,
  cursorKey: string,
  key: string,
  banded: boolean,
  cursorMs: number,
): Promise<ScreenshotResult> {
  let epoch = st.epoch;
  let seq = 0;
  const t1 = performance.now();
  const buf = scratch.take(o.region.width * o.region.height * 4 + 4);
  let plan: BandPlan | null = null;
  let result: ScreenshotResult;
  try {
    const bgrx = await captureBgrx(
      c,
      o.region,
      buf,
      () => {
        epoch = st.epoch;
        st.subtract();
        // The GetImage goes out next: damage numbered >= this happened after the last request
        // before it (so possibly after the capture), anything lower is in the capture.
        seq = c.x.seq_num;
      },
      banded
        ? () => {
            plan = planBands(st, o, cursor);
            return planRows(plan, o.region.height);
          }
        : undefined,
    );
    st.captures++;
    const t2 = performance.now();
    // The pointer's rows are always in a plan's bands, so the cursor lands on rows that were read.
    if (cursor) compositeCursorBgrx(bgrx, o.region.width, o.region.height, cursor, o.region.x, o.region.y);
    const t3 = performance.now();
    result = banded ? await encodeBands(plan ?? planBands(st, o, cursor), bgrx, o, seq) : await encodeBgrx(bgrx, o);
    if (result.timing) Object.assign(result.timing, { cursor: cursorMs, grab: t2 - t1, draw: t3 - t2 });
  } finally {
    // libvips has finished reading the buffer once toBuffer() settled.
    scratch.give(buf);
  }
  st.store(key, epoch, cursorKey, result);
  return result;
}
