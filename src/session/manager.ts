import { randomBytes, randomUUID } from 'node:crypto';
import {
  chmodSync,
  closeSync,
  constants,
  copyFileSync,
  fstatSync,
  openSync,
  readSync,
  renameSync,
  mkdirSync,
  writeFileSync,
  existsSync,
  readFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type DaemonConfig, loadConfig } from '../common/config.ts';
import { ConflictError, DrumsError, NotFoundError, SessionCreateError, StepError, errorMessage } from '../common/errors.ts';
import { log } from '../common/log.ts';
import { run } from '../common/exec.ts';
import type { Instance } from '../host/instance.ts';
import { objectNames } from '../host/instance.ts';
import { claimSubnet, createNetwork, deleteNetwork, parsePool, releaseSubnet, type SubnetPool } from '../host/network.ts';
import { addSessionRules, installTable, removeSessionRules, type SessionRules } from '../host/nftables.ts';
import { ROOT_CAPS } from '../host/oci-spec.ts';
import { OciRuntime, detectRuntime } from '../host/oci-runtime.ts';
import { oomKills, releaseCpu, removeCgroup } from '../host/cgroup-fs.ts';
import { mountOverlayRelative, mountRuntimeTmpfs, mountSessionTmpfs, unmountOverlay } from '../host/overlay.ts';
import { makeSessionDisk, unmountSessionDisk } from '../host/disk.ts';
import { removeTree } from '../host/safe-fs.ts';
import {
  checkUidBase,
  claimUidRange,
  HOST_IDS_INOTIFY_INSTANCES,
  lowInotifyForHostIds,
  releaseUidRange,
  shiftOwnership,
  usernsUnavailable,
  type UidRange,
} from '../host/userns.ts';
import { Admission, admissionConfig, diskImagePath, type Capacity } from './admission.ts';
import { defaultSessionCpus } from '../host/resources.ts';
import { identify, isAlive } from '../host/proc.ts';
import { planAdoption, writeRecord, type RecordPhase, type SessionRecord } from './adopt.ts';
import { findImage } from '../image/index.ts';
import { diskRates, parseScreen, parseSpec, POOL_LABEL, type SessionSpec } from './spec.ts';
import { DESKTOP_ENV } from './desktop-user.ts';
import { StatusWatcher } from './status-watcher.ts';
import { runSteps, type Stage, type Step } from './steps.ts';
import { slotOf, type RestoreSeed, type Session } from './session.ts';
import { standbyId, standbySpec, swapIdentity } from './standby.ts';
import { prepareDirs, writeBundle } from './layout.ts';
import { armXCookie, writeXauthority } from './x-auth.ts';

import { sweepInstance } from './sweep.ts';
import { EpisodeStore } from './episodes.ts';
import { makeSessionUserns, prepareLower, removeSessionUserns, usernsPaths } from './userns.ts';

// The record types live in session.ts; importers of the manager keep getting them from here.
export type { Attempt, RestoreSeed, Session, SessionState } from './session.ts';

/** The in-session init ships with the daemon (bound in read-only), so the two always match. */
const SESSION_INIT = fileURLToPath(new URL('../../guest/session-init', import.meta.url));
/** How long a destroyed session's id and reason are remembered (410 session_expired, GET /v1/terminations). */
const TERMINATION_MEMORY_MS = 15 * 60_000;
/** Each session's own tmpfs for /run/drums and /tmp/.X11-unix (sockets, status): small, so no session can fill a shared one. */
const SESSION_RT_BYTES = 16 * 1024 ** 2;
/** How often each session's init is checked for life. */
const LIVENESS_POLL_MS = 500;
const sessionLog = (s: { dir: string }) => join(s.dir, 'disk', 'session.log');
/** How long a session waits before it tries again to make a standby that could not be made. */
const STANDBY_BACKOFF_MS = [1000, 2000, 5000, 15_000, 60_000];

export interface ManagerOptions {
  maxSessions?: number;
  /** Test hook: make create fail at this step (e.g. 'container'). */
  failAtStep?: string;
  /** How many creates/resets may run at once (admission control on small hosts). */
  startConcurrency?: number;
  /** The daemon's config (default: the defaults, no environment). The options above override it. */
  config?: DaemonConfig;
}

export class SessionManager {
  readonly inst: Instance;
  readonly runtime: OciRuntime;
  readonly pool: SubnetPool;
  private readonly _sessions = new Map<string, Session>();
  readonly config: DaemonConfig;
  /** The CPU quota of a spec that sets none, resolved from the config once. */
  readonly defaultCpus: number;
  private readonly _opts: { maxSessions: number; startConcurrency: number; failAtStep?: string };
  private _running = 0;
  /** Memory and disk admission (src/session/admission.ts). */
  readonly admission: Admission;
  /** Recorded episodes (spec `record`; src/session/episodes.ts). */
  readonly episodes: EpisodeStore;
  /**
   * Observers (e.g. the OSWorld endpoints): `ready` after a create succeeds, `destroyed` when a session is gone,
   * `recording` when a generation's episode opens (the episode frames' timer wakes on it).
   */
  readonly hooks: { ready: ((s: Session) => Promise<void>)[]; destroyed: ((id: string) => void)[]; recording: ((s: Session) => void)[] } = {
    ready: [],
    destroyed: [],
    recording: [],
  };
  private readonly _queue: (() => void)[] = [];
  private _poller?: NodeJS.Timeout;
  private _retention?: NodeJS.Timeout;

