/**
 * Episodes: what one attempt (session id + generation) saw and did, recorded by the daemon for a session whose
 * spec asks (`record`; docs/episodes.md).
 *
 * On disk, in the daemon's own root-only directory (never a path a session or a local user can write):
 *   <state>/episodes/<id>/<generation>.jsonl    the events, append-only JSON lines
 *   <state>/episodes/<id>/<generation>.json     the summary, replaced whole (write + rename)
 *   <state>/episodes/<id>/<generation>.files/   frames and trees kept, content-addressed: <sha256>.<ext>
 * A daemon killed mid-write leaves a last line without its newline: readers skip it (and say so), and the next
 * daemon, which reopens the episode of a session it adopts, first ends that line.
 *
 * Cost: a session without `record` has no recorder, and every hook is `s._episode?.x(...)`. With one, an event is
 * a JSON line queued in memory and written by one async append at a time (never on the request's path); a frame is
 * hashed (sha256) and, at most `frames` per second, written once per distinct image.
 *
 * Bounds: every episode of a session together at most DRUMS_EPISODE_SESSION_MB, every episode of the instance at
 * most DRUMS_EPISODE_MAX_MB. Past either, recording stops with a last `stopped` event and the flag
 * (`recording.stopped`), and the session goes on.
 */
import { createHash } from 'node:crypto';
import { constants, closeSync, fstatSync, mkdirSync, openSync, readdirSync, readSync, renameSync, rmSync, statSync, unlinkSync, writeFileSync } from 'node:fs';
import { type FileHandle, open } from 'node:fs/promises';
import { join } from 'node:path';
import { DrumsError, errorMessage } from '../common/errors.ts';
import { log } from '../common/log.ts';
import type { RecordSpec } from './spec.ts';

export type StopReason = 'session_quota' | 'host_quota' | 'write_error';

export interface OutcomeRecord {
  reward?: number;
  outcome?: string;
  details?: Record<string, unknown>;
  at: string;
}

export interface EpisodeSummary {
  session: string;
  generation: number;
  openedAt: string;
  closedAt: string | null;
  closeReason: string | null;
  record: RecordSpec;
  steps: number;
  observations: number;
  guestCalls: number;
  frames: number;
  bytes: number;
  stopped: StopReason | null;
  outcome: OutcomeRecord | null;
}

export interface EpisodeLimits {
  /** Every episode of one session together. */
  sessionBytes: number;
  /** Every episode of the instance together. */
  hostBytes: number;
  /** Retention: closed episodes older than this (since they closed) are deleted; 0 keeps them. */
  keepMs?: number;
  /** Retention: at most this many closed episodes on the host, the oldest deleted first; 0: no count limit. */
  keepCount?: number;
}

/** An image served to a client, as the hooks see it. */
export interface ShotSeen {
  data: Buffer;
  format: string;
  width: number;
  height: number;
}

/** Where an event file ends (a daemon killed mid-write leaves a partial last line). */
export interface EpisodeEnd {
  closed: boolean;
  lines: number;
  badLines: number[];
  partialBytes: number;
}

export type EpisodeEvent = Record<string, unknown> & { t: string; at: number };

/** One step of an episode (docs/episodes.md, "Steps"). */
export interface EpisodeStep {
  step: number;
  at: number;
  source: 'api' | 'osworld';
  agentAction: unknown;
  action: unknown;
  results: unknown;
  frame: string | null;
  tree: string | null;
}

/** A kept image in time order (the replay's scrubber, the export's recording.mp4); `step` is the last step before it (0: none yet). */
export interface TimelineFrame {
  at: number;
  file: string;
  step: number;
  width?: number;
  height?: number;
}

const ID_RE = /^s[0-9a-f]{10}$/;
const FILE_RE = /^[0-9a-f]{64}\.(png|jpeg|webp|xml|json)$/;
/** A stored frame's extension by format (raw frames are not kept: a 4-byte-per-pixel dump is no frame file). */
const FRAME_EXT: Record<string, string> = { png: 'png', jpeg: 'jpeg', webp: 'webp' };
/** OSWorld guest calls that are the agent's actions (steps); the rest are set-up, observations or reads. */
const GUEST_ACTIONS = new Set(['/execute', '/execute_with_verification', '/run_python', '/run_bash_script']);
/** How much of a guest call's request is kept (the command, the code). */
const GUEST_BODY_BYTES = 16 * 1024;
/** Room kept past a quota for the last `stopped` and `close` events (so a full episode still says how it ended). */
const TAIL_BYTES = 4096;

export function sha256(data: Buffer | string): string {
  return createHash('sha256').update(data).digest('hex');
}

