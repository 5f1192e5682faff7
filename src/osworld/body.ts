// The guest server's body limit and its drain: a request body is read within a limit, whole or as a
// stream, and one that passes the limit is refused as soon as that is known, then discarded within a
// bound before the connection is closed.

import type { ServerResponse } from 'node:http';
import { PassThrough, Readable } from 'node:stream';
import { drainBody } from '../common/drain.ts';

/** After a refusal: how much more of the body is read (and discarded), and for how long, before the socket is destroyed. */
export const OVER_LIMIT_DRAIN_BYTES = 8 * 1024 * 1024;
export const OVER_LIMIT_DRAIN_MS = 5_000;

export interface BodySource {
  /** The body as it arrives (node-server's IncomingMessage, or a web body in `app.request()`). */
  input: Readable;
  /** The declared Content-Length, if any. */
  declared: number | undefined;
  /** The response on the socket, when there is one (not in `app.request()`): a refused body's connection is closed through it. */
  outgoing?: ServerResponse;
}

export interface LimitedBody {
  /** The whole body, or undefined once refused (a buffered route). */
  whole?: Promise<Buffer | undefined>;
  /** The body as it arrives, with backpressure on the input (a streamed route); destroyed when refused. */
  stream?: PassThrough;
  /** Resolves when the body is refused (then the 413 goes out at once). */
  refused: Promise<void>;
  isRefused(): boolean;
}

/**
 * Reads `src` within `limit`. The limit is enforced as soon as it is known to be passed: a declared
 * Content-Length over it is refused before any byte of the body is read, and a body that grows past it
 * (chunked, or longer than declared) at the chunk that passes it. What the client still sends after the
 * refusal is discarded, but only up to OVER_LIMIT_DRAIN_BYTES or OVER_LIMIT_DRAIN_MS (so an ordinary client
 * that sends its whole body before it reads the answer sees the 413, not a reset); past either, or when the
 * declared length already says the drain would not reach its end, the socket is destroyed once the answer
 * is written. `onRefuse` runs at the refusal (a streamed handler already running stops there).
 */
export function limitBody(src: BodySource, limit: number, o: { streamed: boolean; onRefuse(): void }): LimitedBody {
  const { input, declared, outgoing } = src;
  const chunks: Buffer[] = [];
  const stream = o.streamed ? new PassThrough() : undefined;
  let refused = false;
  let onRefused!: () => void;
  const refusedP = new Promise<void>((r) => (onRefused = r));
  let settleWhole: (b: Buffer | undefined) => void = () => {};
  const whole = o.streamed ? undefined : new Promise<Buffer | undefined>((r) => (settleWhole = r));
  const sock = outgoing?.socket ?? undefined;

  const refuse = (declaredLen?: number) => {
    refused = true;
    chunks.length = 0;
    o.onRefuse();
    stream?.destroy();
    settleWhole(undefined);
    // The socket goes when the drain runs past its budget, or at once when the declared length says it would.
    void drainBody(input, { maxBytes: OVER_LIMIT_DRAIN_BYTES, maxMs: OVER_LIMIT_DRAIN_MS }).then((ended) => ended || sock?.destroy());
    if (sock && declaredLen !== undefined && declaredLen > limit + OVER_LIMIT_DRAIN_BYTES) outgoing!.once('finish', () => sock.destroy());
    input.removeListener('data', onData);
    onRefused();
  };
  let size = 0;
  const onData = (d: Buffer) => {
    size += d.length;
    if (size > limit) return refuse();
    if (!stream) chunks.push(d);
    else if (!stream.write(d)) input.pause();
  };
  input.on('error', () => {
    stream?.destroy();
    settleWhole(undefined);
  });
  if (declared !== undefined && Number.isFinite(declared) && declared > limit) refuse(declared);
  else {
    input.on('data', onData);
    stream?.on('drain', () => input.resume());
    input.on('end', () => {
      if (refused) return;
      if (stream) stream.end();
      else settleWhole(Buffer.concat(chunks));
    });
  }
  return { whole, stream, refused: refusedP, isRefused: () => refused };
}

/** An `app.request()` body (no socket) as a Node stream, so the one limit above serves both. */
export function webBody(body: ReadableStream<Uint8Array> | null): Readable {
  return body ? Readable.fromWeb(body as import('node:stream/web').ReadableStream<Uint8Array>) : Readable.from([]);
}
