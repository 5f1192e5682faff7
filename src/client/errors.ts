/** The TypeScript client's error tree: DrumsApiError, with one generated subclass per spec code (generated/errors.ts). */

/** An error answer of the daemon (`{error: {code, message, details}}`), or a client-side failure (status 0). */
export class DrumsApiError extends Error {
  readonly code: string;
  /** The HTTP status; 0 when no answer came (no daemon, timeout, connection refused). */
  readonly status: number;
  readonly details?: unknown;
  constructor(status: number, code: string, message: string, details?: unknown, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
    this.status = status;
    this.code = code;
    this.details = details;
  }
}

/** No daemon to talk to (none recorded in the state dir, or nothing listens at the URL). */
export class NoDaemonError extends DrumsApiError {}
/** The request did not finish within the client's timeout (`DrumsClientOptions.timeoutMs`), or its signal aborted it. */
export class ClientTimeoutError extends DrumsApiError {}
