/**
 * An exact PNG encoder for a stream of screen frames that re-encodes only the bands of rows
 * that changed since the previous frame.
 *
 * A PNG's pixels are one zlib stream over the filtered rows (here filter type 0, "none": a 0
 * byte, then the row's RGB bytes). Each band of BAND_ROWS rows is deflated on its own (a fresh
 * dictionary, ended by a sync flush: byte-aligned and not final), so bands can be concatenated
 * in any combination; the stream ends with an empty final block and the Adler-32 of all rows,
 * combined from the bands' own checksums. The encoder keeps only each band's compressed bytes
 * and checksum (~40 KB for a 1280x800 screen), never the pixels: the caller says which bands
 * may have changed (frames.ts: from DAMAGE rectangles ordered by sequence number, and the
 * pointer's rows), and a band it does not name must be byte-identical to the last frame's.
 *
 * Cost at 1280x800 (2-core host, CPU): per changed 16-row band ~0.13 ms (BGRX → filtered RGB
 * and its Adler-32 in one JS pass, then zlib). A pointer move changes 2–4 bands: well under
 * 1 ms instead of libvips' ~6.3 ms for the whole frame. A whole new screen costs about what
 * libvips does (~7 ms). encode() is synchronous; the daemon runs encodeBandsOf() on a worker
 * thread instead (band-pool.ts: one message per frame) and assemble()s here. Moving the deflates
 * to the thread pool one zlib call per band was measured: zlib's async calls cost ~0.1 ms each
 * more than the work they move (60% more CPU for a full screen).
 */
import * as zlib from 'node:zlib';

/** Rows per independently compressed band. */
export const BAND_ROWS = 16;
/** zlib level (measured on screen content: level 1..3 cost the same; 3 is a little smaller). */
export const BAND_PNG_LEVEL = 3;
const DEFLATE_OPTS: zlib.ZlibOptions = { level: BAND_PNG_LEVEL, finishFlush: zlib.constants.Z_SYNC_FLUSH };
const ADLER_MOD = 65521;
/** Bytes summed before a reduction, so both sums stay small integers (< 2^31). */
const ADLER_RUN = 3800;
const SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
/** zlib header: deflate, 32 KiB window, no dictionary, check bits. */
const ZLIB_HEADER = Buffer.from([0x78, 0x01]);
/** An empty final block (fixed Huffman codes, just the end-of-block code). */
const FINAL_BLOCK = Buffer.from([0x03, 0x00]);
const IEND = Buffer.from([0, 0, 0, 0, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82]);

export function adler32(b: Uint8Array): number {
  let a = 1,
    s = 0,
    i = 0;
  const n = b.length;
  while (i < n) {
    const end = Math.min(n, i + ADLER_RUN);
    for (; i < end; i++) {
      a += b[i]!;
      s += a;
    }
    a %= ADLER_MOD;
    s %= ADLER_MOD;
  }
  return s * 65536 + a;
}

/** The Adler-32 of X followed by Y, from adler(X), adler(Y) and Y's length. */
export function adler32Concat(ax: number, ay: number, lenY: number): number {
  const xa = ax % 65536,
    xs = Math.floor(ax / 65536);
  const ya = ay % 65536,
    ys = Math.floor(ay / 65536);
  // Over Y the running sum starts at xa instead of 1: every one of Y's lenY partial sums is
  // (xa - 1) higher.
  const a = (xa + ya - 1 + ADLER_MOD) % ADLER_MOD;
  const s = (xs + ys + (lenY % ADLER_MOD) * ((xa - 1 + ADLER_MOD) % ADLER_MOD)) % ADLER_MOD;
  return s * 65536 + a;
}

interface Band {
  body: Buffer;
  adler: number;
  /** Uncompressed (filtered) bytes. */
  len: number;
}

/** One band encoded, wherever it was (this thread or a worker: band-pool.ts). */
export interface EncodedBand {
  k: number;
  body: Uint8Array;
  adler: number;
  len: number;
}

let scratchRows = Buffer.alloc(0);

/**
 * Bands `ks` of a BGRX frame, each filtered and deflated on its own (what a PNG of BandPngEncoder
 * concatenates). Synchronous; the rows scratch is per thread. `filterMs`/`deflateMs`: the time in each.
 */
