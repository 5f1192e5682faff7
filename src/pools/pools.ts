import { randomUUID } from 'node:crypto';
import { existsSync, lstatSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { DrumsError, ValidationError, errorMessage } from '../common/errors.ts';
import { log } from '../common/log.ts';
import { canonicalJson, findImage, listRecipes } from '../image/index.ts';
import { episodeStoreFull } from '../session/episodes.ts';
import type { Session, SessionManager } from '../session/manager.ts';
import { type PoolDefs, poolStorePath, readPoolStore, writePoolStore } from './pool-store.ts';
import { parseSpec, POOL_LABEL, type SessionSpec } from '../session/spec.ts';

/**
 * Warm pools: a pool is a session template and a target size. The daemon
 * keeps `size` sessions of the template ready in the background (each one an
 * ordinary create, so it goes through the manager's admission limit,
 * DRUMS_START_CONCURRENCY, and is recorded and swept like any session). A
 * claim hands out a ready one and makes it indistinguishable from a fresh
 * create: a new attempt token, the claimer's labels and TTL. A session that
 * sits in a pool is invisible to the API (GET /v1/sessions, /v1/sessions/{id})
 * until claimed, so nobody has touched it before its claimer.
 *
 * Pool members carry the label `drums.pool=<name>` (it is part of their
 * recorded spec, so a restarted daemon can tell what they were).
 */
export { POOL_LABEL } from '../session/spec.ts';
const NAME_RE = /^[a-z0-9][a-z0-9_-]{0,62}$/;
const MAX_POOL_SIZE = 256;
const BACKOFF_MS = [1000, 2000, 5000, 15_000, 60_000];

const CMD_RE = /^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$/;
const TASK_ID_RE = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;
const DIGEST_RE = /^[0-9a-f]{16,64}$/;
/** Where an image's commands are looked for: real directories in every image (merged-usr makes /bin a link, never followed). */
const CMD_DIRS = ['usr/bin', 'usr/local/bin'];

export type OnEmpty = 'create' | 'fail';
/** How a task pool's member was made: the task's own setup, or a fork of a set-up session. */
export type MemberOrigin = 'setup' | 'fork-disk' | 'fork-memory';
const ORIGINS: MemberOrigin[] = ['setup', 'fork-disk', 'fork-memory'];

/**
 * A task pool's task (docs/pools.md, "Pools of set-up tasks"): the OSWorld task its members have
 * set up. The daemon does not run the setup (desktop_env's SetupController is Python, run by the
 * SDK against the guest contract); a filler (`drums osworld pool`) makes the members and adds them
 * (POST /v1/pools/{name}/members). What the daemon checks at declare time is what it can see
 * itself: the commands the task's apps need, in the template's image, and the internet.
 */
export interface PoolTask {
  /** The task's id (its file name in OSWorld's evaluation_examples). */
  id: string;
  /** The SDK's digest of the task JSON: a reset with this exact task claims from the pool. */
  digest: string;
  /** Commands the task's apps need on the image (e.g. libreoffice, gimp). */
  apps: string[];
  /** Why the task needs the live internet, or null. */
  internet: string | null;
}
export type ReleaseMode = 'reset' | 'destroy';

interface Pool {
  name: string;
  /** The template as given (a SessionSpec body), and parsed. */
  template: Record<string, unknown>;
  spec: SessionSpec;
  size: number;
  /** Ready, unclaimed sessions (oldest first). */
  idle: string[];
  creating: number;
  claims: number;
  hits: number;
  misses: number;
  lastError?: string;
  failures: number;
  /** Goes up when the template changes: sessions made from an older one are not handed out. */
  version: number;
  retryTimer?: NodeJS.Timeout;
  source: 'config' | 'api';
  /** Set: a pool of set-up tasks, filled by its filler, not by the daemon. */
  task?: PoolTask;
  /** A task pool's members so far, by how they were made (the view's `fill`). */
  fill: Record<MemberOrigin, number>;
}

/** What GET /v1/pools shows of a pool. */
export interface PoolView {
  name: string;
  size: number;
  ready: number;
  creating: number;
  template: Record<string, unknown>;
  claims: number;
  hits: number;
  misses: number;
  source: 'config' | 'api';
  lastError?: string;
  /** A task pool's task; its members are made by a filler (`filler: client`), not by the daemon. */
  task?: PoolTask;
  filler: 'daemon' | 'client';
  /** A task pool: how many members were made by the task's setup and how many by each fork mode. */
  fill?: { setup: number; forkDisk: number; forkMemory: number };
}

/** A claim as POST /v1/sessions takes it: `{pool, onEmpty?, labels?, ttlSeconds?}`. */
export interface Claim {
  pool: string;
  onEmpty: OnEmpty;
  labels: Record<string, string>;
  ttlSeconds?: number;
}

const CLAIM_FIELDS = ['pool', 'onEmpty', 'labels', 'ttlSeconds'];

/** Parses a claim body (one with a `pool` field); the labels and TTL are checked like a spec's. */
export function parseClaim(body: Record<string, unknown>): Claim {
  for (const k of Object.keys(body)) {
    if (!CLAIM_FIELDS.includes(k))
      throw new ValidationError(k, `a pool claim takes only ${CLAIM_FIELDS.join(', ')}; the pool's template sets the rest`, 'invalid_spec');
  }
  if (typeof body.pool !== 'string' || !NAME_RE.test(body.pool))
    throw new ValidationError('pool', 'must be a pool name like "web" (see GET /v1/pools)', 'invalid_spec');
  const onEmpty = body.onEmpty ?? 'create';
  if (onEmpty !== 'create' && onEmpty !== 'fail')
    throw new ValidationError('onEmpty', 'must be "create" (wait for a fresh session) or "fail" (429 pool_empty at once)', 'invalid_spec');
  const extra = parseSpec({
    ...(body.labels !== undefined ? { labels: body.labels } : {}),
    ...(body.ttlSeconds !== undefined ? { ttlSeconds: body.ttlSeconds } : {}),
  });
  if (POOL_LABEL in extra.labels) throw new ValidationError(`labels.${POOL_LABEL}`, 'is set by the daemon', 'invalid_spec');
  return { pool: body.pool, onEmpty, labels: extra.labels, ...(body.ttlSeconds !== undefined ? { ttlSeconds: extra.ttlSeconds } : {}) };
}

/** The comparable part of a spec: what a create would make (TTL is per claim, not per session). */
function specKey(spec: SessionSpec): string {
  const { ttlSeconds: _t, ...rest } = spec;
  return canonicalJson(rest);
}

/** What a task pool's member must share with the template: all of the spec but labels and TTL. */
function memberKey(spec: SessionSpec): string {
  const { ttlSeconds: _t, labels: _l, ...rest } = spec;
  return canonicalJson(rest);
}

export class PoolManager {
  private readonly _pools = new Map<string, Pool>();
  /**
   * The pools' idle sessions (and ones being reset back or discarded): the registry's held-back
   * set, so a client's lookup (SessionManager.lookup) answers 404 for them without asking here.
   */
  private get _idle(): Set<string> {
    return this.mgr.heldBack;
  }
  /** Sessions a pool made: which pool and template version (a claimed one keeps its entry until destroyed). */
  private readonly _made = new Map<string, { pool: string; version: number }>();
  private readonly _inflight = new Set<Promise<unknown>>();
  private _stopped = false;
  /** Where the API-made pools are saved (set by loadSaved(); unset, nothing is saved). */
  private _storePath?: string;
  private readonly mgr: SessionManager;
  /** How many refill creates may run at once, over all pools (a share of the create admission). */
  readonly refillConcurrency: number;
  private _refilling = 0;
  /** Refill latencies (seconds) and claim outcomes, for /metrics. */
  readonly observers: { refill: ((pool: string, seconds: number) => void)[]; claim: ((pool: string, result: 'hit' | 'miss' | 'empty') => void)[] } = {
    refill: [],
    claim: [],
  };

  constructor(mgr: SessionManager, opts: { refillConcurrency?: number } = {}) {
    this.mgr = mgr;
    const c = mgr.config;
    this.refillConcurrency = opts.refillConcurrency ?? c.poolRefillConcurrency ?? Math.max(1, Math.floor(c.startConcurrency / 2));
    mgr.hooks.destroyed.push((id) => this._forget(id));
  }

  /**
   * Pools from the daemon's config: DRUMS_POOLS (JSON) and/or DRUMS_POOLS_FILE
   * (a JSON file), each `{"<name>": {"size": N, "template": {SessionSpec}}}`.
   * A bad config stops the daemon with the field at fault.
   */
  loadConfig(c: { pools?: string | undefined; poolsFile?: string | undefined } = this.mgr.config): void {
    const sources: [string, string][] = [];
    if (c.poolsFile) {
      if (!existsSync(c.poolsFile)) throw new DrumsError('invalid_config', `DRUMS_POOLS_FILE: no file ${c.poolsFile}`);
      sources.push([`DRUMS_POOLS_FILE (${c.poolsFile})`, readFileSync(c.poolsFile, 'utf8')]);
    }
    if (c.pools) sources.push(['DRUMS_POOLS', c.pools]);
    for (const [where, text] of sources) {
      let doc: unknown;
      try {
        doc = JSON.parse(text);
      } catch (e) {
        throw new DrumsError('invalid_config', `${where}: not JSON: ${errorMessage(e)}`);
      }
      if (!doc || typeof doc !== 'object' || Array.isArray(doc)) throw new DrumsError('invalid_config', `${where}: must be an object of pools by name`);
      for (const [name, def] of Object.entries(doc as Record<string, unknown>)) {
        try {
          this.put(name, def, 'config');
        } catch (e) {
          throw new DrumsError('invalid_config', `${where}: pool '${name}': ${errorMessage(e)}`);
        }
      }
    }
  }

  /**
   * The pools saved by an earlier daemon of this instance (made or changed through the API), loaded
   * after the config's: a saved pool wins over a config pool of the same name (the API change came
   * later). A corrupt file, or a saved pool that no longer passes (say its image was removed), is
   * reported in the log and skipped; the daemon starts without it. From now on every API change is saved.
   */
  loadSaved(stateDir: string = this.mgr.inst.stateDir): void {
    const path = poolStorePath(stateDir);
    const { defs, corrupt } = readPoolStore(path);
    if (corrupt) log('warn', 'saved pools file is unreadable; starting without it (moved aside)', { file: path, movedTo: `${path}.corrupt`, error: corrupt });
    for (const [name, def] of Object.entries(defs)) {
      try {
        if (this._pools.has(name)) log('warn', 'a saved pool replaces the config pool of the same name', { pool: name });
        this.put(name, def, 'api');
      } catch (e) {
        log('warn', 'saved pool skipped', { pool: name, file: path, error: errorMessage(e) });
      }
    }
    this._storePath = path;
  }

  /** Writes the API-made pools to the state dir (after each API change, once loadSaved() ran). */
  private _save(): void {
    if (!this._storePath) return;
    const defs: PoolDefs = {};
    for (const p of this._pools.values()) if (p.source === 'api') defs[p.name] = { size: p.size, template: p.template, ...(p.task ? { task: p.task } : {}) };
    try {
      writePoolStore(this._storePath, defs);
    } catch (e) {
      log('error', 'could not save pools; API changes will not survive a restart', { file: this._storePath, error: errorMessage(e) });
    }
  }

  /** Creates or changes a pool; a smaller size destroys surplus idle sessions, a changed template replaces them. */
  put(name: string, def: unknown, source: 'config' | 'api' = 'api'): { view: PoolView; created: boolean } {
    if (!NAME_RE.test(name)) throw new ValidationError('name', 'must be 1-63 of a-z 0-9 _ - (starting with a letter or digit)', 'invalid_pool');
    if (!def || typeof def !== 'object' || Array.isArray(def))
      throw new ValidationError('body', 'must be {"size": N, "template": {SessionSpec}}', 'invalid_pool');
    const d = def as Record<string, unknown>;
    for (const k of Object.keys(d))
      if (k !== 'size' && k !== 'template' && k !== 'task') throw new ValidationError(k, 'unknown field; allowed: size, template, task', 'invalid_pool');
    if (typeof d.size !== 'number' || !Number.isInteger(d.size) || d.size < 0 || d.size > MAX_POOL_SIZE)
      throw new ValidationError('size', `must be an integer within 0..${MAX_POOL_SIZE}`, 'invalid_pool');
    const template = (d.template ?? {}) as Record<string, unknown>;
    let spec: SessionSpec;
    try {
      spec = parseSpec(template, this.mgr.defaultCpus);
    } catch (e) {
      if (e instanceof DrumsError && e.details?.field)
        throw new ValidationError(`template.${e.details.field}`, errorMessage(e).replace(/^[^:]*: /, ''), 'invalid_pool');
      throw e;
    }
    if (POOL_LABEL in spec.labels) throw new ValidationError(`template.labels.${POOL_LABEL}`, 'is set by the daemon', 'invalid_pool');
    // An unknown image is refused now, not at the first refill.
    const recipes = listRecipes();
    if (!recipes.includes(spec.image))
      throw new DrumsError('image_not_found', `template.image: no image '${spec.image}'; known: ${recipes.join(', ')}`, {
        details: { field: 'template.image' },
      });
    const image = findImage(spec.image, { imagesDir: this.mgr.inst.imagesDir });
    if (!image) {
      throw new DrumsError('image_not_built', `template.image: image '${spec.image}' is not built yet; run 'drums image build ${spec.image}'`, {
        details: { field: 'template.image' },
      });
    }
    const task = d.task === undefined || d.task === null ? undefined : parseTask(d.task);
    if (task) checkTaskRunnable(task, spec, image.rootfs);
    // A template the host could never hold is refused now, not by every refill.
    try {
      this.mgr.admission.fitsHost(spec);
    } catch (e) {
      if (e instanceof DrumsError && typeof e.details?.field === 'string')
        throw new DrumsError(e.code, `template.${errorMessage(e)}`, { details: { field: `template.${e.details.field}` } });
      throw e;
    }
    const old = this._pools.get(name);
    const pool: Pool = old ?? {
      name,
      template,
      spec,
      size: d.size,
      idle: [],
      creating: 0,
      claims: 0,
      hits: 0,
      misses: 0,
      failures: 0,
      version: 1,
      source,
      fill: { setup: 0, 'fork-disk': 0, 'fork-memory': 0 },
    };
    if (old && (specKey(old.spec) !== specKey(spec) || old.task?.digest !== task?.digest)) {
      // The idle sessions were made from the old template: replace them.
      pool.version++;
      for (const id of old.idle.splice(0)) this._discard(id);
    }
    Object.assign(pool, { template, spec, size: d.size, source, task, failures: 0, lastError: undefined });
    clearTimeout(pool.retryTimer);
    this._pools.set(name, pool);
    if (source === 'api') this._save();
    this._trim(pool);
    this._refill();
    return { view: this._view(pool), created: !old };
  }

  /** Removes a pool and destroys its idle sessions (claimed ones stay with their claimers). */
  remove(name: string): void {
    const pool = this._get(name);
    this._pools.delete(name);
    if (pool.source === 'api') this._save();
    clearTimeout(pool.retryTimer);
    for (const id of pool.idle.splice(0)) this._discard(id);
  }

  list(): PoolView[] {
    return [...this._pools.values()].map((p) => this._view(p));
  }

  view(name: string): PoolView {
    return this._view(this._get(name));
  }

  /**
   * True for a session that sits in a pool (ready, or being reset back into it) or that a pool
   * is still making: hidden from the API. A claimed one, or one a restarted daemon adopted
   * from its record, is visible like any session.
   */
  isHidden(s: Session): boolean {
    return !this.mgr.visible(s);
  }

  /** The pool whose template a create body asks for exactly (TTL aside), if any. */
  match(spec: SessionSpec): string | undefined {
    const key = specKey(spec);
    // A task pool's members have a task set up: never what a plain create asked for.
    for (const p of this._pools.values()) if (!p.task && specKey(p.spec) === key) return p.name;
    return undefined;
  }

  /**
   * Hands out a ready session of the pool. Empty: `onEmpty: 'create'` makes
   * a fresh one from the template (the caller waits), `'fail'` is 429 pool_empty.
   */
  async claim(c: Claim): Promise<{ session: Session; hit: boolean }> {
    const pool = this._get(c.pool);
    // A recorded pool with the episode store full: refused like a create asking for `record` (507), before a member
    // is taken. The claimer asked for recorded attempts; a session whose recording stopped before its first step
    // would lose the attempt silently (its only sign `recording.stopped`). The idle members stay in the pool.
    if (pool.spec.record && this.mgr.episodes.hostFull()) throw episodeStoreFull(this.mgr.episodes, pool.name);
    const t0 = performance.now();
    pool.claims++;
    let s: Session | undefined;
    while (!s && pool.idle.length) {
      const id = pool.idle.shift()!;
      this._idle.delete(id);
      const cand = this.mgr.list().find((x) => x.id === id);
      // A member made while the store was full has a recorder stopped since its start: it would record nothing of
      // the attempt, so it is discarded (the pool makes a new one) rather than handed out.
      if (cand?.state === 'ready' && !(cand.spec.record && cand._episode?.stopped)) s = cand;
      else if (cand) this._discard(id);
    }
    const hit = !!s;
    if (s) {
      pool.hits++;
      this.observers.claim.forEach((f) => f(pool.name, 'hit'));
    } else if (c.onEmpty === 'fail' || pool.task) {
      this.observers.claim.forEach((f) => f(pool.name, 'empty'));
      this._refill();
      // A task pool cannot make a member on demand (its setup runs in the filler): empty is empty.
      const how = pool.task
        ? `it is a pool of set-up task ${pool.task.id}, filled by its filler (drums osworld pool); set the task up yourself (DesktopEnv.reset does) or retry when the filler has added one`
        : `retry, or claim with "onEmpty": "create" to wait for a fresh one`;
      throw new DrumsError('pool_empty', `pool '${pool.name}' has no ready session (${pool.creating} being made); ${how}`, {
        details: { pool: pool.name, creating: pool.creating, size: pool.size },
      });
    } else {
      pool.misses++;
      this.observers.claim.forEach((f) => f(pool.name, 'miss'));
      const version = pool.version;
      s = await this.mgr.create(this._body(pool));
      this._made.set(s.id, { pool: pool.name, version });
    }
    // After this answer is on its way: a refill's create does synchronous work (spec, image lookup) first.
    setImmediate(() => this._refill());
    // A claimed session is a fresh attempt: a token nobody has seen, the claimer's labels and TTL.
    s.attempt = { generation: s.generation, token: randomUUID() };
    s.spec.labels = { ...pool.spec.labels, ...c.labels, [POOL_LABEL]: pool.name };
    const ttl = c.ttlSeconds ?? pool.spec.ttlSeconds;
    s.spec.ttlSeconds = ttl;
    this.mgr.armTtl(s, ttl);
    s.timings.poolClaimMs = performance.now() - t0;
    return { session: s, hit };
  }

  /**
   * Gives a claimed session back: `reset` gives its pool a fresh desktop of it
   * (new upper layer and processes, generation + 1, so the old attempt's
   * token and generation are stale), `destroy` destroys it and the pool makes
   * a new one.
   */
  async release(s: Session, mode: ReleaseMode): Promise<{ returned: boolean }> {
    const name = s.spec.labels[POOL_LABEL];
    if (!name) throw new DrumsError('session_not_pooled', `session ${s.id} did not come from a pool; destroy it with DELETE /v1/sessions/${s.id}`);
    const pool = this._pools.get(name);
    // Back into the pool even when a refill is under way: that refill is then surplus and discarded.
    // A task pool's member cannot go back: a reset would undo the setup it was claimed for.
    if (mode === 'destroy' || !pool || pool.task || pool.size === 0 || this._made.get(s.id)?.version !== pool.version) {
      await this.mgr.destroy(s.id, 'pool_release');
      this._refill();
      return { returned: false };
    }
    this.mgr.armTtl(s, 0);
    s.spec.labels = { ...pool.spec.labels, [POOL_LABEL]: pool.name };
    s.spec.ttlSeconds = pool.spec.ttlSeconds;
    this._idle.add(s.id); // hidden while it resets
    try {
      await this.mgr.reset(s.id);
    } catch (e) {
      this._discard(s.id);
      throw e;
    }
    if (this._stopped || !this._pools.has(name)) {
      this._discard(s.id);
      return { returned: false };
    }
    pool.idle.push(s.id);
    this._trim(pool);
    return { returned: pool.idle.includes(s.id) };
  }

  /**
   * A task pool's filler adds a session it set up (or forked from one it set up): a ready session,
   * visible (not in any pool), of the template's image. From here it is hidden like any pool member,
   * its TTL is off and its attempt token will be replaced at claim, so its filler's token is stale.
   */
  addMember(name: string, id: string, origin: unknown): PoolView {
    const pool = this._get(name);
    if (!pool.task)
      throw new DrumsError('invalid_request', `pool '${name}' is filled by the daemon from its template; only a task pool (with "task") takes members`, {
        details: { field: 'pool' },
      });
    if (typeof origin !== 'string' || !ORIGINS.includes(origin as MemberOrigin))
      throw new DrumsError('invalid_request', `origin: must be one of ${ORIGINS.join(', ')} (how the member was made)`, { details: { field: 'origin' } });
    const s = this.mgr.lookup(id);
    if (POOL_LABEL in s.spec.labels)
      throw new DrumsError('invalid_request', `session '${id}' came from pool '${s.spec.labels[POOL_LABEL]}'; add a session the filler made`, {
        details: { field: 'session' },
      });
    if (s.state !== 'ready') throw new DrumsError('session_busy', `session '${id}' is ${s.state}; add it when it is ready`);
    // A claimer gets what the template says (image, screen, limits, egress...): labels and TTL aside.
    if (memberKey(s.spec) !== memberKey(this.mgr.effectiveSpec(pool.template)))
      throw new DrumsError(
        'invalid_request',
        `session '${id}' was not made from pool '${name}'s template (image, screen, limits, egress and the rest must match; labels may differ)`,
        { details: { field: 'session' } },
      );
    if (pool.idle.length >= pool.size)
      throw new DrumsError('pool_full', `pool '${name}' already holds its ${pool.size} ready member(s); destroy this session or raise the pool's size`, {
        details: { pool: name, size: pool.size },
      });
    this.mgr.armTtl(s, 0);
    s.spec.labels = { ...s.spec.labels, [POOL_LABEL]: pool.name };
    this._made.set(s.id, { pool: pool.name, version: pool.version });
    this._idle.add(s.id);
    pool.idle.push(s.id);
    pool.fill[origin as MemberOrigin]++;
    return this._view(pool);
  }

  /** Stops refilling and waits for refills under way (their sessions are destroyed). */
  async stop(): Promise<void> {
    this._stopped = true;
    for (const p of this._pools.values()) clearTimeout(p.retryTimer);
    while (this._inflight.size) await Promise.allSettled([...this._inflight]);
  }

  private _get(name: string): Pool {
    const p = this._pools.get(name);
    if (!p)
      throw new DrumsError('pool_not_found', `no pool '${String(name).slice(0, 64)}'; list pools with GET /v1/pools or make one with PUT /v1/pools/{name}`, {
        details: { pool: String(name).slice(0, 64) },
      });
    return p;
  }

  private _view(p: Pool): PoolView {
    return {
      name: p.name,
      size: p.size,
      ready: p.idle.length,
      creating: p.creating,
      template: p.template,
      claims: p.claims,
      hits: p.hits,
      misses: p.misses,
      source: p.source,
      ...(p.lastError ? { lastError: p.lastError } : {}),
      filler: p.task ? 'client' : 'daemon',
      ...(p.task ? { task: p.task, fill: { setup: p.fill.setup, forkDisk: p.fill['fork-disk'], forkMemory: p.fill['fork-memory'] } } : {}),
    };
  }

  private _body(p: Pool): Record<string, unknown> {
    return { ...p.template, ttlSeconds: 0, labels: { ...p.spec.labels, [POOL_LABEL]: p.name } };
  }

  private _forget(id: string): void {
    this._made.delete(id);
    if (!this._idle.delete(id)) return;
    for (const p of this._pools.values()) {
      const i = p.idle.indexOf(id);
      if (i >= 0) p.idle.splice(i, 1);
    }
    this._refill();
  }

  /** Destroys a pool's session, hidden until it is gone (the destroyed hook forgets it). */
  private _discard(id: string): void {
    this._idle.add(id);
    this.mgr.destroy(id, 'pool_discard').catch(() => {});
  }

  private _trim(p: Pool): void {
    while (p.idle.length > p.size) this._discard(p.idle.pop()!);
  }

  /** Refills every pool again (after a drain is cancelled). */
  resumeRefills(): void {
    this._refill();
  }

  /** Starts refill creates until every pool has its target (made or being made), within the refill share. */
  private _refill(): void {
    // A draining host makes no new sessions; resumeRefills() starts again when the drain is cancelled.
    if (this._stopped || this.mgr.drainingSince) return;
    for (const p of this._pools.values()) {
      if (p.task) continue; // filled by its filler
      while (!this._stopped && p.idle.length + p.creating < p.size && this._refilling < this.refillConcurrency && !p.retryTimer) {
        if (this.mgr.list().length >= this.mgr.maxSessions) return;
        this._refillOne(p);
      }
    }
  }

  private _refillOne(p: Pool): void {
    p.creating++;
    this._refilling++;
    const t0 = performance.now();
    const version = p.version;
    const job = this.mgr
      .create(this._body(p))
      .then(
        (s) => {
          this._made.set(s.id, { pool: p.name, version });
          const live = this._pools.get(p.name) === p && !this._stopped && p.idle.length < p.size && p.version === version;
          if (!live) {
            this._discard(s.id);
            return;
          }
          p.idle.push(s.id);
          this._idle.add(s.id);
          p.failures = 0;
          p.lastError = undefined;
          this.observers.refill.forEach((f) => f(p.name, (performance.now() - t0) / 1000));
        },
        (e) => {
          p.failures++;
          p.lastError = errorMessage(e);
          const wait = BACKOFF_MS[Math.min(p.failures - 1, BACKOFF_MS.length - 1)]!;
          log('warn', 'pool refill failed', { pool: p.name, error: p.lastError, retryInMs: wait });
          clearTimeout(p.retryTimer);
          p.retryTimer = setTimeout(() => {
            p.retryTimer = undefined;
            this._refill();
          }, wait);
          p.retryTimer.unref();
        },
      )
      .finally(() => {
        p.creating--;
        this._refilling--;
        this._inflight.delete(job);
        this._refill();
      });
    this._inflight.add(job);
  }
}

/** Parses a pool's `task` (what the SDK's `drums osworld pool` sends). */
function parseTask(v: unknown): PoolTask {
  const bad = (field: string, why: string) => new ValidationError(`task.${field}`, why, 'invalid_pool');
  if (!v || typeof v !== 'object' || Array.isArray(v)) throw new ValidationError('task', 'must be {"id", "digest", "apps", "internet"}', 'invalid_pool');
  const t = v as Record<string, unknown>;
  for (const k of Object.keys(t)) if (!['id', 'digest', 'apps', 'internet'].includes(k)) throw bad(k, 'unknown field; allowed: id, digest, apps, internet');
  if (typeof t.id !== 'string' || !TASK_ID_RE.test(t.id)) throw bad('id', "must be the task's id (1-128 of A-Z a-z 0-9 . _ -)");
  if (typeof t.digest !== 'string' || !DIGEST_RE.test(t.digest)) throw bad('digest', "must be the SDK's digest of the task (16-64 hex digits)");
  const apps = t.apps ?? [];
  if (!Array.isArray(apps) || apps.length > 16 || !apps.every((a) => typeof a === 'string' && CMD_RE.test(a)))
    throw bad('apps', 'must be up to 16 command names (e.g. "libreoffice")');
  const internet = t.internet ?? null;
  if (internet !== null && (typeof internet !== 'string' || internet.length > 300))
    throw bad('internet', 'must be null or why the task needs the internet (<= 300 chars)');
  return { id: t.id, digest: t.digest, apps: apps as string[], internet: internet as string | null };
}

/**
 * Refuses a task pool whose task cannot run on this host (422 task_not_runnable, details.reason):
 * an app's command missing from the template's image, or the live internet for a template without
 * egress. The image's rootfs is the daemon's own build output (root-owned, never session-writable);
 * lstat looks at each command without following it.
 */
function checkTaskRunnable(task: PoolTask, spec: SessionSpec, rootfs: string): void {
  const missing = task.apps.filter((cmd) =>
    CMD_DIRS.every((d) => {
      try {
        lstatSync(join(rootfs, d, cmd));
        return false;
      } catch {
        return true;
      }
    }),
  );
  if (missing.length)
    throw new DrumsError(
      'task_not_runnable',
      `task.apps: image '${spec.image}' has no ${missing.map((c) => `'${c}'`).join(', ')} command, so task ${task.id} cannot run here; use an image that has the app`,
      { details: { field: 'task.apps', reason: 'app_missing', missing } },
    );
  if (task.internet && !spec.egress)
    throw new DrumsError(
      'task_not_runnable',
      `task.internet: task ${task.id} needs the internet (${task.internet}) and the template has no egress; set "egress": true on a host that has it`,
      { details: { field: 'task.internet', reason: 'needs_internet' } },
    );
}

/** Pools and their fill, for host reports (GET /v1/host): name, target size, ready and being made. */
export function listPools(pools: PoolManager): { name: string; target: number; ready: number; creating: number }[] {
  return pools.list().map((p) => ({ name: p.name, target: p.size, ready: p.ready, creating: p.creating }));
}
