/**
 * Logging a browser into the dashboard without a secret in any URL. The API token never goes in
 * a URL (browser history, session restore and shoulder-surfed address bars keep URLs): `drums ui`
 * asks the daemon (with the token) for a one-time code valid for 60 s; the browser opens
 * `/ui?code=<code>`, the daemon spends the code, sets an HttpOnly, SameSite=Strict cookie holding a
 * fresh dashboard session (not the token) and answers 303 to `/ui`, so the address bar and the
 * history entry show no secret, and the code in a redirect record is already spent.
 *
 * The cookie authenticates only requests a browser marks as coming from the daemon's own page
 * (Sec-Fetch-Site: same-origin, or the daemon's own Origin on a WebSocket or take-over), or a
 * typed/bookmarked navigation to /ui itself (Sec-Fetch-Site: none): a page on another port of
 * 127.0.0.1 is same-site, so SameSite alone would let its requests carry the cookie.
 */
import { createHash, randomBytes } from 'node:crypto';
import { Hono } from 'hono';

/** How long a login code stays good. */
export const CODE_TTL_MS = 60_000;
/** How long a dashboard login lasts (the cookie is a browser-session cookie too). */
export const LOGIN_TTL_MS = 12 * 3600_000;
/** At most this many live codes and logins each: the oldest go first (codes need the token to make). */
const MAX_ENTRIES = 256;

const key = (secret: string) => createHash('sha256').update(secret).digest('hex');

/** Live entries, keyed by the secret's SHA-256 (the secret itself is never stored), with their expiry. */
class Expiring {
  private readonly m = new Map<string, number>();
  add(secret: string, ttlMs: number): number {
    const now = Date.now();
    for (const [k, until] of this.m) if (until <= now) this.m.delete(k);
    while (this.m.size >= MAX_ENTRIES) this.m.delete(this.m.keys().next().value!);
    const until = now + ttlMs;
    this.m.set(key(secret), until);
    return until;
  }
  /** Whether `secret` is live; `spend` removes it either way. */
  check(secret: string, spend = false): boolean {
    const k = key(secret);
    const until = this.m.get(k);
    if (until === undefined) return false;
    if (spend || until <= Date.now()) this.m.delete(k);
    return until > Date.now();
  }
}

export class UiLogins {
  /** The cookie's name: per instance, since cookies are shared by every port of a host. */
  readonly cookie: string;
  private readonly codes = new Expiring();
  private readonly logins = new Expiring();
  private readonly codeTtlMs: number;
  constructor(instance: string, o: { codeTtlMs?: number } = {}) {
    this.cookie = `drums_ui_${instance.replace(/[^a-z0-9]/gi, '')}`;
    this.codeTtlMs = o.codeTtlMs ?? CODE_TTL_MS;
  }

  /** A new one-time code (43 base64url characters, 256 bits) and when it expires. */
  issue(): { code: string; expiresAt: string } {
    const code = randomBytes(32).toString('base64url');
    return { code, expiresAt: new Date(this.codes.add(code, this.codeTtlMs)).toISOString() };
  }

  /** Spends `code`: a new login (the cookie's value), or undefined if the code is unknown, used or expired. */
  redeem(code: string): string | undefined {
    if (!/^[A-Za-z0-9_-]{43}$/.test(code) || !this.codes.check(code, true)) return undefined;
    const login = randomBytes(32).toString('base64url');
    this.logins.add(login, LOGIN_TTL_MS);
    return login;
  }

  /** The Set-Cookie value for a login. */
  setCookie(login: string): string {
    return `${this.cookie}=${login}; Path=/; HttpOnly; SameSite=Strict; Max-Age=${LOGIN_TTL_MS / 1000}`;
  }

  /**
   * Whether a request is the logged-in dashboard's: a live login in the cookie, sent by the
   * daemon's own page (see the top of this file). `origin` is the daemon's own origin.
   */
  authenticates(h: { cookie?: string; secFetchSite?: string; origin?: string; ownOrigin: string; method: string; path: string }): boolean {
    const ownPage = h.secFetchSite === 'same-origin' || (h.origin !== undefined && h.origin === h.ownOrigin);
    const typedUi = h.secFetchSite === 'none' && h.method === 'GET' && h.path === '/ui';
    if (!ownPage && !typedUi) return false;
    const login = cookieValue(h.cookie ?? '', this.cookie);
    return login !== undefined && /^[A-Za-z0-9_-]{43}$/.test(login) && this.logins.check(login);
  }
}

function cookieValue(header: string, name: string): string | undefined {
  for (const part of header.slice(0, 8192).split(';')) {
    const i = part.indexOf('=');
    if (i > 0 && part.slice(0, i).trim() === name) return part.slice(i + 1).trim();
  }
  return undefined;
}

/** POST /v1/ui/login (with the token): a one-time dashboard login link, valid for 60 s. */
export function uiLoginRoutes(logins: UiLogins) {
  const app = new Hono();
  app.post('/v1/ui/login', (c) => {
    const { code, expiresAt } = logins.issue();
    return c.json({ url: `http://${c.req.header('host')}/ui?code=${code}`, code, expiresAt }, 201, { 'cache-control': 'no-store' });
  });
  return app;
}
