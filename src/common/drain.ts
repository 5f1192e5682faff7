// One drain for both HTTP apps (the API's body limit in src/api/request.ts, the OSWorld guest's in
// src/osworld/body.ts): what is left of a refused request body is read and dropped, within a budget,
// so a client that writes its whole body before it reads the answer sees the 413, not a reset, and a
// client that never stops cannot keep the daemon reading.

import type { Readable } from 'node:stream';

/**
 * Reads and drops the rest of `body`. Resolves true when it ended within `maxBytes` more bytes and
 * `maxMs`, false when it ran past either, failed or closed first (the caller then closes the socket, or
 * leaves that to node-server). `maxMs` 0 only starts the reading. Never rejects.
 */
export function drainBody(body: Readable, o: { maxBytes: number; maxMs: number }): Promise<boolean> {
  body.resume();
  if (body.readableEnded) return Promise.resolve(true);
  if (body.destroyed || o.maxMs <= 0) return Promise.resolve(false);
  return new Promise((resolve) => {
    let read = 0;
    const done = (ended: boolean) => {
      clearTimeout(timer);
      body.off('data', onData);
      body.off('end', onEnd);
      body.off('error', onFail);
      body.off('close', onFail);
      resolve(ended);
    };
    const onData = (d: Buffer) => {
      read += d.length;
      if (read > o.maxBytes) done(false);
    };
    const onEnd = () => done(true);
    const onFail = () => done(false);
    const timer = setTimeout(onFail, o.maxMs);
    timer.unref();
    body.on('data', onData);
    body.on('end', onEnd);
    body.on('error', onFail);
    body.on('close', onFail);
  });
}
