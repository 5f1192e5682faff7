/** The shapes of screenshots and cursor images, shared by screenshot.ts (options) and frames.ts (capture). */
export type ScreenshotFormat = 'png' | 'jpeg' | 'webp' | 'raw';

export interface Region {
  x: number;
  y: number;
  width: number;
  height: number;
}

export interface ScreenshotOptions {
  format?: ScreenshotFormat;
  /** JPEG/WebP quality 1..100 (default 80). */
  quality?: number;
  /** Capture only this rectangle (screen coordinates). */
  region?: Region;
  /** Resize the output to this size (fill, aspect not kept). One side alone keeps the aspect. */
  scale?: { width?: number; height?: number };
  /** Draw the pointer (default true). */
  cursor?: boolean;
  /**
   * Internal (not reachable from the HTTP API): a downscale by a whole factor (2..16 both ways)
   * averages each factor x factor box in one pass over the capture (frames.ts shrinkBgrx)
   * instead of libvips' resize; about 3x less CPU per frame. The frame stream's thumbnails use it.
   */
  boxScale?: boolean;
}

export interface ScreenshotResult {
  data: Buffer;
  width: number;
  height: number;
  format: ScreenshotFormat;
  mimeType: string;
  /** Multiply an x in this image by scaleX (and add region.x) to get a screen x. Only when scaled. */
  scaleX?: number;
  scaleY?: number;
  /** Where the frame's time went in the daemon (ms, wall; absent for a cached frame). */
  timing?: FrameTiming;
}

/**
 * A frame's stages (ms of wall time): `cursor` the XFixes round trip (or a sync), `grab` the
 * ShmGetImage round trip and the copy out of the segment, `draw` the pointer drawn in, `colour`
 * BGRX → RGB (the banded PNG's filter pass with its Adler-32; swap32 otherwise), `encode` the
 * compression (zlib's deflate per band; libvips' whole encode otherwise, which runs on libuv's
 * pool, so this is its wait). `bands`: PNG bands encoded anew of all.
 */
export interface FrameTiming {
  cursor: number;
  grab: number;
  draw: number;
  colour: number;
  encode: number;
  bands?: [number, number];
}

export interface CursorImage {
  x: number;
  y: number;
  width: number;
  height: number;
  xhot: number;
  yhot: number;
  cursorImage: Buffer;
}