  constructor(inst: Instance, opts: ManagerOptions = {}) {
    this.inst = inst;
    const config = (this.config = opts.config ?? loadConfig({}));
    this.runtime = new OciRuntime(detectRuntime(inst.runtime), inst.runcRoot);
    this.pool = parsePool(config.subnetPool);
    this.admission = new Admission(inst.stateDir, admissionConfig(config));
    this.defaultCpus = defaultSessionCpus(config.defaultCpus);
    this.episodes = new EpisodeStore(inst.stateDir, {
      sessionBytes: config.episodeSessionMb * 1024 ** 2,
      hostBytes: config.episodeMaxMb * 1024 ** 2,
      keepMs: config.episodeKeepDays * 86_400_000,
      keepCount: config.episodeKeep,
    });
    this._opts = {
      maxSessions: opts.maxSessions ?? config.maxSessions,
      startConcurrency: opts.startConcurrency ?? config.startConcurrency,
      failAtStep: opts.failAtStep ?? config.testFailStep,
    };
  }

  /** Sweeps what a previous daemon of this instance left, then installs the firewall table. */
  async init(): Promise<void> {
    if (this.config.userns) this._checkUserns();
    else this._warnHostIds('DRUMS_USERNS=0');
    // Adopt the live sessions a previous daemon of this instance left; sweep everything else of it.
    const plan = await planAdoption(this.inst, this.runtime);
    await sweepInstance(this.inst, { keep: plan.adopt.map((r) => ({ id: r.slot ?? r.id, names: r.names, egress: r.spec.egress })) });
    mkdirSync(this.inst.sessionsDir, { recursive: true, mode: 0o700 });
    // Search-only for all: a memory fork's CRIU, as the copy's root in its user namespace, reaches the
    // rootfs runc mounts for it in the container's state directory (runc makes those 0711 too).
    mkdirSync(this.inst.runcRoot, { recursive: true, mode: 0o711 });
    chmodSync(this.inst.runcRoot, 0o711);
    // Bound directories live on the instance's own tmpfs, so a session's
    // /proc/self/mountinfo shows `/<id>/run`, never a host path.
    mkdirSync(this.inst.rtDir, { recursive: true, mode: 0o711 });
    await mountRuntimeTmpfs(`drums-${this.inst.name}-rt`, this.inst.rtDir);
    // A new file, renamed into place: adopted sessions keep the inode they have bound.
    copyFileSync(SESSION_INIT, join(this.inst.rtDir, '.session-init.new'));
    chmodSync(join(this.inst.rtDir, '.session-init.new'), 0o755);
    renameSync(join(this.inst.rtDir, '.session-init.new'), join(this.inst.rtDir, 'session-init'));
    await installTable(this.inst);
    this.episodes.init();
    for (const rec of plan.adopt) await this._adopt(rec);
    // Episodes whose session did not survive the restart are closed (reason `swept`); adopted ones recorded on.
    this.episodes.closeOrphans(new Set(plan.adopt.map((r) => r.id)));
    // Retention (DRUMS_EPISODE_KEEP_DAYS, DRUMS_EPISODE_KEEP): now, then every 5 minutes.
    this.episodes.retain();
    this._retention = setInterval(() => this.episodes.retain(), 5 * 60_000);
    this._retention.unref();
    const adopted = new Set(plan.adopt.map((r) => r.id));
    for (const { id, why, standby } of plan.swept) {
      // A standby, or the old generation of an adopted session a reset by standby was recycling: no session ended.
      if (standby || adopted.has(id)) {
        log('info', 'host objects swept at daemon start', { id, why });
        continue;
      }
      log('warn', 'session swept at daemon start', { id, why });
      this._recordTermination(id, `swept at daemon start: ${why}`);
    }
    if (plan.adopt.length) log('info', 'sessions adopted', { ids: plan.adopt.map((r) => r.id) });
    // Standbys are not adopted (src/session/standby.ts): the adopted sessions that keep some make new ones.
    for (const s of this._sessions.values()) this._fillStandbys(s);
    // Liveness of every session: its init's PID and start time (the init is the PID namespace's
    // init: when it is gone, so is every process of the session).
    this._poller = setInterval(() => {
      for (const s of this._sessions.values()) if (s.init && s.state === 'ready' && !isAlive(s.init)) this._onSessionExit(s, s.generation);
    }, LIVENESS_POLL_MS);
    this._poller.unref();
  }

  private _warnedHostIds = false;
  /** Once per daemon: sessions with host ids share uid 1000's inotify budget, which the kernel's default keeps small. */
  private _warnHostIds(why: string): void {
    const value = lowInotifyForHostIds();
    if (this._warnedHostIds || value === undefined) return;
    this._warnedHostIds = true;
    log(
      'warn',
      `sessions without a user namespace (${why}) share host uid 1000's inotify instances; fs.inotify.max_user_instances=${value} holds about ${Math.floor(value / 3)} of them: raise it to ${HOST_IDS_INOTIFY_INSTANCES} or more (docs/security.md), or give sessions their user namespace`,
      { value },
    );
  }

  /** Refuses user-namespace sessions on a host that cannot make them, with what to do. */
  private _checkUserns(): void {
    const why = usernsUnavailable();
    if (why) throw new DrumsError('invalid_config', `user-namespace sessions (DRUMS_USERNS or spec userns) are unavailable: ${why}`);
    checkUidBase(this.config.usernsUidBase);
  }

  /** Sessions adopted at start, for the `ready` hooks the daemon registers after init. */
  async announceAdopted(): Promise<void> {
    for (const s of this.list().filter((x) => x.adopted)) {
      for (const h of this.hooks.ready) await h(s).catch((e) => log('warn', 'session ready hook failed', { id: s.id, error: errorMessage(e) }));
    }
  }

