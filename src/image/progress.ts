// Build progress events and a dependency-free stderr renderer.

export interface BuildProgress {
  /** Step name; the last event of a build has step 'done' or 'failed'. */
  step: string;
  /** 1-based index of the step. */
  index: number;
  total: number;
  /** Milliseconds since the build started. */
  elapsedMs: number;
  message?: string;
}

export type ProgressCallback = (p: BuildProgress) => void;

const FRAMES = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

function secs(ms: number): string {
  return `${(ms / 1000).toFixed(1)}s`;
}

/**
 * Returns an onProgress callback that renders to stderr (or `stream`): on a
 * TTY one line is redrawn with a spinner, `[i/n] step (12.3s)`; otherwise one
 * line is printed per step.
 */
export function renderProgressToStderr(opts: { stream?: NodeJS.WriteStream; label?: string } = {}): ProgressCallback {
  const out = opts.stream ?? process.stderr;
  const label = opts.label ? `${opts.label}: ` : '';
  const tty = Boolean(out.isTTY);
  let current: BuildProgress | undefined;
  let receivedAt = 0;
  let frame = 0;
  let timer: NodeJS.Timeout | undefined;

  const line = (p: BuildProgress, elapsed: number): string =>
    `${label}${p.total > 0 ? `[${p.index}/${p.total}] ` : ''}${p.step} (${secs(elapsed)})${p.message ? ` ${p.message}` : ''}`;

  const draw = (): void => {
    if (!current) return;
    const text = `${FRAMES[frame++ % FRAMES.length]} ${line(current, current.elapsedMs + Date.now() - receivedAt)}`;
    const cols = out.columns || 100;
    out.write(`\r\x1b[2K${text.length > cols - 1 ? text.slice(0, cols - 2) + '…' : text}`);
  };

  const stop = (): void => {
    if (timer) clearInterval(timer);
    timer = undefined;
  };

  return (p: BuildProgress): void => {
    const final = p.step === 'done' || p.step === 'failed';
    if (!tty) {
      out.write(final ? `${label}${p.step} (${secs(p.elapsedMs)})${p.message ? ` ${p.message}` : ''}\n` : `${line(p, p.elapsedMs)}\n`);
      return;
    }
    if (final) {
      stop();
      const mark = p.step === 'done' ? '✓' : '✗';
      out.write(`\r\x1b[2K${mark} ${label}${p.step} (${secs(p.elapsedMs)})${p.message ? ` ${p.message}` : ''}\n`);
      current = undefined;
      return;
    }
    current = p;
    receivedAt = Date.now();
    if (!timer) {
      timer = setInterval(draw, 100);
      timer.unref();
    }
    draw();
  };
}