/** Opens a file of the store without following a link (the store is root's alone; this is the belt). */
function openNoFollow(path: string, flags: number, mode = 0o600): number {
  return openSync(path, flags | constants.O_NOFOLLOW, mode);
}

function writeJsonAtomic(path: string, v: unknown): void {
  const tmp = `${path}.tmp`;
  const fd = openNoFollow(tmp, constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC);
  try {
    writeFileSync(fd, JSON.stringify(v) + '\n');
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, path);
}

function readSmall(path: string, max: number): Buffer | undefined {
  let fd: number | undefined;
  try {
    fd = openNoFollow(path, constants.O_RDONLY);
    const st = fstatSync(fd);
    if (!st.isFile() || st.size > max) return undefined;
    const buf = Buffer.alloc(st.size);
    let off = 0;
    while (off < buf.length) {
      const n = readSync(fd, buf, off, buf.length - off, off);
      if (n <= 0) break;
      off += n;
    }
    return buf.subarray(0, off);
  } catch {
    return undefined;
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

/** Parses an event file's bytes: complete lines only; a line that is not JSON is skipped and named. */
export function parseEvents(buf: Buffer): { events: EpisodeEvent[]; end: EpisodeEnd } {
  const lastNl = buf.lastIndexOf(0x0a);
  const whole = lastNl < 0 ? '' : buf.subarray(0, lastNl).toString('utf8');
  const partialBytes = buf.length - (lastNl + 1);
  const events: EpisodeEvent[] = [];
  const badLines: number[] = [];
  let closed = false;
  const lines = whole === '' && lastNl < 0 ? [] : whole.split('\n');
  lines.forEach((line, i) => {
    if (!line) return;
    try {
      const e = JSON.parse(line) as EpisodeEvent;
      if (!e || typeof e !== 'object' || typeof e.t !== 'string') throw new Error('not an event');
      events.push(e);
      if (e.t === 'close') closed = true;
    } catch {
      badLines.push(i + 1);
    }
  });
  return { events, end: { closed, lines: events.length, badLines, partialBytes } };
}

/**
 * The steps of an episode: each action batch (API) or OSWorld action call is a step; its frame is the batch's own
 * screenshot, else the first one served after it and before the next step; its tree likewise.
 */
export function stepsOf(events: EpisodeEvent[]): { steps: EpisodeStep[]; initialFrame: string | null; timeline: TimelineFrame[] } {
  const steps: EpisodeStep[] = [];
  let initialFrame: string | null = null;
  const timeline: TimelineFrame[] = [];
  const seen = (at: number, file: unknown, ev: EpisodeEvent) => {
    if (typeof file !== 'string' || !/\.(png|jpeg|webp)$/.test(file) || timeline.at(-1)?.file === file) return;
    const w = ev.width ?? (ev.shot as { width?: unknown } | undefined)?.width;
    const h = ev.height ?? (ev.shot as { height?: unknown } | undefined)?.height;
    timeline.push({ at, file, step: steps.length, ...(typeof w === 'number' && w > 0 && typeof h === 'number' ? { width: w, height: h } : {}) });
  };
  for (const e of events) {
    const cur = steps[steps.length - 1];
    if (e.t === 'actions') {
      steps.push({
        step: steps.length + 1,
        at: e.at,
        source: 'api',
        agentAction: e.actions,
        action: e.steps ?? null,
        results: e.error ? { error: e.error } : (e.results ?? null),
        frame: (e.shot as { file?: string } | undefined)?.file ?? null,
        tree: null,
      });
    } else if (e.t === 'guest' && GUEST_ACTIONS.has(String(e.path))) {
      steps.push({
        step: steps.length + 1,
        at: e.at,
        source: 'osworld',
        agentAction: { path: e.path, ...(e.request as object) },
        action: null,
        results: { status: e.status, ...(e.reply ? { reply: e.reply } : {}) },
        frame: null,
        tree: null,
      });
    } else {
      const file = (e.t === 'screenshot' || (e.t === 'guest' && e.path === '/screenshot')) && typeof e.file === 'string' ? e.file : undefined;
      const tree = (e.t === 'tree' || (e.t === 'guest' && e.path === '/accessibility')) && typeof e.file === 'string' ? e.file : undefined;
      if (!cur) {
        if (file && !initialFrame) initialFrame = file;
        continue;
      }
      if (file && !cur.frame) cur.frame = file;
      if (tree && !cur.tree) cur.tree = tree;
    }
    if (e.t === 'actions') seen(e.at + (typeof e.ms === 'number' ? e.ms : 0), (e.shot as { file?: unknown } | undefined)?.file, e);
    else if (e.t === 'frame' || e.t === 'screenshot' || (e.t === 'guest' && e.path === '/screenshot')) seen(e.at, e.file, e);
  }
  return { steps, initialFrame, timeline };
}

/** The recorder of one live episode: the hooks call it; it never throws into a request. */
export class EpisodeRecorder {
  readonly summary: EpisodeSummary;
  private readonly _store: EpisodeStore;
  private readonly _path: string;
  private readonly _filesDir: string;
  private _fh: Promise<FileHandle | undefined>;
  private _queue: string[] = [];
  private _writing: Promise<void> | undefined;
  private _lastFrameAt = 0;
  /** The next image served is a step's frame (the first after an action, or the initial one): kept whatever the rate. */
  private _stepFrame = true;
  /** The hash of the last damage-driven frame. */
  private _lastFrame = '';
  private readonly _files = new Set<string>();
  private _closed = false;
  /** Frame and tree files being written (flush waits for them). */
  private readonly _pending = new Set<Promise<void>>();

  constructor(store: EpisodeStore, summary: EpisodeSummary, path: string, filesDir: string, existing: Set<string>) {
    this._store = store;
    this.summary = summary;
    this._path = path;
    this._filesDir = filesDir;
    this._files = existing;
    this._fh = open(path, constants.O_WRONLY | constants.O_APPEND | constants.O_CREAT | constants.O_NOFOLLOW, 0o600).catch((e) => {
      this._stop('write_error', errorMessage(e));
      return undefined;
    });
  }

  get stopped(): StopReason | null {
    return this.summary.stopped;
  }

  /** An action batch, with what it did (results without image data) and the screenshot it answered with. */
  actions(e: { actions: unknown; steps: unknown; results: unknown; ms: number; at: number; shot?: ShotSeen; error?: { code: string; message: string } }): void {
    if (this._off()) return;
    this.summary.steps++;
    this._stepFrame = true;
    const shot = e.shot ? this._shot(e.shot) : undefined;
    this._event({
      t: 'actions',
      at: e.at,
      ms: round(e.ms),
      actions: e.actions,
      steps: e.steps,
      results: e.results,
      ...(shot ? { shot } : {}),
      ...(e.error ? { error: e.error } : {}),
    });
  }

  /** A screenshot served (GET /screenshot). */
  screenshot(shot: ShotSeen, at: number): void {
    if (this._off()) return;
    this.summary.observations++;
    this._event({ t: 'screenshot', at, ...this._shot(shot) });
  }

  /**
   * A damage-driven frame (src/session/episode-frames.ts): an event and a kept file only when the screen changed
   * since the last one (the same image hashes the same).
   */
  frame(shot: ShotSeen, at: number): void {
    if (this._off()) return;
    const hash = sha256(shot.data);
    if (hash === this._lastFrame) return;
    this._lastFrame = hash;
    const name = `${hash}.${FRAME_EXT[shot.format] ?? 'png'}`;
    const had = this._files.has(name);
    if (!had && !this._file(name, shot.data)) return;
    if (!had) this.summary.frames++;
    this._event({ t: 'frame', at, sha256: hash, bytes: shot.data.length, width: shot.width, height: shot.height, file: name });
  }

  /** An accessibility tree served (its text as sent). */
  tree(text: string, format: string, at: number): void {
    if (this._off()) return;
    this.summary.observations++;
    this._event({ t: 'tree', at, format, ...this._tree(text, format) });
  }

  /**
   * An OSWorld guest call: its route, status, time, the request's JSON body (cut at GUEST_BODY_BYTES), and, for
   * /screenshot and /accessibility, what was served (as the API's observations).
   */
  guest(c: { path: string; method: string; status: number; at: number; ms: number; body: Buffer; reply?: unknown }): void {
    if (this._off()) return;
    this.summary.guestCalls++;
    if (GUEST_ACTIONS.has(c.path)) {
      this.summary.steps++;
      this._stepFrame = true;
    }
    const ev: EpisodeEvent = { t: 'guest', at: c.at, ms: round(c.ms), method: c.method, path: c.path, status: c.status };
    if (c.body.length) ev.request = guestRequest(c.body);
    if (c.path === '/screenshot' && Buffer.isBuffer(c.reply) && c.status === 200) {
      this.summary.observations++;
      Object.assign(ev, this._shot({ data: c.reply, format: 'png', width: 0, height: 0 }));
    } else if (c.path === '/accessibility' && c.status === 200 && c.reply && typeof (c.reply as { AT?: unknown }).AT === 'string') {
      this.summary.observations++;
      Object.assign(ev, this._tree((c.reply as { AT: string }).AT, 'xml'));
    } else if (GUEST_ACTIONS.has(c.path) && c.reply && typeof c.reply === 'object' && !Buffer.isBuffer(c.reply)) {
      ev.reply = cut(c.reply);
    }
    this._event(ev);
  }

  /** Appends the outcome event (the summary carries it too). */
  outcome(o: OutcomeRecord): void {
    this._event({ t: 'outcome', ...o, at: Date.parse(o.at) }, true);
  }

  /** Writes the close event, waits for every write, and closes the file; the summary says closed. */
  async close(reason: string): Promise<void> {
    if (this._closed) return;
    this._event({ t: 'close', at: Date.now(), reason }, true);
    this._closed = true;
    this.summary.closedAt = new Date().toISOString();
    this.summary.closeReason = reason;
    await this.flush();
    const fh = await this._fh;
    await fh?.close().catch(() => {});
    this._store.saveSummary(this.summary);
  }

  /** Writes what is queued and closes the file, leaving the episode open (the next daemon reopens it). */
  async release(): Promise<void> {
    await this.flush();
    this._closed = true;
    await (await this._fh)?.close().catch(() => {});
  }

  /** Waits until everything queued so far is on disk. */
  async flush(): Promise<void> {
    while (this._writing || this._pending.size) await (this._writing ?? Promise.all(this._pending));
  }

  private _off(): boolean {
    return this._closed || this.summary.stopped !== null;
  }

  private _shot(shot: ShotSeen): Record<string, unknown> {
    const hash = sha256(shot.data);
    const out: Record<string, unknown> = { sha256: hash, format: shot.format, bytes: shot.data.length };
    if (shot.width) Object.assign(out, { width: shot.width, height: shot.height });
    const ext = FRAME_EXT[shot.format];
    const fps = this.summary.record.frames;
    if (!ext || fps <= 0) return out;
    const name = `${hash}.${ext}`;
    const step = this._stepFrame;
    this._stepFrame = false;
    if (this._files.has(name)) return { ...out, file: name };
    // At most `frames` new frame files per second, besides each step's frame (the first image after an action,
    // which an export needs): an observation faster than that keeps its hash only.
    const now = performance.now();
    if (!step && now - this._lastFrameAt < 1000 / fps) return out;
    if (!this._file(name, shot.data)) return out;
    this._lastFrameAt = now;
    this.summary.frames++;
    return { ...out, file: name };
  }

  private _tree(text: string, format: string): Record<string, unknown> {
    const data = Buffer.from(text);
    const hash = sha256(data);
    const out: Record<string, unknown> = { sha256: hash, bytes: data.length };
    if (!this.summary.record.a11y) return out;
    const name = `${hash}.${format === 'json' ? 'json' : 'xml'}`;
    if (this._files.has(name) || this._file(name, data)) return { ...out, file: name };
    return out;
  }

  /** Writes a content-addressed file (once), within the quotas. */
  private _file(name: string, data: Buffer): boolean {
    if (!this._reserve(data.length)) return false;
    this._files.add(name);
    const path = join(this._filesDir, name);
    const p = (async () => {
      try {
        mkdirSync(this._filesDir, { mode: 0o700, recursive: true });
        // O_EXCL: never through a link, never over another file.
        const fh = await open(path, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600);
        try {
          await fh.writeFile(data);
        } finally {
          await fh.close();
        }
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'EEXIST') this._stop('write_error', errorMessage(e));
      }
    })();
    this._pending.add(p);
    void p.finally(() => this._pending.delete(p));
    return true;
  }

  /** Counts `n` more bytes against both quotas, or stops the recording (false). */
  private _reserve(n: number, tail = false): boolean {
    const why = this._store.reserve(this.summary.session, n, tail ? TAIL_BYTES : 0);
    if (why) {
      this._stop(why);
      return false;
    }
    this.summary.bytes += n;
    return true;
  }

  /** Stops recording (the flag and a last `stopped` event); the session goes on. */
  _stop(why: StopReason, detail?: string): void {
    if (this.summary.stopped) return;
    this.summary.stopped = why;
    log('warn', 'episode recording stopped', { id: this.summary.session, generation: this.summary.generation, why, ...(detail ? { detail } : {}) });
    this._event({ t: 'stopped', at: Date.now(), why, ...(detail ? { detail } : {}) }, true);
    try {
      this._store.saveSummary(this.summary);
    } catch {}
  }

  /** Queues one event line; `tail` events (stopped, outcome, close) may use the room kept past the quota. */
  _event(e: EpisodeEvent, tail = false): void {
    if (this._closed) return;
    const line = JSON.stringify(e) + '\n';
    const n = Buffer.byteLength(line);
    if (!tail && !this._reserve(n)) return;
    if (tail) {
      this._store.reserve(this.summary.session, n, TAIL_BYTES, true);
      this.summary.bytes += n;
    }
    this._queue.push(line);
    this._writing ??= this._drain();
  }

  private async _drain(): Promise<void> {
    try {
      const fh = await this._fh;
      while (this._queue.length) {
        const chunk = this._queue.join('');
        this._queue = [];
        if (!fh) continue;
        try {
          await fh.write(chunk);
        } catch (e) {
          this._queue = [];
          this._stop('write_error', errorMessage(e));
        }
      }
    } finally {
      this._writing = undefined;
    }
  }
}

function round(ms: number): number {
  return Math.round(ms * 10) / 10;
}

/** A guest request's JSON body (command, code, script...), cut; a body that is not JSON is kept as its size. */
function guestRequest(body: Buffer): unknown {
  if (body.length > GUEST_BODY_BYTES) return { truncated: true, bytes: body.length, text: body.subarray(0, GUEST_BODY_BYTES).toString('utf8') };
  try {
    const v = JSON.parse(body.toString('utf8'));
    return v && typeof v === 'object' && !Array.isArray(v) ? v : { body: v };
  } catch {
    return { bytes: body.length };
  }
}

function cut(v: unknown): unknown {
  const s = JSON.stringify(v);
  return s.length <= GUEST_BODY_BYTES ? v : { truncated: true, text: s.slice(0, GUEST_BODY_BYTES) };
}

/** Every episode of an instance, and the recorders of the live ones. */
export class EpisodeStore {
  readonly dir: string;
  readonly limits: EpisodeLimits;
  private readonly _live = new Map<string, EpisodeRecorder>();
  /** Bytes on disk, by session and in all. */
  private readonly _bySession = new Map<string, number>();
  private _total = 0;
  /** A write was refused for the host quota (and nothing deleted since): hostFull. */
  private _hostRefused = false;

  constructor(stateDir: string, limits: EpisodeLimits) {
    this.dir = join(stateDir, 'episodes');
    this.limits = limits;
  }

  /** Makes the directory (root's alone) and counts what earlier daemons recorded. */
  init(): void {
    mkdirSync(this.dir, { recursive: true, mode: 0o700 });
    for (const id of readdirSync(this.dir)) {
      if (!ID_RE.test(id)) continue;
      const n = duBytes(join(this.dir, id));
      this._bySession.set(id, n);
      this._total += n;
    }
  }

  get totalBytes(): number {
    return this._total;
  }

  bytesOf(id: string): number {
    return this._bySession.get(id) ?? 0;
  }

  /** Which quota a session has (all but) reached: less than 1 KiB left. */
  full(id: string): StopReason | undefined {
    if ((this._bySession.get(id) ?? 0) + 1024 > this.limits.sessionBytes) return 'session_quota';
    if (this._total + 1024 > this.limits.hostBytes) return 'host_quota';
    return undefined;
  }

  /**
   * Counts `n` bytes for a session, or says which quota it would pass (nothing counted). `room` lets the last
   * events of an episode pass the quota by that much; `force` counts whatever the quotas say.
   */
  reserve(id: string, n: number, room = 0, force = false): StopReason | undefined {
    const mine = this._bySession.get(id) ?? 0;
    if (!force) {
      const hostOver = this._total + n > this.limits.hostBytes + room;
      // The store counts as full from the first write it refused until an episode is deleted.
      if (hostOver) this._hostRefused = true;
      if (mine + n > this.limits.sessionBytes + room) return 'session_quota';
      if (hostOver) return 'host_quota';
    }
    this._bySession.set(id, mine + n);
    this._total += n;
    return undefined;
  }

  private _paths(id: string, generation: number) {
    if (!ID_RE.test(id) || !Number.isSafeInteger(generation) || generation < 1) throw notFound(id, generation);
    const dir = join(this.dir, id);
    return { dir, events: join(dir, `${generation}.jsonl`), summary: join(dir, `${generation}.json`), files: join(dir, `${generation}.files`) };
  }

  /** The live recorder of a session's generation, if it records. */
  live(id: string, generation: number): EpisodeRecorder | undefined {
    return this._live.get(`${id}/${generation}`);
  }

  /**
   * Opens (or, for a session adopted after a restart, reopens) the episode of a session's generation. Never
   * throws: a store that cannot be written gives a recorder stopped with `write_error`.
   */
  open(id: string, generation: number, record: RecordSpec): EpisodeRecorder {
    const key = `${id}/${generation}`;
    const had = this._live.get(key);
    if (had) return had;
    const p = this._paths(id, generation);
    const old = this._readSummary(p.summary);
    const summary: EpisodeSummary = old ?? {
      session: id,
      generation,
      openedAt: new Date().toISOString(),
      closedAt: null,
      closeReason: null,
      record,
      steps: 0,
      observations: 0,
      guestCalls: 0,
      frames: 0,
      bytes: 0,
      stopped: null,
      outcome: null,
    };
    const existing = new Set<string>();
    try {
      mkdirSync(p.dir, { recursive: true, mode: 0o700 });
      if (old) {
        // A restart: the counts from what is on disk, and a partial last line ended so the next event parses.
        const buf = readSmall(p.events, Number.MAX_SAFE_INTEGER) ?? Buffer.alloc(0);
        const { events } = parseEvents(buf);
        Object.assign(summary, countsOf(events), { closedAt: null, closeReason: null });
        for (const f of safeReaddir(p.files)) existing.add(f);
        summary.bytes = buf.length + [...existing].reduce((a, f) => a + fileSize(join(p.files, f)), 0);
        if (buf.length && buf[buf.length - 1] !== 0x0a) {
          const fd = openNoFollow(p.events, constants.O_WRONLY | constants.O_APPEND);
          try {
            writeFileSync(fd, '\n');
          } finally {
            closeSync(fd);
          }
        }
      }
      this.saveSummary(summary);
    } catch (e) {
      summary.stopped = 'write_error';
      log('warn', 'episode open failed', { id, generation, error: errorMessage(e) });
    }
    const rec = new EpisodeRecorder(this, summary, p.events, p.files, existing);
    if (!old) rec._event({ t: 'open', at: Date.now(), session: id, generation, record }, true);
    // Earlier generations (or other sessions) may have filled a quota already: then this one says so at once.
    const full = this.full(id);
    if (summary.stopped === null && full) rec._stop(full);
    this._live.set(key, rec);
    return rec;
  }

  /** Closes a live episode (reset, destroy); a no-op for one not recording. */
  async close(id: string, generation: number, reason: string): Promise<void> {
    const key = `${id}/${generation}`;
    const rec = this._live.get(key);
    if (!rec) return;
    this._live.delete(key);
    await rec.close(reason).catch((e) => log('warn', 'episode close failed', { id, generation, error: errorMessage(e) }));
  }

  /** Lets go of the live episodes without closing them (the daemon stops and keeps its sessions). */
  async detach(): Promise<void> {
    for (const rec of this._live.values()) await rec.release();
    this._live.clear();
  }

  /** Closes episodes left open whose session is not live (its daemon died and the session was swept). */
  closeOrphans(live: Set<string>): void {
    for (const id of safeReaddir(this.dir)) {
      if (!ID_RE.test(id) || live.has(id)) continue;
      for (const s of this.list(id)) {
        if (s.closedAt) continue;
        const p = this._paths(id, s.generation);
        const buf = readSmall(p.events, Number.MAX_SAFE_INTEGER) ?? Buffer.alloc(0);
        Object.assign(s, countsOf(parseEvents(buf).events), { closedAt: new Date().toISOString(), closeReason: 'swept' });
        try {
          this.saveSummary(s);
        } catch {}
      }
    }
  }

  /** Whether the instance's store is (all but) full: a new recording would stop at once. */
  hostFull(): boolean {
    return this._hostRefused || this._total + 1024 > this.limits.hostBytes;
  }

  /**
   * Every episode of the instance (newest first), or those of one outcome: `unscored`, `failure` (a reward of 0 or
   * an outcome other than success), `success` (a reward above 0 or the outcome success), or an outcome word.
   */
  listAll(filter: { outcome?: string; limit?: number } = {}): EpisodeSummary[] {
    const out: EpisodeSummary[] = [];
    for (const id of safeReaddir(this.dir)) if (ID_RE.test(id)) for (const s of this.list(id)) if (outcomeMatches(s, filter.outcome)) out.push(s);
    out.sort((a, b) => (b.closedAt ?? b.openedAt).localeCompare(a.closedAt ?? a.openedAt) || b.generation - a.generation);
    return filter.limit ? out.slice(0, filter.limit) : out;
  }

  /** Deletes a closed episode (its events, summary and files); a live one is refused. */
  remove(id: string, generation: number): void {
    if (this.live(id, generation)) {
      throw new DrumsError('episode_open', `episode ${id}/${generation} is still recording; reset or destroy the session first, then delete it`, {
        details: { session: id, generation },
      });
    }
    this.summary(id, generation); // 404 for an episode that is not there
    const p = this._paths(id, generation);
    let n = 0;
    for (const f of [p.events, p.summary]) {
      n += fileSize(f);
      try {
        unlinkSync(f);
      } catch {}
    }
    // The files directory is the daemon's own (0700, root's): rmSync removes links, never follows them.
    for (const f of safeReaddir(p.files)) n += fileSize(join(p.files, f));
    rmSync(p.files, { recursive: true, force: true });
    const mine = Math.max(0, (this._bySession.get(id) ?? 0) - n);
    if (safeReaddir(p.dir).length === 0) {
      rmSync(p.dir, { recursive: true, force: true });
      this._bySession.delete(id);
    } else this._bySession.set(id, mine);
    this._total = Math.max(0, this._total - n);
    this._hostRefused = false;
  }

  /**
   * The retention policy (DRUMS_EPISODE_KEEP_DAYS, DRUMS_EPISODE_KEEP): deletes closed episodes past the age, then
   * the oldest closed ones past the count. Open episodes are never deleted. Returns how many went.
   */
  retain(now = Date.now()): number {
    const { keepMs = 0, keepCount = 0 } = this.limits;
    if (!keepMs && !keepCount) return 0;
    const closed = this.listAll()
      .filter((s) => s.closedAt && !this.live(s.session, s.generation))
      .sort((a, b) => Date.parse(a.closedAt!) - Date.parse(b.closedAt!));
    const drop = new Set<EpisodeSummary>();
    if (keepMs) for (const s of closed) if (now - Date.parse(s.closedAt!) > keepMs) drop.add(s);
    if (keepCount) {
      const left = closed.filter((s) => !drop.has(s));
      for (const s of left.slice(0, Math.max(0, left.length - keepCount))) drop.add(s);
    }
    for (const s of drop) {
      try {
        this.remove(s.session, s.generation);
      } catch (e) {
        log('warn', 'episode retention: delete failed', { id: s.session, generation: s.generation, error: errorMessage(e) });
      }
    }
    if (drop.size) log('info', 'episode retention: deleted closed episodes', { count: drop.size, keepDays: keepMs / 86_400_000, keep: keepCount });
    return drop.size;
  }

  saveSummary(s: EpisodeSummary): void {
    writeJsonAtomic(this._paths(s.session, s.generation).summary, s);
  }

  private _readSummary(path: string): EpisodeSummary | undefined {
    const buf = readSmall(path, 1024 * 1024);
    if (!buf) return undefined;
    try {
      return JSON.parse(buf.toString('utf8')) as EpisodeSummary;
    } catch {
      return undefined;
    }
  }

  /** A session's episodes, oldest first (the live ones as they are now). */
  list(id: string): EpisodeSummary[] {
    if (!ID_RE.test(id)) return [];
    const dir = join(this.dir, id);
    const out: EpisodeSummary[] = [];
    for (const f of safeReaddir(dir)) {
      const m = /^(\d{1,15})\.json$/.exec(f);
      if (!m) continue;
      const g = Number(m[1]);
      const live = this.live(id, g);
      const s = live ? { ...live.summary } : this._readSummary(join(dir, f));
      if (s) out.push(s);
    }
    return out.sort((a, b) => a.generation - b.generation);
  }

  summary(id: string, generation: number): EpisodeSummary {
    const live = this.live(id, generation);
    if (live) return { ...live.summary };
    const s = this._readSummary(this._paths(id, generation).summary);
    if (!s) throw notFound(id, generation);
    return s;
  }

  /** An episode's events (a live one's as written so far) and where its file ends. */
  async read(id: string, generation: number): Promise<{ summary: EpisodeSummary; events: EpisodeEvent[]; end: EpisodeEnd }> {
    const summary = this.summary(id, generation);
    await this.live(id, generation)?.flush();
    const p = this._paths(id, generation);
    let buf: Buffer;
    try {
      const fh = await open(p.events, constants.O_RDONLY | constants.O_NOFOLLOW);
      try {
        buf = await fh.readFile();
      } finally {
        await fh.close();
      }
    } catch {
      throw notFound(id, generation);
    }
    return { summary, ...parseEvents(buf) };
  }

  /** A kept frame or tree file's bytes. */
  async file(id: string, generation: number, name: string): Promise<Buffer> {
    if (!FILE_RE.test(name)) throw new DrumsError('episode_not_found', `no file '${name.slice(0, 80)}' in episode ${id}/${generation}`);
    const p = this._paths(id, generation);
    try {
      const fh = await open(join(p.files, name), constants.O_RDONLY | constants.O_NOFOLLOW);
      try {
        return await fh.readFile();
      } finally {
        await fh.close();
      }
    } catch {
      throw new DrumsError('episode_not_found', `no file '${name}' in episode ${id}/${generation}`, { details: { session: id, generation, name } });
    }
  }

  /** Attaches an outcome (a later one replaces it), to a live or closed episode. */
  setOutcome(id: string, generation: number, o: Omit<OutcomeRecord, 'at'>): EpisodeSummary {
    const outcome: OutcomeRecord = { ...o, at: new Date().toISOString() };
    const live = this.live(id, generation);
    if (live) {
      live.summary.outcome = outcome;
      live.outcome(outcome);
      this.saveSummary(live.summary);
      return { ...live.summary };
    }
    const s = this.summary(id, generation);
    s.outcome = outcome;
    // A closed episode's file gets the event too (appended whole: it is small).
    const line = JSON.stringify({ t: 'outcome', ...outcome, at: Date.parse(outcome.at) }) + '\n';
    const p = this._paths(id, generation);
    const fd = openNoFollow(p.events, constants.O_WRONLY | constants.O_APPEND);
    try {
      writeFileSync(fd, line);
    } finally {
      closeSync(fd);
    }
    this.reserve(id, Buffer.byteLength(line), 0, true);
    s.bytes += Buffer.byteLength(line);
    this.saveSummary(s);
    return s;
  }
}

function notFound(id: string, generation: number): DrumsError {
  return new DrumsError(
    'episode_not_found',
    `no recorded episode ${String(id).slice(0, 64)}/${generation}; list a session's episodes with GET /v1/sessions/${String(id).slice(0, 64)}/episodes (only sessions created with \`record\` have any)`,
    { details: { session: String(id).slice(0, 64), generation } },
  );
}

/** Whether an episode has the outcome a filter asks for (listAll). */
export function outcomeMatches(s: EpisodeSummary, want: string | undefined): boolean {
  if (!want) return true;
  const o = s.outcome;
  if (want === 'unscored') return !o;
  if (!o) return false;
  const success = o.outcome !== undefined ? o.outcome === 'success' : (o.reward ?? 0) > 0;
  if (want === 'success') return success;
  if (want === 'failure') return !success;
  return o.outcome === want;
}

function countsOf(events: EpisodeEvent[]): Pick<EpisodeSummary, 'steps' | 'observations' | 'guestCalls' | 'frames'> {
  let observations = 0;
  let guestCalls = 0;
  const frames = new Set<string>();
  for (const e of events) {
    if (e.t === 'screenshot' || e.t === 'tree') observations++;
    if (e.t === 'guest') {
      guestCalls++;
      if (e.path === '/screenshot' || e.path === '/accessibility') observations++;
    }
    const f = (e.file ?? (e.shot as { file?: string } | undefined)?.file) as string | undefined;
    if (typeof f === 'string' && /\.(png|jpeg|webp)$/.test(f)) frames.add(f);
  }
  return { steps: stepsOf(events).steps.length, observations, guestCalls, frames: frames.size };
}

function safeReaddir(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}

function fileSize(path: string): number {
  try {
    return statSync(path).size;
  } catch {
    return 0;
  }
}

/** Bytes of the regular files under a session's episode directory (two levels: events, summaries, files). */
function duBytes(dir: string): number {
  let n = 0;
  for (const f of safeReaddir(dir)) {
    const p = join(dir, f);
    try {
      const st = statSync(p);
      if (st.isFile()) n += st.size;
      else if (st.isDirectory()) for (const g of safeReaddir(p)) n += fileSize(join(p, g));
    } catch {}
  }
  return n;
}

/** The refusal of a recorded session when the instance's episode store is full (DRUMS_EPISODE_MAX_MB). */
export function episodeStoreFull(store: EpisodeStore, pool?: string): DrumsError {
  const mb = (n: number) => Math.round(n / 1024 ** 2);
  return new DrumsError(
    'episode_store_full',
    `the episode store holds ${mb(store.totalBytes)} of its ${mb(store.limits.hostBytes)} MiB (DRUMS_EPISODE_MAX_MB): delete episodes (drums episodes rm, DELETE /v1/sessions/{id}/episodes/{generation}), let retention delete closed ones (DRUMS_EPISODE_KEEP_DAYS, DRUMS_EPISODE_KEEP), or ${pool ? `claim from a pool whose template has no record (pool '${pool}' records)` : 'create the session without record'}`,
    { details: { bytes: store.totalBytes, maxBytes: store.limits.hostBytes, ...(pool ? { pool } : {}) } },
  );
}
