/**
 * Binary step responses: when a client asks for the image itself (`Accept: image/png`, or the
 * mime type of the requested format), POST /actions answers with the image bytes as the body and
 * the JSON (generation, results) in the `x-drums-actions` header, so no base64 and no JSON
 * parsing of megabytes. The JSON falls back to the body (the usual JSON response) when it would
 * not fit in a header (over 16 KiB, e.g. a batch of hundreds of actions): clients branch on the
 * response's content-type.
 */
import type { ScreenshotResult } from '../../display/screenshot.ts';

export const ACTIONS_HEADER = 'x-drums-actions';
export const MAX_HEADER_JSON = 16 * 1024;

/** Whether the Accept header asks for this image type (exactly, or image/* for the image formats). */
export function wantsBinary(accept: string | undefined, mimeType: string): boolean {
  if (!accept) return false;
  const types = accept.split(',').map((t) => t.split(';')[0].trim().toLowerCase());
  if (types.includes(mimeType)) return true;
  return mimeType.startsWith('image/') && types.includes('image/*');
}

/** JSON with every non-ASCII character escaped, so it is a valid header value. */
export function asciiJson(v: unknown): string {
  return JSON.stringify(v).replace(/[\u007f-\uffff]/g, (ch) => '\\u' + ch.charCodeAt(0).toString(16).padStart(4, '0'));
}

/** Headers that describe an image response (shared by GET /screenshot and binary POST /actions). */
export function imageHeaders(shot: ScreenshotResult, generation: number): Record<string, string> {
  const h: Record<string, string> = {
    'content-type': shot.mimeType,
    'x-drums-generation': String(generation),
    'x-drums-width': String(shot.width),
    'x-drums-height': String(shot.height),
  };
  if (shot.scaleX !== undefined) {
    h['x-drums-scale-x'] = String(shot.scaleX);
    h['x-drums-scale-y'] = String(shot.scaleY);
  }
  return h;
}