  private async _adopt(rec: SessionRecord): Promise<void> {
    const slot = rec.slot ?? rec.id;
    const s: Session = {
      id: rec.id,
      state: 'ready',
      spec: rec.spec,
      generation: rec.generation,
      attempt: rec.attempt,
      createdAt: rec.createdAt,
      subnet: rec.subnet,
      ...(rec.uids ? { uids: rec.uids } : {}),
      names: rec.names,
      ...(rec.slot ? { slot: rec.slot } : {}),
      dir: join(this.inst.sessionsDir, slot),
      runDir: join(this.inst.rtDir, slot, 'run'),
      x11Socket: join(this.inst.rtDir, slot, 'x11', 'X0'),
      ...(rec.xCookie ? { xCookie: rec.xCookie } : {}),
      busSocket: join(this.inst.rtDir, slot, 'run', 'bus'),
      imageDir: rec.imageDir,
      initPid: rec.init!.pid,
      init: rec.init,
      adopted: true,
      timings: {},
    };
    this._sessions.set(s.id, s);
    this._openEpisode(s);
    await addSessionRules(this.inst, {
      hostVeth: s.names.hostVeth,
      gateway: s.subnet.gateway,
      address: s.subnet.address,
      hostPorts: s.spec.hostPorts,
      egress: s.spec.egress,
    });
    if (s.spec.ttlSeconds > 0) this._armTtl(s, Date.parse(s.createdAt) + s.spec.ttlSeconds * 1000 - Date.now());
  }

  private _armTtl(s: Session, ms: number): void {
    s._ttlTimer = setTimeout(
      () => {
        log('info', 'session ttl expired', { id: s.id });
        this.destroy(s.id, 'ttl_expired').catch(() => {});
      },
      Math.max(0, ms),
    );
    s._ttlTimer.unref();
  }

  /** How many more default sessions memory and disk admission would allow now, with the numbers behind it. */
  capacity(): Capacity {
    return this.admission.capacity(this._admissionView());
  }

  private _admissionView() {
    return [...this.list(), ...this._husks].map((s) => ({ state: s.state, spec: s.spec, diskImage: diskImagePath(s.dir) }));
  }

  /** Old generations a reset by standby swapped out, being torn down (they hold memory and disk until gone). */
  private readonly _husks = new Set<Session>();

  list(): Session[] {
    return [...this._sessions.values()];
  }

  /** Set while the host drains (POST /v1/host/drain): no new sessions, pool refills included, until cancelled. */
  drainingSince: string | undefined;

  /** The most sessions this daemon holds at once (DRUMS_MAX_SESSIONS). */
  get maxSessions(): number {
    return this._opts.maxSessions;
  }

  /**
   * Ids a feature above the registry holds back from clients while it owns them: a warm pool's
   * idle sessions, and ones it is resetting back into the pool or discarding (pools.ts).
   */
  readonly heldBack = new Set<string>();

  /**
   * Whether clients see this session: not one held back, nor one a warm pool is still making
   * (creating, with the pool label). A claimed session, or one a restarted daemon adopted, is
   * visible like any other.
   */
  visible(s: Session): boolean {
    if (s.standbyOf) return false;
    return !this.heldBack.has(s.id) && !(s.state === 'creating' && POOL_LABEL in s.spec.labels);
  }

  /** The session a client names: as `get`, and 404 for one clients do not see (`visible`). */
  lookup(id: string): Session {
    const s = this.get(id);
    if (!this.visible(s)) throw new NotFoundError('session_not_found', `no session '${id}'; list sessions with GET /v1/sessions`);
    return s;
  }

  /** Throws 409 session_resetting / session_broken unless the session is ready. */
  requireReady(s: Session): void {
    if (s.state === 'resetting') throw new ConflictError('session_resetting', `session ${s.id} is resetting; retry with the new generation`);
    if (s.state !== 'ready') throw new ConflictError('session_broken', `session ${s.id} is ${s.state}${s.brokenReason ? `: ${s.brokenReason}` : ''}`);
  }

  get(id: string): Session {
    const s = this._sessions.get(id);
    const gone = s ? undefined : this.terminations.find((t) => t.id === id && t.reason === 'ttl_expired');
    if (gone && Date.now() - Date.parse(gone.terminatedAt) < TERMINATION_MEMORY_MS) {
      throw new DrumsError('session_expired', `session '${id}' reached its ttlSeconds and was destroyed at ${gone.terminatedAt}`, { details: { ...gone } });
    }
    if (!s) throw new NotFoundError('session_not_found', `no session '${id}'; list sessions with GET /v1/sessions`);
    return s;
  }

  private async _admit<T>(fn: () => Promise<T>): Promise<T> {
    if (this._running >= this._opts.startConcurrency) await new Promise<void>((r) => this._queue.push(r));
    this._running++;
    try {
      return await fn();
    } finally {
      this._running--;
      this._queue.shift()?.();
    }
  }

  /**
   * Creates a session. `signal` (the client's request, or a deadline: AbortSignal.timeout)
   * stops the create between steps and in the readiness wait, and undoes what was done.
   */
  /**
   * The spec a create of `body` would record: parsed, with the daemon's defaults (userns, disk
   * bandwidth, the image's screen). Throws what a create would for a bad body or an unbuilt image.
   * A task pool compares a member's spec with its template's through this (src/pools/pools.ts).
   */
  effectiveSpec(body: unknown): SessionSpec {
    return this._effectiveSpec(body).spec;
  }

