/** Frames beyond one screenshot: take-over, the WebSocket frame stream, the dashboard. */
import { Hono } from 'hono';
import type { RouteContext } from '../context.ts';
import { streamRoutes } from './stream.ts';
import { takeoverRoutes } from './takeover.ts';
import { uiRoutes } from './ui.ts';

export function frameRoutes(ctx: RouteContext) {
  const app = new Hono();
  app.route('/', takeoverRoutes(ctx));
  app.route('/', streamRoutes(ctx));
  app.route('/', uiRoutes(ctx));
  return app;
}
