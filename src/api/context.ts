import type { Context } from 'hono';
import { DrumsError } from '../common/errors.ts';
import type { Session, SessionManager } from '../session/manager.ts';
import type { DisplayService } from '../session/display-service.ts';
import type { Session as SessionView } from '../protocol/generated/types.ts';
import { poolsOf } from '../session/pools.ts';

/** What every route module gets: the manager, the display service and request helpers. */
export interface RouteContext {
  mgr: SessionManager;
  display: DisplayService;
  maxBodyBytes: number;
  /** The public view of a session (with the fields features add through `AppOptions.viewExtras`). */
  view(s: Session): SessionView;
  /** The request body as JSON ({} when empty); 400 invalid_json / 413 on bad input. */
  body(c: Context): Promise<unknown>;
  /** The session named by `:id`, or 404 session_not_found. */
  session(c: Context): Session;
  /** Throws 409 session_resetting / session_broken unless the session is ready. */
  usable(s: Session): void;
  /**
   * Checks an optional expected generation (query `generation` or header
   * `x-drums-generation`): a stale one gets 409 stale_generation.
   */
  checkGeneration(c: Context, s: Session, fromBody?: unknown): void;
}

const ID_RE = /^s[0-9a-f]{10}$/;

export function createRouteContext(mgr: SessionManager, display: DisplayService, maxBodyBytes: number, view: (s: Session) => SessionView): RouteContext {
  return {
    mgr,
    display,
    maxBodyBytes,
    view,
    async body(c) {
      const text = await c.req.text();
      if (Buffer.byteLength(text) > maxBodyBytes) throw new DrumsError('payload_too_large', `request body is over ${maxBodyBytes} bytes`);
      if (!text.trim()) return {};
      try {
        return JSON.parse(text);
      } catch (e) {
        throw new DrumsError('invalid_json', `request body is not valid JSON: ${(e as Error).message}`);
      }
    },
    session(c) {
      const id = c.req.param('id') ?? '';
      if (!ID_RE.test(id)) throw new DrumsError('session_not_found', `no session '${id.slice(0, 64)}' (ids look like s0123456789)`);
      // A session waiting unclaimed in a warm pool does not exist for clients yet.
      const s = mgr.get(id);
      if (poolsOf(mgr).isHidden(s)) throw new DrumsError('session_not_found', `no session '${id}'; list sessions with GET /v1/sessions`);
      return s;
    },
    usable(s) {
      if (s.state === 'resetting') throw new DrumsError('session_resetting', `session ${s.id} is resetting; retry with the new generation`);
      if (s.state !== 'ready') throw new DrumsError('session_broken', `session ${s.id} is ${s.state}${s.brokenReason ? `: ${s.brokenReason}` : ''}`);
    },
    checkGeneration(c, s, fromBody) {
      const raw = fromBody ?? c.req.query('generation') ?? c.req.header('x-drums-generation');
      if (raw === undefined || raw === null) return;
      const g = typeof raw === 'number' ? raw : Number(raw);
      if (!Number.isInteger(g) || g < 1)
        throw new DrumsError('invalid_request', `generation: must be a positive integer, got ${JSON.stringify(raw)}`, { details: { field: 'generation' } });
      if (s.state === 'resetting')
        throw new DrumsError('session_resetting', `session ${s.id} is resetting to generation ${s.generation}`, { details: { generation: s.generation } });
      if (g !== s.generation) {
        throw new DrumsError('stale_generation', `generation ${g} is stale; session ${s.id} is at generation ${s.generation}`, {
          details: { expected: g, current: s.generation },
        });
      }
    },
  };
}