export function encodeBandsOf(bgrx: Uint8Array, width: number, height: number, ks: number[]): { bands: EncodedBand[]; filterMs: number; deflateMs: number } {
  const need = BAND_ROWS * (width * 3 + 1);
  if (scratchRows.length < need) scratchRows = Buffer.allocUnsafe(need);
  const buf = Buffer.from(bgrx.buffer, bgrx.byteOffset, bgrx.byteLength);
  const bands: EncodedBand[] = [];
  let filterMs = 0,
    deflateMs = 0;
  for (const k of ks) {
    const t0 = performance.now();
    const { rows, adler } = filterRows(buf, width, k * BAND_ROWS, Math.min(height, (k + 1) * BAND_ROWS), scratchRows);
    const t1 = performance.now();
    bands.push({ k, body: ownBytes(zlib.deflateRawSync(rows, DEFLATE_OPTS)), adler, len: rows.length });
    filterMs += t1 - t0;
    deflateMs += performance.now() - t1;
  }
  return { bands, filterMs, deflateMs };
}

export interface BandEncodeResult {
  png: Buffer;
  /** Bands encoded anew for this frame (all of them for the first). */
  changedBands: number;
  bands: number;
  /** ms spent in the filter pass (BGRX → filtered RGB and its Adler-32) and in deflate. */
  filterMs: number;
  deflateMs: number;
}

/**
 * BGRX rows y0..y1 → filtered RGB rows (filter byte 0) in `out`, and their Adler-32, summed in
 * the same pass (a separate pass costs as much again as the conversion).
 */
export function filterRows(bgrx: Buffer, width: number, y0: number, y1: number, out: Buffer): { rows: Buffer; adler: number } {
  const rows = out.subarray(0, (y1 - y0) * (width * 3 + 1));
  if (bgrx.byteOffset % 4 !== 0) {
    let o = y0 * width * 4,
      j = 0;
    for (let y = y0; y < y1; y++) {
      rows[j++] = 0;
      for (let x = 0; x < width; x++, o += 4, j += 3) {
        rows[j] = bgrx[o + 2]!;
        rows[j + 1] = bgrx[o + 1]!;
        rows[j + 2] = bgrx[o]!;
      }
    }
    return { rows, adler: adler32(rows) };
  }
  const px = new Uint32Array(bgrx.buffer, bgrx.byteOffset + y0 * width * 4, (y1 - y0) * width);
  let i = 0,
    j = 0,
    a = 1,
    s = 0;
  for (let y = y0; y < y1; y++) {
    rows[j++] = 0;
    s += a;
    for (let x = 0; x < width; x++) {
      const p = px[i++]!;
      const r = (p >>> 16) & 0xff,
        g = (p >>> 8) & 0xff,
        b = p & 0xff;
      rows[j] = r;
      rows[j + 1] = g;
      rows[j + 2] = b;
      j += 3;
      a += r;
      s += a;
      a += g;
      s += a;
      a += b;
      s += a;
      // Reduce every 512 pixels: both sums stay small integers.
      if ((x & 511) === 511) {
        a %= ADLER_MOD;
        s %= ADLER_MOD;
      }
    }
    a %= ADLER_MOD;
    s %= ADLER_MOD;
  }
  return { rows, adler: s * 65536 + a };
}

function chunk(type: string, data: Buffer[], length: number): Buffer {
  const out = Buffer.allocUnsafe(12 + length);
  out.writeUInt32BE(length, 0);
  out.write(type, 4, 'latin1');
  let o = 8;
  for (const d of data) o += d.copy(out, o);
  out.writeUInt32BE(zlib.crc32(out.subarray(4, 8 + length)), 8 + length);
  return out;
}

/**
 * `b` in an ArrayBuffer of its own size. zlib's sync calls return a view of their output chunk
 * (a 64 KiB allocation, 16 KiB of it per call), so a kept band of a few hundred bytes held 16
 * KiB, and a whole 64 KiB slab while any band cut from it lived: re-encoding scattered bands
 * over a reset cycle spread a display's live bands over ever more slabs (a 1280x800 encoder went
 * from 0.8 MiB after its first frame to 2 MiB after 50 steps, for ~20 KB of compressed bytes;
 * the soak's daemon RSS grew with it). The copy costs a memcpy of the compressed bytes.
 */
export function ownBytes(b: Buffer): Buffer {
  if (b.byteOffset === 0 && b.byteLength === b.buffer.byteLength) return b;
  const out = Buffer.allocUnsafeSlow(b.length);
  b.copy(out);
  return out;
}

