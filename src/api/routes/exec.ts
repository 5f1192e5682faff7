import { Hono } from 'hono';
import { execInSession, execStream, parseExec, type Target } from '../../session/exec.ts';
import type { Session } from '../../session/manager.ts';
import type { RouteContext } from '../request.ts';
import { checkBody } from '../spec-validate.ts';
import { parseBool } from './params.ts';

/** POST /v1/sessions/{id}/exec: a command in the session, through the exec primitive (src/session/exec.ts). */
export function execRoutes(ctx: RouteContext) {
  const app = new Hono();
  const target = (s: Session): Target => ({ runtime: ctx.mgr.runtime, container: s.names.container });
  // Exec: one JSON answer, or with ?stream=1 NDJSON lines as the command writes them.
  // A client that goes away kills the command either way.
  app.post('/v1/sessions/:id/exec', async (c) => {
    const stream = parseBool(c.req.query('stream'), 'stream');
    const s = ctx.session(c);
    const json = await ctx.body(c);
    const req = parseExec(json);
    checkBody('execInSession', json);
    // (The expected generation was checked by the pipeline, request.ts.)
    ctx.usable(s);
    if (!stream) {
      // The body's parts go out one at a time, with the socket's backpressure (see execInSession).
      const parts = await execInSession(target(s), req, c.req.raw.signal, { generation: s.generation });
      const body = new ReadableStream<Uint8Array>({
        pull(ctrl) {
          const p = parts.shift();
          if (p) ctrl.enqueue(p);
          else ctrl.close();
        },
      });
      return new Response(body, { status: 200, headers: { 'content-type': 'application/json' } });
    }
    const generation = s.generation;
    const enc = new TextEncoder();
    const abort = new AbortController();
    // Backpressure: past 16 queued records the command's output is paused until the client reads (pull), so a
    // slow reader holds the command, not the daemon's memory. A client that goes away resumes it (drained, dropped).
    let resume = () => {};
    const body = new ReadableStream<Uint8Array>(
      {
        start(ctrl) {
          const send = (o: unknown): boolean => {
            try {
              ctrl.enqueue(enc.encode(JSON.stringify(o) + '\n'));
              return (ctrl.desiredSize ?? 1) > 0;
            } catch {
              return true; // client gone: drain
            }
          };
          execStream(
            target(s),
            req,
            (stream, data) => send({ stream, data }),
            abort.signal,
            (r) => {
              resume = r;
            },
          ).then(
            (r) => {
              send({ ...r, durationMs: Math.round(r.durationMs * 10) / 10, generation });
              try {
                ctrl.close();
              } catch {}
            },
            (e) => {
              send({ error: { code: 'internal', message: String((e as Error).message) } });
              try {
                ctrl.close();
              } catch {}
            },
          );
        },
        pull() {
          resume();
        },
        cancel() {
          abort.abort();
          resume();
        },
      },
      new CountQueuingStrategy({ highWaterMark: 16 }),
    );
    return new Response(body, { status: 200, headers: { 'content-type': 'application/x-ndjson', 'x-drums-generation': String(generation) } });
  });
  return app;
}
