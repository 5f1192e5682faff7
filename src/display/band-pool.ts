/**
 * Worker threads for the banded PNG encoder, so the event loop only dispatches: a frame's
 * changed bands are filtered and deflated on a worker, reading the capture buffer in place (the
 * capture buffers are SharedArrayBuffers: frames.ts' ScratchPool), and their compressed bytes
 * come back moved, not copied. A job is one frame (its bands in order): it goes to the worker
 * with the fewest jobs queued. Workers start on first use and keep the process up only while they
 * have jobs; one that dies is replaced, and its jobs fail (that frame's request, no more).
 *
 * zlib's own async calls were measured to cost more than they moved (png-bands.ts): one message
 * per frame, not one per band, is the point here.
 */
import { availableParallelism } from 'node:os';
import { Worker } from 'node:worker_threads';
import type { EncodedBand } from './png-bands.ts';

interface Result {
  bands: EncodedBand[];
  filterMs: number;
  deflateMs: number;
}

interface Slot {
  w: Worker;
  jobs: Map<number, { resolve: (r: Result) => void; reject: (e: Error) => void }>;
}

/** Workers: one per core beyond the event loop's, at least 1, at most 4. */
export const BAND_WORKERS = Math.max(1, Math.min(4, availableParallelism() - 1));

class BandPool {
  private readonly _slots: (Slot | null)[] = Array.from({ length: BAND_WORKERS }, () => null);
  private _id = 0;

  private _start(i: number): Slot {
    const w = new Worker(new URL('./band-worker.ts', import.meta.url));
    const slot: Slot = { w, jobs: new Map() };
    w.on('message', (m: Result & { id: number; error?: string }) => {
      const job = slot.jobs.get(m.id);
      if (!job) return;
      slot.jobs.delete(m.id);
      if (slot.jobs.size === 0) w.unref();
      if (m.error !== undefined) job.reject(new Error(`band encoder: ${m.error}`));
      else job.resolve(m);
    });
    const fail = (e: Error) => {
      if (this._slots[i] === slot) this._slots[i] = null;
      for (const j of slot.jobs.values()) j.reject(new Error(`band encoder worker died: ${e.message}`));
      slot.jobs.clear();
    };
    w.on('error', fail);
    w.on('exit', (code) => fail(new Error(`exit ${code}`)));
    // Referenced only while it has jobs (a pending frame keeps the process up, an idle worker
    // never does); after the listeners, since adding a 'message' listener refs its port again.
    w.unref();
    this._slots[i] = slot;
    return slot;
  }

  /** Encodes bands `ks` of `frame` (BGRX on a SharedArrayBuffer, read in place until this settles). */
  encode(frame: Buffer, width: number, height: number, ks: number[]): Promise<Result> {
    let best = 0;
    for (let i = 1; i < this._slots.length; i++) if ((this._slots[i]?.jobs.size ?? 0) < (this._slots[best]?.jobs.size ?? 0)) best = i;
    const slot = this._slots[best] ?? this._start(best);
    const id = ++this._id;
    return new Promise<Result>((resolve, reject) => {
      if (slot.jobs.size === 0) slot.w.ref();
      slot.jobs.set(id, { resolve, reject });
      slot.w.postMessage({ id, frame, width, height, ks });
    });
  }

  /** Stops the workers (tests). */
  async close(): Promise<void> {
    const all = this._slots.splice(0, this._slots.length, ...this._slots.map(() => null));
    await Promise.all(all.map((s) => s?.w.terminate()));
  }
}

export const bandPool = new BandPool();
