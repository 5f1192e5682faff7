/**
 * One error tree for Drums. Every error that can reach a user extends DrumsError
 * and carries a stable lower_snake `code`: one of the spec's (protocol/openapi.yaml
 * x-error-codes, whose statuses the HTTP layer uses), or a local one that never
 * crosses the API (the CLI and the daemon's start-up report those). Clients rebuild
 * typed errors from the code.
 */
import type { ErrorCode } from '../protocol/generated/error-codes.ts';

export type { ErrorCode };
/** Codes of errors that stay on this host (CLI, daemon start-up, image builds): never an HTTP answer. */
export type LocalErrorCode =
  | 'cancelled'
  | 'daemon_running'
  | 'invalid_config'
  | 'runtime_missing'
  | 'image_in_use'
  | 'image_lock_timeout'
  | 'invalid_recipe'
  | 'image_build_failed';
export type DrumsErrorCode = ErrorCode | LocalErrorCode;
export type ErrorDetails = Record<string, unknown>;

export class DrumsError extends Error {
  readonly code: DrumsErrorCode;
  readonly details?: ErrorDetails;
  constructor(code: DrumsErrorCode, message: string, options?: { details?: ErrorDetails; cause?: unknown }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = code;
    this.details = options?.details;
  }
}

/** The caller went away (or gave up): the work it started stopped between steps. Never answered: nobody is listening. */
export class CancelledError extends DrumsError {
  constructor(message: string, details?: ErrorDetails) {
    super('cancelled', message, { details });
  }
}

/** Bad input: names the failing field. */
export class ValidationError extends DrumsError {
  constructor(field: string, message: string, code: ErrorCode = 'invalid_request') {
    super(code, `${field}: ${message}`, { details: { field } });
  }
}

export class NotFoundError extends DrumsError {}
export class ConflictError extends DrumsError {}

/** A host command or syscall failed: says which operation, on what, and why. */
export class HostError extends DrumsError {
  constructor(op: string, message: string, details?: ErrorDetails, cause?: unknown) {
    super('host_error', `${op}: ${message}`, { details: { op, ...details }, cause });
  }
}

/** A create step failed; cleanup ran in reverse and its own errors are attached. */
/** One completed step of a multi-step operation (create, reset): the step log. */
export interface StepRecord {
  step: string;
  ms: number;
}

/**
 * A failure at a named step of a multi-step operation, carrying the steps that
 * completed before it. Wraps the cause rather than mutating it (the cause may
 * be a library's error, or shared).
 */
export class StepError extends DrumsError {
  readonly step: string;
  readonly steps: StepRecord[];
  constructor(step: string, cause: unknown, steps: readonly StepRecord[]) {
    super(cause instanceof DrumsError ? cause.code : 'internal', `step '${step}': ${errorMessage(cause)}`, { details: { step, steps: [...steps] }, cause });
    this.step = step;
    this.steps = [...steps];
  }
}

export class SessionCreateError extends DrumsError {
  readonly step: string;
  readonly cleanupErrors: string[];
  /** `e` is the StepError of the failed step (its cause and step log are reported), or any other error. */
  constructor(e: unknown, cleanupErrors: string[]) {
    const step = e instanceof StepError ? e.step : 'unknown';
    const cause = e instanceof StepError ? e.cause : e;
    super('session_create_failed', `session create failed at step '${step}': ${errorMessage(cause)}`, {
      details: {
        step,
        cleanupErrors,
        ...(e instanceof StepError ? { steps: e.steps } : {}),
        ...(cause instanceof DrumsError ? { causeCode: cause.code } : {}),
      },
      cause,
    });
    this.step = step;
    this.cleanupErrors = cleanupErrors;
  }
}

export function errorMessage(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