  /** `parsed`: a spec already parsed (a standby's is its owner's), used instead of parsing `body`. */
  private _effectiveSpec(body: unknown, parsed?: SessionSpec): { spec: SessionSpec; image: NonNullable<ReturnType<typeof findImage>> } {
    const spec = parsed ?? parseSpec(body, this.defaultCpus);
    spec.userns ??= this.config.userns;
    // The daemon's disk bandwidth limits, unless the spec asks for less (admission refuses more); kept in the record.
    if (spec.diskReadMbps === undefined && this.config.diskReadMbps > 0) spec.diskReadMbps = this.config.diskReadMbps;
    if (spec.diskWriteMbps === undefined && this.config.diskWriteMbps > 0) spec.diskWriteMbps = this.config.diskWriteMbps;
    // Validate before any side effect.
    const image = findImage(spec.image, { imagesDir: this.inst.imagesDir });
    if (!image) {
      throw new DrumsError('image_not_built', `image '${spec.image}' is not built yet; run 'drums image build ${spec.image}'`, { details: { field: 'image' } });
    }
    // An image may set the default screen (recipe env DRUMS_DEFAULT_SCREEN, e.g. osworld: 1920x1080x24).
    const imageScreen = image.manifest.env?.DRUMS_DEFAULT_SCREEN;
    if (imageScreen && (body as { screen?: unknown } | null | undefined)?.screen === undefined) spec.screen = parseScreen(imageScreen, 'image screen');
    return { spec, image };
  }

  async create(
    body: unknown,
    opts: { seedUpper?: string; seedBase?: number; restore?: RestoreSeed; signal?: AbortSignal; standbyOf?: Session } = {},
  ): Promise<Session> {
    const { signal, standbyOf } = opts;
    // A standby's spec is its owner's, already parsed (src/session/standby.ts).
    const { spec, image } = this._effectiveSpec(body, standbyOf ? standbySpec(standbyOf) : undefined);
    if (spec.userns && !this.config.userns) this._checkUserns();
    if (!spec.userns) this._warnHostIds('spec userns false');
    if (this._sessions.size >= this._opts.maxSessions) {
      throw new DrumsError('pool_exhausted', `this daemon holds at most ${this._opts.maxSessions} sessions (DRUMS_MAX_SESSIONS); destroy one first`);
    }
    this.admission.check(spec, this._admissionView());
    const id = standbyOf
      ? standbyId(standbyOf, (x) => this._sessions.has(x) || existsSync(join(this.inst.sessionsDir, x)))
      : 's' + randomBytes(5).toString('hex');
    const subnet = claimSubnet(this.inst, this.pool, id);
    let uids: UidRange | undefined;
    try {
      uids = spec.userns ? claimUidRange(this.inst, this.config.usernsUidBase, id) : undefined;
    } catch (e) {
      releaseSubnet(this.inst, subnet);
      throw e;
    }
    const names = objectNames(this.inst, id, subnet.slot);
    const dir = join(this.inst.sessionsDir, id);
    const s: Session = {
      id,
      state: 'creating',
      spec,
      generation: 1,
      attempt: { generation: 1, token: randomUUID() },
      createdAt: new Date().toISOString(),
      subnet,
      ...(uids ? { uids } : {}),
      names,
      dir,
      runDir: join(this.inst.rtDir, id, 'run'),
      x11Socket: join(this.inst.rtDir, id, 'x11', 'X0'),
      busSocket: join(this.inst.rtDir, id, 'run', 'bus'),
      imageDir: image.rootfs,
      timings: {},
      _seedUpper: opts.seedUpper,
      _seedBase: opts.seedBase,
      _restore: opts.restore,
      ...(standbyOf ? { standbyOf: standbyOf.id } : {}),
    };
    this._sessions.set(id, s);
    const t0 = performance.now();
    const rules: SessionRules = { hostVeth: names.hostVeth, gateway: subnet.gateway, address: subnet.address, hostPorts: spec.hostPorts, egress: spec.egress };
    const [rootfs, bundle, ...rest] = this._startSteps(s, signal);
    const stages: Stage[] = [
      // The record comes first: the sweep finds every object below through it or its name.
      {
        name: 'record',
        do: async () => this._record(s, 'creating'),
        undo: async () => {
          await removeTree(dir);
          await removeTree(join(this.inst.rtDir, id));
        },
      },
      // A user namespace first: the network namespace is made with it (owned by it), and the image is seen through its mapping.
      ...(uids ? [{ name: 'userns', do: () => makeSessionUserns(uids, dir, names.netns), undo: () => removeSessionUserns(dir, names.netns) }] : []),
      // The network and the root filesystem don't depend on each other: make them concurrently.
      [
        [
          {
            name: 'network',
            do: () => createNetwork(names.netns, names.hostVeth, subnet, { existingNetns: !!uids }),
            undo: () => deleteNetwork(names.netns, names.hostVeth),
          },
          { name: 'firewall', do: () => addSessionRules(this.inst, rules), undo: () => removeSessionRules(this.inst, rules) },
          {
            name: 'egress',
            do: async () => {
              if (spec.egress) await this._enableForwarding();
            },
          },
        ],
        [rootfs!, bundle!],
      ],
      ...rest,
    ];
    // Test hooks (only with DRUMS_TEST_HOOKS=1): label drums.test.failStep injects a failure,
    // drums.test.killAtStep kills the daemon (SIGKILL) right after that step.
    const hooks = this.config.testHooks;
    const result = await this._admit(() =>
      runSteps(stages, {
        op: 'create',
        signal,
        timings: s.timings,
        timingPrefix: 'step.',
        failAt: this._opts.failAtStep ?? (hooks ? spec.labels['drums.test.failStep'] : undefined),
        killAt: hooks ? spec.labels['drums.test.killAtStep'] : undefined,
      }),
    ).catch((e: unknown) => ({ ok: false as const, error: e, undo: async () => [] as string[] }));
    if (!result.ok) {
      // Undone outside the start slot; with DRUMS_DEBUG_KEEP_FAILED left for inspection (sweep removes it).
      const cleanupErrors = this.config.debugKeepFailed ? [] : await result.undo();
      this._closeGeneration(s);
      releaseSubnet(this.inst, subnet);
      if (uids) releaseUidRange(this.inst, uids);
      this._sessions.delete(id);
      const err = new SessionCreateError(result.error, cleanupErrors);
      log('warn', 'session create failed', { id, step: err.step, error: errorMessage(err.cause), cleanupErrors });
      throw err;
    }
    s.timings.createMs = performance.now() - t0;
    s.state = 'ready';
    this._record(s, 'ready');
    // A standby is nobody's session yet: no episode, TTL, endpoints (the ready hooks) or standbys of its own.
    if (standbyOf) return s;
    this._openEpisode(s);
    this.armTtl(s, spec.ttlSeconds);
    this._fillStandbys(s);
    for (const h of this.hooks.ready) await h(s).catch((e) => log('warn', 'session ready hook failed', { id, error: errorMessage(e) }));
    return s;
  }

