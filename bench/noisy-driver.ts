/**
 * One victim's closed loop for the noisy-neighbour bench, in a worker thread of its own: a click,
 * then a PNG screenshot, again and again until told to stop. Each victim has its own event loop and
 * heap, as each agent's client of a real deployment has its own process: with all eight loops on
 * the harness's one event loop, its major GCs (up to 320 ms late in a run) paused every victim at
 * once, and those seconds were the slowest of whole phases (noisy-2026-12-05T00-02-18).
 *
 * Shared with the harness (`DriverShared`): the steps (start, on the clock of performance.timeOrigin
 * + now, and latency, ms), the count written, the start of the step in flight (NaN between steps),
 * and the flag that stops the loop. Errors are posted as messages.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { DrumsClient } from '../src/client/client.ts';

export interface DriverShared {
  /** [start, ms] pairs. */
  steps: SharedArrayBuffer;
  /** Int32: [0] steps written, [1] 1 while running; Float64 view from byte 8: the start of the step in flight. */
  state: SharedArrayBuffer;
}

export interface DriverData extends DriverShared {
  url: string;
  token: string;
  id: string;
  /** Its index among the victims (spreads the clicks). */
  k: number;
}

const clock = () => performance.timeOrigin + performance.now();

if (parentPort && workerData) {
  const d = workerData as DriverData;
  const c = new DrumsClient(d.url, d.token);
  const steps = new Float64Array(d.steps);
  const count = new Int32Array(d.state, 0, 2);
  const inflight = new Float64Array(d.state, 8, 1);
  for (let i = 0; Atomics.load(count, 1) === 1; i++) {
    const t = clock();
    inflight[0] = t;
    try {
      await c.act(d.id, { actions: [{ type: 'click', x: 20 + ((i * 37 + d.k * 11) % 1200), y: 20 + ((i * 53) % 740) }] });
      await c.screenshot(d.id, 'png');
      const n = Atomics.load(count, 0);
      if (2 * n + 1 < steps.length) {
        steps[2 * n] = t;
        steps[2 * n + 1] = clock() - t;
        Atomics.store(count, 0, n + 1);
      }
    } catch (e) {
      parentPort.postMessage({ t, e: String(e).slice(0, 200) });
    }
    inflight[0] = Number.NaN;
  }
  parentPort.postMessage({ done: true });
}
