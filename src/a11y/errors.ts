// Errors raised by the a11y module. `code` is a stable lower_snake string for the API layer to map.

export type A11yErrorCode =
  /** The AT-SPI bus cannot be reached, went away, or its registry does not answer. */
  | 'a11y_unavailable'
  /** The address given is not a usable D-Bus address or socket path. */
  | 'a11y_bad_address';

export class A11yError extends Error {
  readonly code: A11yErrorCode;

  constructor(code: A11yErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'A11yError';
    this.code = code;
  }
}
