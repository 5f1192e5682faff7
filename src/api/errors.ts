import type { DrumsError } from '../common/errors.ts';
import { STATUS_BY_CODE } from '../protocol/generated/error-codes.ts';

/** Codes and statuses come from the spec (protocol/openapi.yaml x-error-codes), generated. */
export { STATUS_BY_CODE };

export function statusFor(code: string): number {
  return STATUS_BY_CODE[code] ?? 500;
}

export function errorBody(e: DrumsError): { error: { code: string; message: string; details?: unknown } } {
  return { error: { code: e.code, message: e.message, ...(e.details ? { details: e.details } : {}) } };
}
