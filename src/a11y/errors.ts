// Errors raised by the a11y module. `code` is a stable lower_snake string for the API layer to map.
import { DrumsError } from '../common/errors.ts';

export type A11yErrorCode =
  /** The AT-SPI bus cannot be reached, went away, or its registry does not answer. */
  | 'a11y_unavailable'
  /** The address given is not a usable D-Bus address or socket path. */
  | 'a11y_bad_address';

export class A11yError extends DrumsError {
  declare readonly code: A11yErrorCode;

  constructor(code: A11yErrorCode, message: string, options?: { cause?: unknown }) {
    super(code, message, options);
  }
}
