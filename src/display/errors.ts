/**
 * Errors thrown by the display layer. Every error carries a stable
 * lower_snake `code` the API layer can map to a status without parsing text.
 */

import { DrumsError } from '../common/errors.ts';

export type DisplayErrorCode =
  | 'display_closed' // the X connection is gone (server died, socket closed, close() called)
  | 'display_timeout' // an X request got no answer within its deadline
  | 'wait_timeout' // waitForWindow saw no matching window in time
  | 'connect_failed' // could not open the socket or finish the X handshake
  | 'x_error' // the X server answered a request with a protocol error
  | 'invalid_region' // screenshot region/scale outside the screen or malformed
  | 'invalid_key' // a key name that resolves to no keysym
  | 'invalid_action' // an action failed validation (message starts with the field path)
  | 'unsupported'; // the server lacks something required (e.g. XTEST)

export class DisplayError extends DrumsError {
  declare readonly code: DisplayErrorCode;

  constructor(code: DisplayErrorCode, message: string, details?: Record<string, unknown>, cause?: unknown) {
    super(code, message, { details, cause });
  }
}

/** Validation error for a field: the message is `<path>: <problem>`. */
export function invalidAction(path: string, problem: string, details?: Record<string, unknown>): DisplayError {
  return new DisplayError('invalid_action', `${path}: ${problem}`, { field: path, ...details });
}

export function isDisplayError(err: unknown, code?: DisplayErrorCode): err is DisplayError {
  return err instanceof DisplayError && (code === undefined || err.code === code);
}
