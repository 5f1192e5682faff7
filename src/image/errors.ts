// Error types of the image builder. Every error carries a stable `code` that
// the CLI and the HTTP API can map to exit codes / status codes.
import { DrumsError } from '../common/errors.ts';

export type ImageErrorCode = 'invalid_recipe' | 'image_not_found' | 'image_build_failed' | 'image_in_use' | 'image_lock_timeout';

export class ImageError extends DrumsError {
  declare readonly code: ImageErrorCode;
  constructor(code: ImageErrorCode, message: string, options?: { cause?: unknown }) {
    super(code, message, options);
  }
}

/** A recipe failed validation; `field` is the JSON path of the offending field. */
export class RecipeError extends ImageError {
  field: string;
  file: string;
  constructor(file: string, field: string, problem: string) {
    super('invalid_recipe', `${file}: ${field ? `${field}: ` : ''}${problem}`);
    this.name = 'RecipeError';
    this.field = field;
    this.file = file;
  }
}

/** A build step failed; `step` names it and `logTail` holds the last log lines. */
export class ImageBuildError extends ImageError {
  step: string;
  logTail: string;
  logFile: string | undefined;
  constructor(image: string, step: string, detail: string, logTail: string, logFile?: string) {
    const tail = logTail ? `\n--- last lines of the build log ---\n${logTail}` : '';
    const where = logFile ? `\n(full log: ${logFile})` : '';
    super('image_build_failed', `image ${image}: step '${step}' failed: ${detail}${tail}${where}`);
    this.name = 'ImageBuildError';
    this.step = step;
    this.logTail = logTail;
    this.logFile = logFile;
  }
}
