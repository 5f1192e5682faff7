import type { Server } from 'node:http';

/**
 * One full garbage collection when the API goes idle after some work. A
 * screenshot's Buffers are freed only when V8 collects the objects that hold
 * them, and with the daemon's small JS heap (25–30 MiB) it seldom runs a full
 * collection: a soak's quiescent checkpoints saw 37–57 MiB of ArrayBuffers,
 * most of them dead. So once no request has been in flight for `idleMs`, the
 * daemon collects (10–30 ms for this heap) and jemalloc hands the pages back.
 * At most once per idle spell, so a busy daemon never pays for it. Needs Node's
 * `--expose-gc` (bin/drums serve passes it); without it this does nothing.
 */
let collected = 0;
/** Idle collections since the process started (for /metrics). */
export const idleCollections = (): number => collected;

export function startIdleGc(server: Server, idleMs = 2000): { stop(): void; collections(): number } {
  const gc = (globalThis as { gc?: () => void }).gc;
  let inflight = 0;
  let last = performance.now();
  let worked = false;
  let n = 0;
  server.on('request', (_req, res) => {
    inflight++;
    worked = true;
    res.once('close', () => {
      inflight--;
      last = performance.now();
    });
  });
  const timer = setInterval(() => {
    if (!gc || !worked || inflight > 0 || performance.now() - last < idleMs) return;
    worked = false;
    gc();
    n++;
    collected++;
  }, 500);
  timer.unref();
  return { stop: () => clearInterval(timer), collections: () => n };
}