  /** Restarts a session's TTL from now (0 = none): a claim from a warm pool (src/pools/pools.ts). */
  armTtl(s: Session, ttlSeconds: number): void {
    clearTimeout(s._ttlTimer);
    s._ttlTimer = undefined;
    if (ttlSeconds > 0) this._armTtl(s, ttlSeconds * 1000);
  }

  /** Steps shared by create and reset: fresh upper layer, bundle, container, readiness (which `signal` cuts short). */
  private _startSteps(s: Session, signal?: AbortSignal): Step[] {
    const rootfs = join(s.dir, 'bundle', 'rootfs');
    return [
      {
        name: 'rootfs',
        do: async () => {
          // The writable layer lives on the session's own filesystem (its disk quota), and
          // /run/drums and /tmp/.X11-unix on its own small tmpfs: a fresh one of each per generation.
          s._disk = await makeSessionDisk(diskImagePath(s.dir), join(s.dir, 'disk'), s.spec.diskBytes, diskRates(s.spec, this.config).writeBytesPerSecond);
          await unmountOverlay(join(this.inst.rtDir, slotOf(s)));
          mkdirSync(join(this.inst.rtDir, slotOf(s)), { recursive: true, mode: 0o711 });
          await mountSessionTmpfs(`drums-${this.inst.name}-rt`, join(this.inst.rtDir, slotOf(s)), SESSION_RT_BYTES);
          await prepareLower(s.uids, s.dir, s.imageDir);
          prepareDirs(this.inst, s);
          armXCookie(s);
          // A disk fork starts from a copy of its source's writable layer (identity files removed: written above),
          // re-owned from the source's uid range to this session's.
          if (s._seedUpper) {
            await run(['cp', '-a', '--reflink=auto', `${s._seedUpper}/.`, join(s.dir, 'disk', 'upper')], { timeoutMs: 300_000 });
            await shiftOwnership(join(s.dir, 'disk', 'upper'), s._seedBase ?? 0, s.uids?.base ?? 0);
          }
          s._seedUpper = undefined;
          await s._restore?.seed(s);
          // After the seed: a memory fork's copy of the source's run directory has the source's file.
          writeXauthority(s);
          // Relative layer paths: the session can read its root's mount options.
          await mountOverlayRelative(s.names.overlaySource, s.dir, 'lower', 'disk/upper', 'disk/work', rootfs);
        },
        undo: async () => {
          await unmountOverlay(rootfs);
          await unmountOverlay(join(this.inst.rtDir, slotOf(s)));
          await unmountSessionDisk(diskImagePath(s.dir), join(s.dir, 'disk'));
        },
      },
      { name: 'bundle', do: async () => writeBundle(this.inst, this.config, s) },
      {
        name: 'container',
        do: async () => {
          this._closeGeneration(s);
          const watcher = new StatusWatcher(join(s.runDir, 'status'));
          s._watcher = watcher;
          // A status file the session tampered with (over its budget, a hole): that session alone is broken.
          const generation = s.generation;
          watcher.on('fail', (why: string) => this.markBroken(s, generation, why));
          const t = performance.now();
          const restore = s._restore;
          s._restore = undefined;
          let started: { pid: number };
          try {
            started = restore
              ? await restore.start(s, join(s.dir, 'bundle'), sessionLog(s))
              : await this.runtime.start(s.names.container, join(s.dir, 'bundle'), sessionLog(s));
          } catch (e) {
            // A failed step's own undo does not run (runSteps undoes the completed ones): a restore that
            // failed after runc made the container (CRIU restored its processes, then setting the copy's
            // hostname failed) would leave it running. Removed here; nothing there is fine.
            await this.runtime.destroy(s.names.container).catch((d) => log('warn', 'a failed start left its container', { id: s.id, error: errorMessage(d) }));
            throw e;
          }
          s.initPid = started.pid;
          s.init = identify(started.pid);
          s.timings.runtimeStartMs = performance.now() - t;
        },
        undo: () => this.runtime.destroy(s.names.container),
      },
      {
        name: 'ready',
        do: async () => {
          const t = performance.now();
          const w = s._watcher!;
          const stages = ['x', 'dbus', 'a11y', 'wm'];
          try {
            await w.waitFor(stages, this.config.readyTimeoutMs, signal);
            s.timings.desktopReadyMs = Math.max(...stages.map((st) => w.marks.get(st)!)) - t;
            if (s.spec.url) {
              await w.waitFor(['browser'], this.config.readyTimeoutMs, signal);
              s.timings.browserReadyMs = w.marks.get('browser')! - t;
            }
          } catch (e) {
            // The session's own log says why (Xvfb, D-Bus and Chromium write there).
            const tail = [sessionLog(s), join(s.runDir, 'log')]
              .flatMap((f) => readTail(f))
              .slice(-6)
              .join(' | ');
            throw new Error(`${errorMessage(e)}${tail ? `; session log: ${tail}` : ''}`);
          }
        },
      },
    ];
  }

