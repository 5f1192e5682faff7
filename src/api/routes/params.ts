/** Small parsers of query parameters shared by the session route modules. */
import type { Context } from 'hono';
import { type DrumsError, type ErrorCode, ValidationError } from '../../common/errors.ts';

export function bad(field: string, message: string, code: ErrorCode = 'invalid_request'): DrumsError {
  return new ValidationError(field, message, code);
}

export function parseBool(v: string | undefined, field: string): boolean | undefined {
  if (v === undefined) return undefined;
  if (['1', 'true', 'yes'].includes(v)) return true;
  if (['0', 'false', 'no'].includes(v)) return false;
  throw bad(field, 'must be true or false');
}

/** `?root=true`: as root-in-session instead of the desktop user. */
export function queryRoot(c: Context): boolean {
  return parseBool(c.req.query('root'), 'root') ?? false;
}
