import { watch, openSync, readSync, closeSync, fstatSync, constants, type FSWatcher } from 'node:fs';
import { EventEmitter } from 'node:events';
import { log } from '../common/log.ts';

/**
 * The most the daemon reads of one generation's status file. Init writes a few hundred bytes (a line per stage),
 * then one `wm-exit <code>` line per window manager restart, at most one a second: 1 MiB is a day of a
 * crash-looping window manager. Past it the file is not init's any more but something the session wrote (a
 * `truncate -s 1T`, a flood of lines), and the watcher stops with a failure for that session alone.
 */
export const STATUS_MAX_BYTES = 1024 * 1024;
/** The most one poll reads: a poll stays a few tens of microseconds of the event loop, whatever is in the file. */
const POLL_MAX_BYTES = 64 * 1024;
/** Init's longest line is a `fail ...` reason of a few dozen bytes; a longer one (a run of NULs from a hole) is garbage. */
const LINE_MAX_BYTES = 4096;
/** The distinct stages `marks` keeps (init has about ten). */
const MAX_STAGES = 64;
/**
 * Polls are rate-limited by a token bucket: a burst of POLL_BURST (all of a real start's stages, at once: no
 * latency is added to readiness), then one per POLL_INTERVAL_MS. A byte-by-byte appender then costs the daemon
 * at most 20 polls a second, not one per inotify event.
 */
const POLL_BURST = 32;
const POLL_INTERVAL_MS = 50;

/**
 * Follows the append-only status file a session's init writes (one stage per
 * line) through inotify, and timestamps each stage as the daemon sees it.
 *
 * The file sits in a directory the session can write, so what is in it is the session's: every read is bounded
 * (STATUS_MAX_BYTES in all, POLL_MAX_BYTES per poll, rate-limited), and a file that breaks the append-only
 * contract (over the budget, shrunk, a hole or a line too long) ends the watch with `failure` set and a `fail`
 * event, once: the readiness wait rejects with it, and the manager marks a ready session broken.
 */
export class StatusWatcher extends EventEmitter {
  private _offset = 0;
  private _watcher: FSWatcher | undefined;
  private _partial = '';
  private _timer: NodeJS.Timeout | undefined;
  private _tokens = POLL_BURST;
  private _refilledAt = performance.now();
  private _closed = false;
  readonly marks = new Map<string, number>();
  /** Why the watch stopped on what the session wrote (undefined while the file is as init writes it). */
  failure: string | undefined;
  private readonly _path: string;

  constructor(path: string) {
    super();
    this._path = path;
    // Nothing may throw out of an fs.watch callback (it would take the daemon down): _schedule catches.
    this._watcher = watch(path, () => this._schedule());
    this._watcher.on('error', () => this.close());
  }

  /** A poll now if the bucket has a token, else one when it has. */
  private _schedule(): void {
    if (this._timer || this._closed) return;
    const now = performance.now();
    this._tokens = Math.min(POLL_BURST, this._tokens + (now - this._refilledAt) / POLL_INTERVAL_MS);
    this._refilledAt = now;
    if (this._tokens >= 1) {
      this._tokens -= 1;
      this._safePoll();
    } else {
      this._later((1 - this._tokens) * POLL_INTERVAL_MS);
    }
  }

  private _later(ms: number): void {
    if (this._timer || this._closed) return;
    this._timer = setTimeout(() => {
      this._timer = undefined;
      this._schedule();
    }, ms);
    this._timer.unref();
  }

  private _safePoll(): void {
    try {
      this.poll();
    } catch (e) {
      this._fail(`reading it failed: ${(e as Error).message}`);
    }
  }

  /** Ends the watch for what the session did to the file: once, with a log line. */
  private _fail(why: string): void {
    if (this.failure !== undefined) return;
    this.failure = `the session's status file (${this._path}) is not as its init writes it: ${why}`;
    log('warn', 'session status file refused', { path: this._path, reason: why });
    this.close();
    try {
      this.emit('fail', this.failure);
    } catch (e) {
      log('warn', 'status watcher listener failed', { path: this._path, error: (e as Error).message });
    }
  }

  /** Reads what was appended since last time, up to POLL_MAX_BYTES (the rest on a later poll). */
  poll(): void {
    if (this.failure !== undefined) return;
    let fd: number;
    try {
      // The file is in the session's run directory, which the session can write: never follow a symlink it planted
      // (to a host file, /dev/zero) and never block on a FIFO; only a regular file is read.
      fd = openSync(this._path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
    } catch {
      return;
    }
    let more = false;
    let chunk: Buffer;
    try {
      const st = fstatSync(fd);
      if (!st.isFile()) return;
      // The size first: a sparse terabyte (its run tmpfs limits blocks, not sizes) is refused without a read.
      if (st.size < this._offset) {
        this._fail(`it shrank from ${this._offset} to ${st.size} bytes (init only appends)`);
        return;
      }
      if (st.size > STATUS_MAX_BYTES) {
        this._fail(`it is ${st.size} bytes, over the ${STATUS_MAX_BYTES} bytes an init writes`);
        return;
      }
      const want = Math.min(st.size - this._offset, POLL_MAX_BYTES);
      chunk = Buffer.alloc(want);
      let got = 0;
      while (got < want) {
        const n = readSync(fd, chunk, got, want - got, this._offset + got);
        if (n <= 0) break;
        got += n;
      }
      chunk = chunk.subarray(0, got);
      this._offset += got;
      more = this._offset < st.size;
    } finally {
      closeSync(fd);
    }
    if (chunk.includes(0)) {
      this._fail('it holds NUL bytes (a hole, or not text)');
      return;
    }
    this._partial += chunk.toString();
    const lines = this._partial.split('\n');
    this._partial = lines.pop() ?? '';
    if (this._partial.length > LINE_MAX_BYTES || lines.some((l) => l.length > LINE_MAX_BYTES)) {
      this._fail(`a line is over ${LINE_MAX_BYTES} bytes`);
      return;
    }
    for (const line of lines) {
      const stage = line.trim();
      if (!stage) continue;
      const key = stage.split(' ')[0]!;
      if (!this.marks.has(key) && this.marks.size < MAX_STAGES) this.marks.set(key, performance.now());
      this.emit('mark', stage);
    }
    // The rest of a long append: inotify may not fire again, so come back (rate-limited) for it.
    if (more) this._later(POLL_INTERVAL_MS);
  }

  /** Resolves when every stage in `stages` has been seen; rejects on a `fail` line, a refused file or the timeout. */
  waitFor(stages: string[], timeoutMs: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve, reject) => {
      const done = () => stages.every((s) => this.marks.has(s));
      const cleanup = () => {
        clearTimeout(timer);
        this.off('mark', onMark);
        this.off('fail', onFail);
        signal?.removeEventListener('abort', onAbort);
      };
      const onMark = (stage: string) => {
        if (stage.startsWith('fail ') || stage.startsWith('x-exit')) {
          cleanup();
          reject(new Error(`session init reported '${stage.slice(0, 200)}'`));
        } else if (done()) {
          cleanup();
          resolve();
        }
      };
      const onFail = (why: string) => {
        cleanup();
        reject(new Error(why));
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
      this.on('fail', onFail);
      signal?.addEventListener('abort', onAbort);
      this._safePoll();
      if (this.failure !== undefined) onFail(this.failure);
      else if (done()) {
        cleanup();
        resolve();
      }
    });
  }

  close(): void {
    this._closed = true;
    clearTimeout(this._timer);
    this._timer = undefined;
    this._watcher?.close();
    this._watcher = undefined;
  }
}