  /** The session's record: every object it names, and the phase a restarting daemon judges it by (src/session/adopt.ts). */
  private _record(s: Session, phase: RecordPhase): void {
    mkdirSync(s.dir, { recursive: true, mode: 0o700 });
    writeRecord(s.dir, {
      id: s.id,
      instance: this.inst.name,
      phase,
      createdAt: s.createdAt,
      subnet: s.subnet,
      names: s.names,
      ...(s.slot ? { slot: s.slot } : {}),
      ...(s.standbyOf ? { standbyOf: s.standbyOf } : {}),
      mounts: [
        join(s.dir, 'bundle', 'rootfs'),
        join(s.dir, 'disk'),
        join(this.inst.rtDir, slotOf(s)),
        ...(s.uids ? [usernsPaths(s.dir).pin, usernsPaths(s.dir).lower] : []),
      ],
      ...(s.uids ? { uids: s.uids } : {}),
      spec: s.spec,
      generation: s.generation,
      attempt: s.attempt,
      imageDir: s.imageDir,
      ...(s.init ? { init: s.init } : {}),
      ...(s.xCookie ? { xCookie: s.xCookie } : {}),
    });
  }

  /** Starts recording the session's current generation, if its spec asks (`record`). */
  private _openEpisode(s: Session): void {
    if (!s.spec.record) return;
    s._episode = this.episodes.open(s.id, s.generation, s.spec.record);
    for (const h of this.hooks.recording) h(s);
  }

  private async _closeEpisode(s: Session, reason: string): Promise<void> {
    if (!s._episode) return;
    s._episode = undefined;
    await this.episodes.close(s.id, s.generation, reason);
  }

  /** The environment every process in a session sees (init and exec alike): DESKTOP_ENV. */
  sessionEnv(): Record<string, string> {
    return { ...DESKTOP_ENV };
  }

  private _closeGeneration(s: Session): void {
    s._watcher?.close();
    s._watcher = undefined;
  }

  private _onSessionExit(s: Session, generation: number): void {
    this.markBroken(s, generation, "the session's processes exited (its X server or init died)");
  }

  /** A ready session of this generation lost its processes or its X server: it is `broken` until reset or destroyed. */
  markBroken(s: Session, generation: number, reason: string): void {
    if (s.generation !== generation || s.state !== 'ready') return;
    s.state = 'broken';
    const ooms = oomKills(s.names.cgroup);
    s.brokenReason =
      ooms > 0
        ? `${reason}: the session hit its memory limit (${s.spec.memoryBytes / 1024 ** 2} MiB) and the kernel OOM-killed ${ooms} of its processes; reset or destroy it (or give it a larger memoryMb)`
        : `${reason}; reset or destroy it`;
    log('warn', 'session broken', { id: s.id, reason, oomKills: ooms });
  }

  private async _stopContainer(s: Session): Promise<void> {
    this._closeGeneration(s);
    // A demoted session's processes would die at its CPU cap.
    releaseCpu(s.names.cgroup);
    await this.runtime.destroy(s.names.container);
    await unmountOverlay(join(s.dir, 'bundle', 'rootfs'));
  }

  /**
   * Resets a session to a fresh generation. `signal` stops the reset between steps and in the
   * readiness wait; the session is then broken (reset it again, or destroy it).
   */
  async reset(id: string, opts: { signal?: AbortSignal } = {}): Promise<Session> {
    const { signal } = opts;
    const s = this.get(id);
    if (s.state === 'resetting' || s.state === 'creating' || s.state === 'destroying') {
      throw new ConflictError('session_busy', `session '${id}' is ${s.state}; wait for it to finish`);
    }
    s.state = 'resetting';
    // The attempt ends here: its episode is closed before the next one's first event.
    await this._closeEpisode(s, 'reset');
    s.generation += 1;
    s.attempt = { generation: s.generation, token: randomUUID() };
    const sb = this._takeStandby(s);
    if (sb) return this._resetByStandby(s, sb);
    // Test hook (DRUMS_TEST_HOOKS=1): label drums.test.killAtResetStep kills the daemon right after that step.
    const killAt = this.config.testHooks ? s.spec.labels['drums.test.killAtResetStep'] : undefined;
    const t0 = performance.now();
    // The same steps as a create's second half, after the old generation's container stops; not
    // undone on failure: the session is then broken (reset it again, or destroy it).
    const stages: Stage[] = [{ name: 'stop', do: () => this._stopContainer(s), notCancellable: true }, ...this._startSteps(s, signal)];
    const result = await (async () => {
      this._record(s, 'resetting');
      return this._admit(() => runSteps(stages, { op: 'reset', signal, timings: s.timings, timingPrefix: 'reset.', killAt }));
    })().catch((e: unknown) => ({ ok: false as const, error: e, steps: [] }));
    if (!result.ok) {
      const e = result.error;
      const step = e instanceof StepError ? e.step : 'stop';
      const cause = e instanceof StepError ? e.cause : e;
      s.state = 'broken';
      s.brokenReason = `reset failed at step '${step}': ${errorMessage(cause)}`;
      throw new DrumsError('session_reset_failed', s.brokenReason, {
        cause,
        details: { step, steps: result.steps, ...(cause instanceof DrumsError ? { causeCode: cause.code } : {}) },
      });
    }
    s.timings.resetMs = performance.now() - t0;
    delete s.timings['reset.standbyMs'];
    s.state = 'ready';
    s.adopted = false;
    this._record(s, 'ready');
    this._openEpisode(s);
    this._fillStandbys(s);
    return s;
  }

