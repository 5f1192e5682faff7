/** Stand-ins for unit tests of the API (the real SessionManager needs root and an image). */
import { ConflictError, NotFoundError } from '../../src/common/errors.ts';
import type { Session } from '../../src/session/manager.ts';
import { parseSpec } from '../../src/session/spec.ts';
import { loadConfig } from '../../src/common/config.ts';

/** The parts of SessionManager the session routes and middleware use, in memory. */
export class FakeManager {
  readonly sessions = new Map<string, Session>();
  readonly terminations: { id: string; reason: string; terminatedAt: string }[] = [];
  creates = 0;
  readonly hooks = { ready: [] as ((s: Session) => Promise<void>)[], destroyed: [] as ((id: string) => Promise<void> | void)[] };
  readonly maxSessions = 128;
  readonly config = loadConfig({});
  capacity() {
    const m = { totalBytes: 0, availableBytes: 0, reserveBytes: 0, perSessionBytes: 0, inFlightBytes: 0, moreSessions: 128 };
    return {
      memory: m,
      disk: { totalBytes: 0, freeBytes: 0, reserveBytes: 0, committedBytes: 0, perSessionBytes: 0, moreSessions: 128 },
      cpu: { cores: 2 },
      moreSessions: 128,
    };
  }
  list(): Session[] {
    return [...this.sessions.values()];
  }
  readonly heldBack = new Set<string>();
  visible(s: Session): boolean {
    return !this.heldBack.has(s.id);
  }
  lookup(id: string): Session {
    return this.get(id);
  }
  requireReady(s: Session): void {
    if (s.state !== 'ready') throw new ConflictError(s.state === 'resetting' ? 'session_resetting' : 'session_broken', `session ${s.id} is ${s.state}`);
  }
  get(id: string): Session {
    const s = this.sessions.get(id);
    if (!s) throw new NotFoundError('session_not_found', `no session '${id}'`);
    return s;
  }
  async create(body: unknown): Promise<Session> {
    this.creates++;
    const spec = parseSpec(body);
    const id = 's' + String(this.creates).padStart(10, '0');
    const s = {
      id,
      state: 'ready',
      spec,
      generation: 1,
      attempt: { generation: 1, token: 'a'.repeat(32) },
      createdAt: new Date(0).toISOString(),
      subnet: { address: '10.231.0.2', gateway: '10.231.0.1' },
      timings: { total: 12.3 },
      x11Socket: '/nonexistent/drums-unit/X0',
      names: { cgroup: `drums-unit-none/${id}` },
    } as unknown as Session;
    this.sessions.set(id, s);
    return s;
  }
  async reset(id: string): Promise<Session> {
    const s = this.get(id);
    s.generation++;
    s.attempt = { generation: s.generation, token: 'b'.repeat(32) };
    return s;
  }
  async destroy(id: string): Promise<void> {
    this.sessions.delete(id);
  }
}
