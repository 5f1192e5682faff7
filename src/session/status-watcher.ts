import { watch, openSync, readSync, closeSync, fstatSync, constants, type FSWatcher } from 'node:fs';
import { EventEmitter } from 'node:events';

/**
 * Follows the append-only status file a session's init writes (one stage per
 * line) through inotify, and timestamps each stage as the daemon sees it.
 */
export class StatusWatcher extends EventEmitter {
  private _offset = 0;
  private _watcher: FSWatcher | undefined;
  private _partial = '';
  readonly marks = new Map<string, number>();
  private readonly _path: string;

  constructor(path: string) {
    super();
    this._path = path;
    this._watcher = watch(path, () => this.poll());
    this._watcher.on('error', () => this.close());
  }

  /** Reads whatever was appended since last time. */
  poll(): void {
    let fd: number;
    try {
      // The file is in the session's run directory, which the session can write: never follow a symlink it planted
      // (to a host file, /dev/zero) and never block on a FIFO; only a regular file is read.
      fd = openSync(this._path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
    } catch {
      return;
    }
    try {
      // (A regular file there is bounded by the session's 16 MiB run tmpfs.)
      if (!fstatSync(fd).isFile()) return;
      const buf = Buffer.alloc(4096);
      for (;;) {
        const n = readSync(fd, buf, 0, buf.length, this._offset);
        if (n <= 0) break;
        this._offset += n;
        this._partial += buf.subarray(0, n).toString();
      }
    } finally {
      closeSync(fd);
    }
    const lines = this._partial.split('\n');
    this._partial = lines.pop() ?? '';
    for (const line of lines) {
      const stage = line.trim();
      if (!stage) continue;
      const key = stage.split(' ')[0]!;
      if (!this.marks.has(key)) this.marks.set(key, performance.now());
      this.emit('mark', stage);
    }
  }

  /** Resolves when every stage in `stages` has been seen; rejects on a `fail` line or the timeout. */
  waitFor(stages: string[], timeoutMs: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve, reject) => {
      const done = () => stages.every((s) => this.marks.has(s));
      const cleanup = () => {
        clearTimeout(timer);
        this.off('mark', onMark);
        signal?.removeEventListener('abort', onAbort);
      };
      const onMark = (stage: string) => {
        if (stage.startsWith('fail ') || stage.startsWith('x-exit')) {
          cleanup();
          reject(new Error(`session init reported '${stage}'`));
        } else if (done()) {
          cleanup();
          resolve();
        }
      };
      const onAbort = () => {
        cleanup();
        reject(signal?.reason ?? new Error('aborted'));
      };
      const timer = setTimeout(() => {
        cleanup();
        const missing = stages.filter((s) => !this.marks.has(s));
        reject(new Error(`timed out after ${timeoutMs} ms waiting for ${missing.join(', ')}`));
      }, timeoutMs);
      this.on('mark', onMark);
      signal?.addEventListener('abort', onAbort);
      this.poll();
      if (done()) {
        cleanup();
        resolve();
      }
    });
  }

  close(): void {
    this._watcher?.close();
    this._watcher = undefined;
  }
}