  /**
   * A reset served by a standby (src/session/standby.ts): the standby's host objects become the
   * session's new generation, the old ones a husk torn down behind the answer.
   */
  private async _resetByStandby(s: Session, sb: Session): Promise<Session> {
    const t0 = performance.now();
    // A daemon killed from here on finds the old generation's record 'resetting' (swept) and, once the
    // next line but one has run, the session's record in the standby's directory (adopted).
    this._record(s, 'resetting');
    this._sessions.delete(sb.id);
    const husk = swapIdentity(s, sb);
    // The status file's complaints now concern this session's new generation.
    const generation = s.generation;
    s._watcher?.removeAllListeners('fail');
    s._watcher?.on('fail', (why: string) => this.markBroken(s, generation, why));
    this._record(s, 'ready');
    for (const k of Object.keys(s.timings)) if (k.startsWith('reset.')) delete s.timings[k];
    s.timings['reset.standbyMs'] = s.timings.resetMs = performance.now() - t0;
    s.state = 'ready';
    s.adopted = false;
    this._openEpisode(s);
    // After the answer is on its way: the teardown and the next standby's create start with
    // synchronous work (and spawn runc, ip, umount) that would otherwise delay it.
    this._recycle(s, husk);
    setImmediate(() => this._fillStandbys(s));
    log('info', 'session reset by standby', { id: s.id, generation, slot: s.slot, recycled: husk.id });
    return s;
  }

  /** A ready standby of `s` (its init alive), out of its list; a dead one found on the way is destroyed. */
  private _takeStandby(s: Session): Session | undefined {
    const st = s._standby;
    while (st?.ready.length) {
      const sb = this._sessions.get(st.ready.shift()!);
      if (!sb) continue;
      if (sb.state === 'ready' && sb.init && isAlive(sb.init)) return sb;
      this._track(
        s,
        this.destroy(sb.id, 'standby_broken').catch(() => {}),
      );
    }
    return undefined;
  }

  /** Work on a session's behalf (a standby's make, a husk's teardown) its destroy waits for. */
  private _track(s: Session, p: Promise<unknown>): void {
    const st = (s._standby ??= { ready: [], making: 0, failures: 0, pending: new Set() });
    st.pending.add(p);
    void p.finally(() => st.pending.delete(p));
  }

  /** Tears the old generation's objects down in the background, as a destroy does. */
  private _recycle(s: Session, husk: Session): void {
    this._husks.add(husk);
    // Tracked now (a destroy right after the reset waits for it), started once the answer is out.
    this._track(
      s,
      new Promise((r) => setImmediate(r))
        .then(() => this._teardown(husk))
        .then((errors) => {
          if (errors.length) log('warn', 'recycling an old generation left errors', { id: s.id, slot: husk.id, errors });
        })
        .finally(() => this._husks.delete(husk)),
    );
  }

  /** Makes standbys until `s` has its spec's number (ready or being made); a failure retries with backoff. */
  private _fillStandbys(s: Session): void {
    const want = s.spec.standbys ?? 0;
    if (!want || s.standbyOf || s.state === 'destroying' || this.drainingSince) return;
    const st = (s._standby ??= { ready: [], making: 0, failures: 0, pending: new Set() });
    const retry = (why: string) => {
      st.failures++;
      st.lastError = why;
      const wait = STANDBY_BACKOFF_MS[Math.min(st.failures - 1, STANDBY_BACKOFF_MS.length - 1)]!;
      log('warn', 'standby could not be made', { id: s.id, error: why, retryInMs: wait });
      st.retryTimer = setTimeout(() => {
        st.retryTimer = undefined;
        this._fillStandbys(s);
      }, wait);
      st.retryTimer.unref();
    };
    while (st.ready.length + st.making < want && !st.retryTimer) {
      if (this._sessions.size >= this._opts.maxSessions) {
        retry(`this daemon holds at most ${this._opts.maxSessions} sessions, standbys included (DRUMS_MAX_SESSIONS)`);
        return;
      }
      st.making++;
      const job = this.create(undefined, { standbyOf: s }).then(
        async (sb) => {
          st.making--;
          if (this._sessions.get(s.id) !== s || s.state === 'destroying') {
            await this.destroy(sb.id, 'standby_unneeded').catch(() => {});
            return;
          }
          st.ready.push(sb.id);
          st.failures = 0;
          st.lastError = undefined;
          this._fillStandbys(s);
        },
        (e: unknown) => {
          st.making--;
          if (this._sessions.get(s.id) !== s || s.state === 'destroying') return;
          retry(errorMessage(e));
        },
      );
      this._track(s, job);
    }
  }

  /** Makes the standbys every session lacks (after a drain is cancelled: a draining host makes none). */
  resumeStandbys(): void {
    for (const s of this._sessions.values()) this._fillStandbys(s);
  }

