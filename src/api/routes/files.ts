import { Hono } from 'hono';
import { DrumsError } from '../../common/errors.ts';
import type { Session } from '../../session/manager.ts';
import { deleteFile, listDir, readFile, statFile, validateMode, validatePath, writeFile, type Target } from '../../session/files.ts';
import type { RouteContext } from '../request.ts';
import { parseBool, queryRoot } from './params.ts';

/** Files, confined to the session (src/session/files.ts): read, write, delete, list, stat. */
export function fileRoutes(ctx: RouteContext) {
  const app = new Hono();
  const target = (s: Session): Target => ({ runtime: ctx.mgr.runtime, container: s.names.container });
  // Files, confined to the session (see src/session/files.ts).
  app.get('/v1/sessions/:id/files', async (c) => {
    const path = validatePath(c.req.query('path'));
    const root = queryRoot(c);
    const s = ctx.ready(c);
    const data = await readFile(target(s), path, root);
    return c.body(new Uint8Array(data), 200, { 'content-type': 'application/octet-stream', 'x-drums-generation': String(s.generation) });
  });
  app.put('/v1/sessions/:id/files', async (c) => {
    const path = validatePath(c.req.query('path'));
    const mode = validateMode(c.req.query('mode'));
    const root = queryRoot(c);
    const s = ctx.ready(c);
    const buf = Buffer.from(await c.req.arrayBuffer());
    if (buf.length > ctx.maxBodyBytes) throw new DrumsError('payload_too_large', `request body is over ${ctx.maxBodyBytes} bytes`);
    await writeFile(target(s), path, buf, mode, root);
    return c.json({ path, size: buf.length, mode, generation: s.generation }, 201);
  });
  app.delete('/v1/sessions/:id/files', async (c) => {
    const path = validatePath(c.req.query('path'));
    const root = queryRoot(c);
    const recursive = parseBool(c.req.query('recursive'), 'recursive') ?? false;
    const s = ctx.ready(c);
    await deleteFile(target(s), path, root, recursive);
    return c.body(null, 204);
  });
  app.get('/v1/sessions/:id/files/list', async (c) => {
    const path = validatePath(c.req.query('path'));
    const root = queryRoot(c);
    const s = ctx.ready(c);
    const r = await listDir(target(s), path, root);
    return c.json({ path, ...r, generation: s.generation }, 200, { 'x-drums-generation': String(s.generation) });
  });
  app.get('/v1/sessions/:id/files/stat', async (c) => {
    const path = validatePath(c.req.query('path'));
    const root = queryRoot(c);
    const follow = parseBool(c.req.query('follow'), 'follow') ?? false;
    const s = ctx.ready(c);
    return c.json({ ...(await statFile(target(s), path, root, follow)), generation: s.generation }, 200, { 'x-drums-generation': String(s.generation) });
  });
  return app;
}
