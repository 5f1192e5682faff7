/**
 * The band encoder's worker thread (band-pool.ts): filters and deflates the bands it is asked
 * for, reading the frame from the shared capture buffer, and answers with their compressed bytes
 * (moved, not copied).
 */
import { parentPort } from 'node:worker_threads';
import { encodeBandsOf } from './png-bands.ts';

export interface BandJob {
  id: number;
  frame: Uint8Array;
  width: number;
  height: number;
  ks: number[];
}

parentPort?.on('message', (m: BandJob) => {
  try {
    const r = encodeBandsOf(m.frame, m.width, m.height, m.ks);
    parentPort!.postMessage(
      { id: m.id, ...r },
      r.bands.map((b) => b.body.buffer as ArrayBuffer),
    );
  } catch (e) {
    parentPort!.postMessage({ id: m.id, error: String((e as Error)?.message ?? e) });
  }
});