  /** Ends a session's standbys and waits for the work done on its behalf (standby makes, recycles). */
  private async _endStandbys(s: Session): Promise<void> {
    const st = s._standby;
    if (!st) return;
    clearTimeout(st.retryTimer);
    st.retryTimer = undefined;
    // Makes under way destroy their standby when they see the session destroying.
    while (st.ready.length || st.pending.size) {
      for (const id of st.ready.splice(0))
        this._track(
          s,
          this.destroy(id, 'standby_unneeded').catch(() => {}),
        );
      await Promise.allSettled([...st.pending]);
    }
  }

  async destroy(id: string, reason = 'requested'): Promise<void> {
    const s = this.get(id);
    if (s.state === 'destroying') throw new ConflictError('session_busy', `session '${id}' is already being destroyed`);
    s.state = 'destroying';
    clearTimeout(s._ttlTimer);
    await this._closeEpisode(s, 'destroy');
    const t0 = performance.now();
    await this._endStandbys(s);
    const errors = await this._teardown(s);
    this._sessions.delete(id);
    for (const h of this.hooks.destroyed) {
      try {
        h(id);
      } catch {}
    }
    if (!s.standbyOf) this._recordTermination(id, reason);
    log('info', 'session destroyed', { id, reason, ms: Math.round(performance.now() - t0) });
    if (errors.length) throw new DrumsError('session_destroy_incomplete', `destroy left errors: ${errors.join('; ')}; run 'drums sweep'`);
  }

  /** Removes every host object a session (or a reset's recycled old generation) holds, and releases its claims; returns what failed. */
  private async _teardown(s: Session): Promise<string[]> {
    const errors: string[] = [];
    const attempt = async (what: string, fn: () => Promise<void> | void) => {
      try {
        await fn();
      } catch (e) {
        errors.push(`${what}: ${errorMessage(e)}`);
      }
    };
    await attempt('container', () => this._stopContainer(s));
    await attempt('firewall', () =>
      removeSessionRules(this.inst, {
        hostVeth: s.names.hostVeth,
        gateway: s.subnet.gateway,
        address: s.subnet.address,
        hostPorts: s.spec.hostPorts,
        egress: s.spec.egress,
      }),
    );
    await attempt('network', () => deleteNetwork(s.names.netns, s.names.hostVeth));
    if (s.uids) await attempt('userns', () => removeSessionUserns(s.dir, s.names.netns));
    await attempt('cgroup', () => removeCgroup(s.names.cgroup));
    await attempt('disk', () => unmountSessionDisk(diskImagePath(s.dir), join(s.dir, 'disk')));
    await attempt('runtime dir', () => unmountOverlay(join(this.inst.rtDir, slotOf(s))));
    // In a child process that follows no link and crosses no mount left behind (src/host/safe-fs.ts).
    await attempt('files', async () => {
      await removeTree(s.dir);
      await removeTree(join(this.inst.rtDir, slotOf(s)));
    });
    releaseSubnet(this.inst, s.subnet);
    if (s.uids) releaseUidRange(this.inst, s.uids);
    return errors;
  }

  /** Sessions destroyed in the last TERMINATION_MEMORY_MS (newest last, at most 256), with why. */
  readonly terminations: { id: string; reason: string; terminatedAt: string }[] = [];

  private _recordTermination(id: string, reason: string): void {
    const cutoff = Date.now() - TERMINATION_MEMORY_MS;
    while (this.terminations.length && (this.terminations.length >= 256 || Date.parse(this.terminations[0]!.terminatedAt) < cutoff)) this.terminations.shift();
    this.terminations.push({ id, reason, terminatedAt: new Date().toISOString() });
  }

  /** Lets go of every session without touching it (the daemon stops and keeps them for the next one). */
  detach(): void {
    clearInterval(this._poller);
    clearInterval(this._retention);
    for (const s of this._sessions.values()) {
      clearTimeout(s._ttlTimer);
      clearTimeout(s._standby?.retryTimer);
      this._closeGeneration(s);
    }
  }

  async shutdown(): Promise<void> {
    clearInterval(this._poller);
    clearInterval(this._retention);
    // Owners first: each destroy takes its standbys with it.
    for (const s of this.list().sort((a, b) => Number(!!a.standbyOf) - Number(!!b.standbyOf))) {
      if (this._sessions.has(s.id)) await this.destroy(s.id, 'daemon shutdown').catch(() => {});
    }
  }

  /** Enables IPv4 forwarding for egress sessions, recording the old value for the sweep. */
  private async _enableForwarding(): Promise<void> {
    const path = '/proc/sys/net/ipv4/ip_forward';
    if (readFileSync(path, 'utf8').trim() === '1') return;
    const rec = join(this.inst.stateDir, 'ip_forward.orig');
    if (!existsSync(rec)) writeFileSync(rec, '0\n');
    writeFileSync(path, '1\n');
  }

  /** Capabilities used for a root-in-session exec. */
  static rootCaps(): string[] {
    return ROOT_CAPS;
  }
}

/** The last lines of a log file, never through a symlink (the session's processes write /run/drums/log). */
function readTail(path: string, lines = 6): string[] {
  let fd: number | undefined;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
    const st = fstatSync(fd);
    if (!st.isFile()) return [];
    const size = st.size;
    const buf = Buffer.alloc(Math.min(size, 16 * 1024));
    readSync(fd, buf, 0, buf.length, Math.max(0, size - buf.length));
    return buf.toString('utf8').trim().split('\n').slice(-lines).filter(Boolean);
  } catch {
    return [];
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}