/** One encoder per stream of same-sized frames (one display's full screen, say). */
export class BandPngEncoder {
  readonly width: number;
  readonly height: number;
  private _bands: Band[] = [];
  private _ihdr: Buffer;
  /** Bands per frame. */
  readonly bands: number;

  constructor(width: number, height: number) {
    this.width = width;
    this.height = height;
    const h = Buffer.alloc(13);
    h.writeUInt32BE(width, 0);
    h.writeUInt32BE(height, 4);
    h[8] = 8; // bit depth
    h[9] = 2; // colour type: RGB
    // Kept for the encoder's life: not a view of the shared Buffer pool (it would pin an 8 KiB slab).
    this._ihdr = ownBytes(chunk('IHDR', [h], 13));
    this.bands = Math.ceil(height / BAND_ROWS);
  }

  /**
   * Bytes of memory the kept bands hold: their ArrayBuffers, each counted once (a band that is a
   * view of a larger buffer holds all of it). About their compressed size (for tests and the bench).
   */
  retainedBytes(): number {
    const seen = new Set<ArrayBufferLike>();
    let n = this._ihdr.buffer.byteLength;
    for (const b of this._bands)
      if (b && !seen.has(b.body.buffer)) {
        seen.add(b.body.buffer);
        n += b.body.buffer.byteLength;
      }
    return n;
  }

  /** Compressed bytes of the kept bands. */
  compressedBytes(): number {
    let n = 0;
    for (const b of this._bands) if (b) n += b.body.length;
    return n;
  }

  /** Forgets every band: the next frame is encoded whole. */
  reset(): void {
    this._bands = [];
  }

  /** Per band: whether encode() with this `changed` would encode it anew (changed, or never encoded). */
  pending(changed: (band: number) => boolean): boolean[] {
    const out = new Array<boolean>(this.bands);
    for (let k = 0; k < this.bands; k++) out[k] = !this._bands[k] || changed(k);
    return out;
  }

  /**
   * Encodes `bgrx` (width*height*4 bytes, or more; read only during the call). `changed(k)`
   * says whether band k (rows k*BAND_ROWS..) may differ from the previous frame; bands never
   * encoded yet are encoded whatever it says.
   */
  encode(bgrx: Buffer, changed: (band: number) => boolean): BandEncodeResult {
    const todo = this.todo(changed);
    const { bands, filterMs, deflateMs } = encodeBandsOf(bgrx, this.width, this.height, todo);
    return { ...this.assemble(bands), filterMs, deflateMs };
  }

  /** The bands encode() with this `changed` would encode (changed, or never encoded). */
  todo(changed: (band: number) => boolean): number[] {
    const todo: number[] = [];
    for (let k = 0; k < this.bands; k++) if (!this._bands[k] || changed(k)) todo.push(k);
    return todo;
  }

  /**
   * Keeps bands encoded elsewhere (encodeBandsOf, here or in a worker) in place of the old ones,
   * then makes the PNG of all bands. The caller encoded exactly todo()'s bands of one frame.
   */
  assemble(encoded: EncodedBand[]): Omit<BandEncodeResult, 'filterMs' | 'deflateMs'> {
    const n = this.bands;
    const bands = this._bands;
    for (const e of encoded) {
      const body = Buffer.from(e.body.buffer, e.body.byteOffset, e.body.byteLength);
      bands[e.k] = { body: ownBytes(body), adler: e.adler, len: e.len };
    }
    for (let k = 0; k < n; k++) if (!bands[k]) throw new Error(`band ${k} was never encoded`);
    let adler = 1,
      len = ZLIB_HEADER.length + FINAL_BLOCK.length + 4;
    const parts: Buffer[] = [ZLIB_HEADER];
    for (let k = 0; k < n; k++) {
      const band = bands[k]!;
      adler = k === 0 ? band.adler : adler32Concat(adler, band.adler, band.len);
      parts.push(band.body);
      len += band.body.length;
    }
    const tail = Buffer.allocUnsafe(FINAL_BLOCK.length + 4);
    FINAL_BLOCK.copy(tail, 0);
    tail.writeUInt32BE(adler, FINAL_BLOCK.length);
    parts.push(tail);
    const png = Buffer.concat([SIGNATURE, this._ihdr, chunk('IDAT', parts, len), IEND]);
    return { png, changedBands: encoded.length, bands: n };
  }
}
