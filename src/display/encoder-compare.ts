/**
 * Candidate full-frame PNG encoders side by side on one BGRX frame (for `drums bench
 * frame-profile`): the banded encoder encoding every band (what a new screen costs the daemon,
 * on the event loop), and libvips through sharp at its fastest settings (no filter, zlib level
 * 0 and 1, on libuv's pool), plus JPEG q80 for scale. Each one's PNG is decoded and compared with
 * the frame's RGB bytes (exact).
 */
import sharp from 'sharp';
import { BandPngEncoder } from './png-bands.ts';
import { rgbPipeline } from './frames.ts';
import { bgrxToRgb } from './screenshot.ts';

export interface EncoderRow {
  name: string;
  where: 'event loop' | 'libuv pool' | 'worker';
  wallMs: number;
  cpuMs: number;
  bytes: number;
  exact: boolean;
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return Math.round(s[Math.floor(s.length / 2)]! * 100) / 100;
};

export async function compareEncoders(bgrx: Buffer, width: number, height: number, rounds: number): Promise<EncoderRow[]> {
  const rgb = bgrxToRgb(bgrx, width * height);
  const exact = async (png: Buffer) => {
    const { data, info } = await sharp(png).raw().toBuffer({ resolveWithObject: true });
    return info.channels === 3 && info.width === width && info.height === height && data.equals(rgb);
  };
  const work = Buffer.allocUnsafe(bgrx.length);
  const cands: { name: string; where: EncoderRow['where']; run: () => Buffer | Promise<Buffer>; check: boolean }[] = [
    {
      name: 'bands (zlib level 3, 16-row bands, all encoded)',
      where: 'event loop',
      run: () => new BandPngEncoder(width, height).encode(bgrx, () => true).png,
      check: true,
    },
    ...[0, 1, 3].map((level) => ({
      name: `libvips png (compressionLevel ${level}, adaptiveFiltering off)`,
      where: 'libuv pool' as const,
      run: () => {
        bgrx.copy(work);
        return rgbPipeline(work, width, height).png({ compressionLevel: level, adaptiveFiltering: false }).toBuffer();
      },
      check: true,
    })),
    {
      name: 'libvips jpeg q80 (for scale)',
      where: 'libuv pool',
      run: () => {
        bgrx.copy(work);
        return rgbPipeline(work, width, height).jpeg({ quality: 80, optimiseCoding: false }).toBuffer();
      },
      check: false,
    },
  ];
  const out: EncoderRow[] = [];
  for (const c of cands) {
    const wall: number[] = [],
      cpu: number[] = [];
    let last: Buffer = Buffer.alloc(0);
    await c.run(); // warm
    for (let i = 0; i < rounds; i++) {
      const u0 = process.cpuUsage();
      const t0 = performance.now();
      last = await c.run();
      wall.push(performance.now() - t0);
      const u = process.cpuUsage(u0);
      cpu.push((u.user + u.system) / 1000);
    }
    out.push({ name: c.name, where: c.where, wallMs: median(wall), cpuMs: median(cpu), bytes: last.length, exact: c.check ? await exact(last) : false });
  }
  return out;
}
