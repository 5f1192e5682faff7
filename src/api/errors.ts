import { DrumsError } from '../common/errors.ts';

/** The one table from error codes to HTTP statuses. Clients rebuild typed errors from the code. */
export const STATUS_BY_CODE: Record<string, number> = {
  invalid_request: 400,
  invalid_json: 400,
  invalid_spec: 400,
  invalid_exec: 400,
  invalid_action: 400,
  invalid_key: 400,
  invalid_region: 400,
  invalid_format: 400,
  unauthorized: 401,
  forbidden: 403,
  forbidden_origin: 403,
  forbidden_host: 403,
  not_found: 404,
  session_not_found: 404,
  image_not_found: 404,
  method_not_allowed: 405,
  session_busy: 409,
  session_resetting: 409,
  stale_generation: 409,
  session_broken: 409,
  image_not_built: 409,
  idempotency_conflict: 409,
  session_expired: 410,
  payload_too_large: 413,
  unsupported_media_type: 415,
  limit_exceeds_host: 422,
  pool_exhausted: 429,
  rate_limited: 429,
  invalid_path: 400,
  is_a_directory: 400,
  not_a_directory: 400,
  not_a_regular_file: 400,
  file_forbidden: 403,
  file_not_found: 404,
  window_not_found: 404,
  directory_not_empty: 409,
  file_too_large: 413,
  file_error: 500,
  x_error: 500,
  a11y_bad_address: 500,
  unsupported: 501,
  connect_failed: 503,
  a11y_unavailable: 503,
  display_timeout: 504,
  wait_timeout: 504,
  no_space: 507,
  internal: 500,
  host_error: 500,
  session_create_failed: 500,
  session_reset_failed: 500,
  session_destroy_incomplete: 500,
  display_closed: 503,
  display_unavailable: 503,
  insufficient_memory: 503,
  insufficient_disk: 503,
  timeout: 504,
};

export function statusFor(code: string): number {
  return STATUS_BY_CODE[code] ?? 500;
}

export function errorBody(e: DrumsError): { error: { code: string; message: string; details?: unknown } } {
  return { error: { code: e.code, message: e.message, ...(e.details ? { details: e.details } : {}) } };
}
