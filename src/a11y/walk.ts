// The tree walk: from the registry's desktop, all calls of a node and all children in flight at once.
//
// Per node, phase 1 (concurrent): Properties.GetAll(Accessible) for Name/Description/ChildCount, GetRole,
// GetState, GetAttributes, GetInterfaces. Phase 2 (concurrent, depends on phase 1): GetExtents, GetText,
// Value GetAll, GetActions, GetRoleName (only for roles outside the enum), and the children, which start
// their own phase 1 as soon as the child list arrives.
//
// Properties.GetAll is asked only of applications whose toolkit is known to answer it (GETALL_TOOLKITS); the
// others get one Properties.Get per property, as libatspi (and so OSWorld's pyatspi reader) always does. Qt 5's
// AT-SPI bridge dies on GetAll: it reads a second argument that GetAll does not have (VLC segfaulted in
// QVariant::toString on the first walk).
//
// A per-call timeout marks the application hung for the rest of the walk: its pending and later calls fail
// at once, and its subtree is marked truncated. The deadline caps every call's timeout, so the walk returns
// by then with whatever it has.

import { type A11yBus, type A11yCall, A11yCallError, type DirectHow } from './bus.ts';
import {
  ATSPI_PREFIX,
  COORD_TYPE_SCREEN,
  IFACE_ACCESSIBLE,
  IFACE_ACTION,
  IFACE_APPLICATION,
  IFACE_COMPONENT,
  IFACE_PROPERTIES,
  IFACE_TEXT,
  IFACE_VALUE,
  NULL_PATH,
  OSWORLD_MAX_DEPTH,
  OSWORLD_MAX_WIDTH,
  REGISTRY_BUS_NAME,
  ROLE_EXTENDED,
  ROLE_NAMES,
  ROOT_PATH,
  STATE_NAMES,
} from './atspi-constants.ts';
import { CancelledError } from '../common/errors.ts';
import { A11yError } from './errors.ts';
import type { A11yAppInfo, A11yNode, A11yNodeError, MirrorEntry, WalkMirror, WalkOptions, WalkResult, WalkStats } from './types.ts';

export const DEFAULT_DEADLINE_MS = 10_000;
export const DEFAULT_MAX_IN_FLIGHT_PER_APP = 64;
/**
 * What one walk may take in from the session's applications (which the session controls): about 64 MiB of
 * replies (strings counted by length) and 100,000 nodes. A real desktop is far below both: OSWorld's busiest
 * trees (a spreadsheet, a long web page, each list capped at maxWidth) are some tens of thousands of nodes and a
 * few MiB of text. Past a budget no call starts, replies still in flight are dropped, and what the walk has is
 * marked truncated with error 'budget' (stats.budgetHit).
 */
export const WALK_MAX_BYTES = 64 * 1024 * 1024;
export const WALK_MAX_NODES = 100_000;

/**
 * `Application.ToolkitName` of the bridges that answer `Properties.GetAll(Accessible)` correctly: atk-bridge
 * (GTK 2/3 apps, LibreOffice's gtk3 VCL: 'gtk'; Chromium: 'Chromium'; Firefox, Thunderbird: 'Gecko') and
 * GTK 4's own ('GTK'). Any other toolkit, or one that does not say, is read property by property: Qt 5.15's
 * bridge (toolkit 'Qt') indexes a second argument that GetAll lacks and crashes the application.
 */
export const GETALL_TOOLKITS: ReadonlySet<string> = new Set(['gtk', 'GTK', 'Chromium', 'Gecko']);

/**
 * Toolkits whose `org.a11y.atspi.Cache.GetItems` (one call: every object the bridge knows, with its parent,
 * index, child count, interfaces, name, role, description and states) is read instead of GetAll, GetRole,
 * GetState and GetInterfaces per object. Only GTK 4's own bridge ('GTK': nautilus) answers it
 * among the osworld image's apps; atk-bridge ('gtk', 'Chromium', 'Gecko') has no such method, and Qt's is not
 * asked (its bridge is the one that crashes on calls it does not expect). GTK 4 spends some 1.5 ms of CPU per
 * call, so nautilus was the slowest application of a read (tests/fixtures/a11y/profile.ts).
 */
export const CACHE_TOOLKITS: ReadonlySet<string> = new Set(['GTK']);
const CACHE_PATH = '/org/a11y/atspi/cache';
const IFACE_CACHE = `${ATSPI_PREFIX}Cache`;

/** One object of a Cache.GetItems reply, by path. */
type CachedItem = {
  parent: string;
  index: number;
  childCount: number;
  interfaces: string[];
  name: string;
  role: number;
  description: string;
  states: unknown;
};
/**
 * An application's cache: items by path. Only each object's own data is taken from it; its children are still
 * asked (GetChildren): GTK 4's cache orders some siblings unlike GetChildren (seen on nautilus's panels).
 */
type AppCache = { items: Map<string, CachedItem> };

type Ref = { bus: string; path: string };

/** A FIFO semaphore. */
class Limiter {
  private _free: number;
  private readonly _queue: Array<() => void> = [];

  constructor(size: number) {
    this._free = size;
  }

  acquire(): Promise<void> {
    if (this._free > 0) {
      this._free--;
      return Promise.resolve();
    }
    return new Promise((resolve) => this._queue.push(resolve));
  }

  release(): void {
    const next = this._queue.shift();
    if (next) next();
    else this._free++;
  }
}

/** A failure that decides how the node is marked. */
class NodeFailure extends Error {
  readonly reason: A11yNodeError;
  constructor(reason: A11yNodeError, message: string) {
    super(message);
    this.reason = reason;
  }
}

type Ctx = {
  client: A11yBus;
  deadline: number;
  callTimeoutMs: number;
  maxDepth: number;
  maxWidth: number;
  maxInFlight: number;
  appFilter: ((app: A11yAppInfo) => boolean) | undefined;
  limiters: Map<string, Limiter>;
  hung: Set<string>;
  direct: DirectHow | undefined;
  peers: Map<string, A11yBus>;
  /** Per application bus: its ToolkitName ('' if it does not say), asked once per walk. */
  toolkit: Map<string, Promise<string>>;
  /** Per application bus whose toolkit is in CACHE_TOOLKITS: its Cache.GetItems, once per walk (undefined if refused). */
  caches: Map<string, Promise<AppCache | undefined>>;
  /** Use Cache.GetItems where the toolkit has it (WalkOptions.cache). */
  useCache: boolean;
  /** WalkOptions.mirror, and per application bus whether it is served from it this read. */
  mirror: WalkMirror | undefined;
  mirrored: Map<string, Promise<boolean>>;
  /** Objects reached (`bus path`), for the mirror to drop what a whole read no longer reaches. */
  visited: Set<string> | undefined;
  /** Bytes of replies taken in so far (approxBytes). */
  bytes: number;
  stats: WalkStats;
};

/** A reply's size as the walk holds it: strings by length, other leaves 8 bytes, containers their parts. */
function approxBytes(v: unknown): number {
  if (typeof v === 'string') return v.length + 8;
  if (Array.isArray(v)) {
    let n = 8;
    for (const x of v) n += approxBytes(x);
    return n;
  }
  if (v !== null && typeof v === 'object') {
    let n = 8;
    for (const [k, x] of Object.entries(v)) n += k.length + approxBytes(x);
    return n;
  }
  return 8;
}

function overBudget(ctx: Ctx): boolean {
  if (ctx.bytes <= WALK_MAX_BYTES && ctx.stats.nodes <= WALK_MAX_NODES) return false;
  ctx.stats.budgetHit = true;
  return true;
}

const budgetFailure = () => new NodeFailure('budget', `walk budget spent (${WALK_MAX_BYTES} bytes of replies or ${WALK_MAX_NODES} nodes)`);

async function call<T>(ctx: Ctx, ref: Ref, iface: string, member: string, signature?: string, body?: unknown[]): Promise<T> {
  if (ctx.hung.has(ref.bus)) throw new NodeFailure('timeout', `${ref.bus} is not answering`);
  let limiter = ctx.limiters.get(ref.bus);
  if (!limiter) {
    limiter = new Limiter(ctx.maxInFlight);
    ctx.limiters.set(ref.bus, limiter);
  }
  await limiter.acquire();
  try {
    if (ctx.hung.has(ref.bus)) throw new NodeFailure('timeout', `${ref.bus} is not answering`);
    if (overBudget(ctx)) throw budgetFailure();
    const remaining = ctx.deadline - Date.now();
    if (remaining <= 0) {
      ctx.stats.deadlineHit = true;
      throw new NodeFailure('deadline', 'walk deadline passed');
    }
    const cappedByDeadline = remaining < ctx.callTimeoutMs;
    const msg: A11yCall = { destination: ref.bus, path: ref.path, interface: iface, member };
    if (signature !== undefined) {
      msg.signature = signature;
      msg.body = body;
    }
    ctx.stats.calls++;
    const peer = ctx.peers.get(ref.bus);
    const sent = performance.now();
    try {
      const reply = await (peer ?? ctx.client).call<T>(msg, cappedByDeadline ? remaining : ctx.callTimeoutMs);
      const size = approxBytes(reply);
      ctx.bytes += size;
      tally(ctx, ref.bus, callKind(member, body), performance.now() - sent, size);
      // A reply that arrives past the budget is dropped, not kept in the tree.
      if (overBudget(ctx)) throw budgetFailure();
      return reply;
    } catch (err) {
      if (!(err instanceof A11yCallError)) throw err;
      if (err.kind === 'timeout') {
        if (cappedByDeadline) {
          ctx.stats.deadlineHit = true;
          throw new NodeFailure('deadline', 'walk deadline passed');
        }
        ctx.stats.timeouts++;
        ctx.hung.add(ref.bus);
        throw new NodeFailure('timeout', `${member} on ${ref.bus}${ref.path} timed out after ${ctx.callTimeoutMs} ms`);
      }
      if (err.kind === 'closed' && peer) throw new NodeFailure('gone', `${ref.bus} closed its connection`);
      if (err.kind === 'closed') throw new A11yError('a11y_unavailable', `AT-SPI bus connection lost: ${err.message}`, { cause: err });
      ctx.stats.errors++;
      throw new NodeFailure('gone', `${member} on ${ref.bus}${ref.path}: ${err.dbusName}: ${err.message}`);
    }
  } finally {
    limiter.release();
  }
}

/** The kind of a call, for the profile: the member, with Properties.Get named by its property. */
function callKind(member: string, body: unknown[] | undefined): string {
  if (member === 'Get' && body && typeof body[1] === 'string') return `Get(${body[1]})`;
  if (member === 'GetAll' && body && typeof body[0] === 'string') return `GetAll(${String(body[0]).slice(ATSPI_PREFIX.length)})`;
  return member;
}

/** Count one answered call in the walk's profile: per kind and per application bus, calls and summed round trips. */
function tally(ctx: Ctx, bus: string, kind: string, ms: number, bytes: number): void {
  const k = (ctx.stats.profile.byKind[kind] ??= { calls: 0, ms: 0, bytes: 0 });
  k.calls++;
  k.ms += ms;
  k.bytes += bytes;
  const a = (ctx.stats.profile.byBus[bus] ??= { calls: 0, ms: 0, bytes: 0 });
  a.calls++;
  a.ms += ms;
  a.bytes += bytes;
}

/** Settle a promise into a value or a NodeFailure; anything else (a lost connection) is rethrown. */
async function settle<T>(p: Promise<T>): Promise<T | NodeFailure> {
  try {
    return await p;
  } catch (err) {
    if (err instanceof NodeFailure) return err;
    throw err;
  }
}

const isFailure = (v: unknown): v is NodeFailure => v instanceof NodeFailure;

/** Keep the most telling reason when several calls failed. */
function worst(a: A11yNodeError | undefined, b: A11yNodeError): A11yNodeError {
  const rank = { gone: 1, budget: 2, deadline: 3, timeout: 4 } as const;
  return a === undefined || rank[b] > rank[a] ? b : a;
}

function decodeStates(words: unknown): string[] {
  const out: string[] = [];
  if (!Array.isArray(words)) return out;
  words.forEach((word, w) => {
    const bits = Number(word) >>> 0;
    for (let b = 0; b < 32; b++) {
      if ((bits & (2 ** b)) === 0) continue;
      const name = STATE_NAMES[w * 32 + b];
      if (name !== undefined) out.push(name);
    }
  });
  return out;
}

function toStringRecord(v: unknown): Record<string, string> {
  const out: Record<string, string> = {};
  if (Array.isArray(v)) {
    for (const pair of v) if (Array.isArray(pair)) out[String(pair[0])] = String(pair[1]);
  } else if (v && typeof v === 'object') {
    for (const [k, val] of Object.entries(v)) out[k] = String(val);
  }
  return out;
}

function numberOrUndefined(v: unknown): number | undefined {
  return typeof v === 'number' ? v : typeof v === 'bigint' ? Number(v) : undefined;
}

function stubNode(ref: Ref, error: A11yNodeError, role = ''): A11yNode {
  return { role, name: '', states: [], attributes: {}, interfaces: [], children: [], truncated: true, error, stub: true, ref };
}

/** The application's `ToolkitName` (one call per bus and walk), '' if it does not say. */
function toolkitOf(ctx: Ctx, bus: string): Promise<string> {
  let known = ctx.toolkit.get(bus);
  if (!known) {
    known = settle(call<unknown>(ctx, { bus, path: ROOT_PATH }, IFACE_PROPERTIES, 'Get', 'ss', [IFACE_APPLICATION, 'ToolkitName'])).then((r) =>
      !isFailure(r) && typeof r === 'string' ? r : '',
    );
    ctx.toolkit.set(bus, known);
  }
  return known;
}

/**
 * Whether `Properties.GetAll` is safe on this bus, from its application's toolkit. The registry answers GetAll
 * (with nothing; buildNode then asks property by property).
 */
async function getAllSafe(ctx: Ctx, bus: string): Promise<boolean> {
  if (bus === REGISTRY_BUS_NAME) return true;
  return GETALL_TOOLKITS.has(await toolkitOf(ctx, bus));
}

/**
 * The application's Cache.GetItems, read once per walk, or undefined (not asked, refused, or malformed: then
 * its objects are read one call at a time). The reply is the session's: checked field by field, and counted
 * against the walk's byte budget like any reply.
 */
async function appCache(ctx: Ctx, bus: string): Promise<AppCache | undefined> {
  if (!ctx.useCache || bus === REGISTRY_BUS_NAME) return undefined;
  let known = ctx.caches.get(bus);
  if (!known) {
    known = (async () => {
      if (!CACHE_TOOLKITS.has(await toolkitOf(ctx, bus))) return undefined;
      const r = await settle(call<unknown>(ctx, { bus, path: CACHE_PATH }, IFACE_CACHE, 'GetItems'));
      if (isFailure(r) || !Array.isArray(r)) return undefined;
      return parseCache(bus, r);
    })();
    ctx.caches.set(bus, known);
  }
  return known;
}

/** GetItems' a((so)(so)(so)iiassusau) into an AppCache; items of another bus or of the wrong shape are left out. */
export function parseCache(bus: string, reply: unknown[]): AppCache {
  const items = new Map<string, CachedItem>();
  const isRef = (v: unknown): v is [string, string] => Array.isArray(v) && typeof v[0] === 'string' && typeof v[1] === 'string';
  for (const it of reply) {
    if (!Array.isArray(it) || it.length < 10) continue;
    const [self, , parent, index, childCount, interfaces, name, role, description, states] = it as unknown[];
    if (!isRef(self) || !isRef(parent) || self[0] !== bus) continue;
    if (typeof index !== 'number' || typeof childCount !== 'number' || typeof role !== 'number') continue;
    if (typeof name !== 'string' || typeof description !== 'string' || !Array.isArray(interfaces) || !Array.isArray(states)) continue;
    items.set(self[1], { parent: parent[0] === bus ? parent[1] : '', index, childCount, interfaces: interfaces.map(String), name, role, description, states });
  }
  return { items };
}

/**
 * Whether this application's objects are served from the mirror this read: its toolkit's events are trusted
 * and it answered a ping over the event connection (so every event it sent before has been applied). A ping
 * that times out marks the app hung, as the walk's own first call would have.
 */
function mirrorServes(ctx: Ctx, bus: string): Promise<boolean> {
  const mirror = ctx.mirror;
  if (!mirror || bus === REGISTRY_BUS_NAME) return Promise.resolve(false);
  let known = ctx.mirrored.get(bus);
  if (!known) {
    known = (async () => {
      if (!mirror.trusts(await toolkitOf(ctx, bus))) return false;
      const remaining = ctx.deadline - Date.now();
      if (remaining <= 0 || ctx.hung.has(bus)) return false;
      const synced = await mirror.sync(bus, Math.min(ctx.callTimeoutMs, remaining));
      if (synced === 'hung' && remaining > ctx.callTimeoutMs) {
        // As a timed-out call of the walk would: the app is hung for the rest of this read (one timeout, not two).
        ctx.stats.timeouts++;
        ctx.hung.add(bus);
      }
      return synced === 'synced';
    })();
    ctx.mirrored.set(bus, known);
  }
  return known;
}

/**
 * Phase 1 + 2 for one node, then its children. Returns a NodeFailure if nothing could be read. `served`: the
 * node may come from the mirror (its application is served and no ancestor manages its descendants).
 */
async function buildNode(ctx: Ctx, ref: Ref, depth: number, served = false): Promise<A11yNode | NodeFailure | null> {
  if (depth === 1 && ctx.direct && !ctx.peers.has(ref.bus)) {
    const remaining = ctx.deadline - Date.now();
    const peer = remaining > 0 ? await ctx.client.peer(ref.bus, ctx.direct, Math.min(ctx.callTimeoutMs, remaining)) : undefined;
    if (peer && !peer.closed) {
      ctx.peers.set(ref.bus, peer);
      ctx.stats.directApps.push(ref.bus);
    }
  }
  if (depth === 1) served = await mirrorServes(ctx, ref.bus);
  ctx.visited?.add(`${ref.bus} ${ref.path}`);
  // Taken before any call about this object: an event after it keeps what is read now out of the mirror.
  const since = ctx.mirror?.seq() ?? 0;
  const kept = served ? ctx.mirror!.get(ref.bus, ref.path) : undefined;
  if (kept) return fromMirror(ctx, ref, depth, kept);
  const cache = await appCache(ctx, ref.bus);
  // Note: not the application's root: GTK 4's cache says it has no children.
  const cached = ref.path === ROOT_PATH ? undefined : cache?.items.get(ref.path);
  let roleNum: number | NodeFailure;
  let stateWords: unknown;
  let ifaces: string[] | NodeFailure;
  let error: A11yNodeError | undefined;
  let name = '';
  let description: string | undefined;
  let childCount: number | undefined;
  let attrs: unknown;
  // A phase-1 call that failed, even as 'gone': what was read is not kept in the mirror.
  let phase1Failed = false;
  if (cached) {
    // Note: what GetItems gave for this object stands for GetAll, GetRole, GetState and GetInterfaces (the
    // bridge answers both from the same object); Attributes are not in the cache.
    roleNum = cached.role;
    stateWords = cached.states;
    ifaces = cached.interfaces;
    name = cached.name;
    if (cached.description !== '') description = cached.description;
    childCount = cached.childCount;
  } else {
    const useGetAll = await getAllSafe(ctx, ref.bus);
    const [props, role, st, ifs] = await Promise.all([
      useGetAll ? settle(call<unknown>(ctx, ref, IFACE_PROPERTIES, 'GetAll', 's', [IFACE_ACCESSIBLE])) : undefined,
      settle(call<number>(ctx, ref, IFACE_ACCESSIBLE, 'GetRole')),
      settle(call<number[]>(ctx, ref, IFACE_ACCESSIBLE, 'GetState')),
      settle(call<string[]>(ctx, ref, IFACE_ACCESSIBLE, 'GetInterfaces')),
    ]);
    roleNum = role;
    stateWords = st;
    ifaces = ifs;
    if (isFailure(props) && isFailure(roleNum)) return props.reason === 'gone' ? roleNum : props;
    if (props === undefined && isFailure(roleNum)) return roleNum;

    for (const r of [roleNum, stateWords, ifaces]) if (isFailure(r) && r.reason !== 'gone') error = worst(error, r.reason);
    if (isFailure(props)) phase1Failed = true;

    if (!isFailure(props) && props !== null && typeof props === 'object') {
      const p = props as Record<string, unknown>;
      name = typeof p.Name === 'string' ? p.Name : '';
      if (typeof p.Description === 'string' && p.Description !== '') description = p.Description;
      childCount = numberOrUndefined(p.ChildCount);
      attrs = p.Attributes; // at-spi2-core >= 2.46 atk-bridge includes it; saves a GetAttributes per node
    } else if (isFailure(props) && props.reason !== 'gone') {
      error = worst(error, props.reason);
    } else {
      // Here when GetAll was not asked (see GETALL_TOOLKITS) or, for the registry's desktop, answered with an
      // empty reply: ask for each property instead.
      const [n, d, c] = await Promise.all([
        settle(call<string>(ctx, ref, IFACE_PROPERTIES, 'Get', 'ss', [IFACE_ACCESSIBLE, 'Name'])),
        settle(call<string>(ctx, ref, IFACE_PROPERTIES, 'Get', 'ss', [IFACE_ACCESSIBLE, 'Description'])),
        settle(call<number>(ctx, ref, IFACE_PROPERTIES, 'Get', 'ss', [IFACE_ACCESSIBLE, 'ChildCount'])),
      ]);
      if (!isFailure(n) && typeof n === 'string') name = n;
      if (!isFailure(d) && typeof d === 'string' && d !== '') description = d;
      if (!isFailure(c)) childCount = numberOrUndefined(c);
      for (const r of [n, d, c]) if (isFailure(r) && r.reason !== 'gone') error = worst(error, r.reason);
      if (isFailure(n) || isFailure(d) || isFailure(c)) phase1Failed = true;
    }
  }
  if (attrs === undefined && !ctx.hung.has(ref.bus)) {
    const a = await settle(call<unknown>(ctx, ref, IFACE_ACCESSIBLE, 'GetAttributes'));
    if (!isFailure(a)) attrs = a;
    else if (a.reason !== 'gone') error = worst(error, a.reason);
  }

  if (depth === 1 && ctx.appFilter && !ctx.appFilter({ name, bus: ref.bus })) return null;

  const interfaces = isFailure(ifaces) ? [] : ifaces.map((i) => (i.startsWith(ATSPI_PREFIX) ? i.slice(ATSPI_PREFIX.length) : i));
  const has = (iface: string) => interfaces.includes(iface.slice(ATSPI_PREFIX.length));
  const roleIndex = isFailure(roleNum) ? -1 : Number(roleNum);
  const roleKnown = roleIndex >= 0 && roleIndex < ROLE_NAMES.length && roleIndex !== ROLE_EXTENDED;

  const node: A11yNode = {
    role: roleKnown ? ROLE_NAMES[roleIndex]! : '',
    name,
    ...(description !== undefined ? { description } : {}),
    states: isFailure(stateWords) ? [] : decodeStates(stateWords),
    attributes: toStringRecord(attrs),
    interfaces,
    children: [],
    ref,
  };
  ctx.stats.nodes++;

  const phase2: Array<Promise<void>> = [];
  // Anything that failed keeps the node out of the mirror (a refusal may be an object going away).
  let failed = phase1Failed || isFailure(roleNum) || isFailure(stateWords) || isFailure(ifaces) || error !== undefined || attrs === undefined;
  // Optional data an object refuses (a D-Bus error reply) is just absent; only timeouts and the deadline
  // make the node incomplete.
  const note = (f: NodeFailure) => {
    failed = true;
    if (f.reason !== 'gone') error = worst(error, f.reason);
  };
  const manages = node.states.includes('manages_descendants');
  let childList: MirrorEntry['children'];

  if (!roleKnown && roleIndex >= 0) {
    phase2.push(
      settle(call<string>(ctx, ref, IFACE_ACCESSIBLE, 'GetRoleName')).then((r) => {
        if (isFailure(r)) note(r);
        else node.role = String(r);
      }),
    );
  }
  // Note: extents only where OSWorld writes them (visible and showing); saves a call per hidden node.
  if (has(IFACE_COMPONENT) && node.states.includes('visible') && node.states.includes('showing')) {
    phase2.push(
      settle(call<number[]>(ctx, ref, IFACE_COMPONENT, 'GetExtents', 'u', [COORD_TYPE_SCREEN])).then((r) => {
        if (isFailure(r)) return note(r);
        const [x, y, width, height] = r.map(Number);
        node.extents = { x: x!, y: y!, width: width!, height: height! };
      }),
    );
  }
  if (has(IFACE_TEXT)) {
    phase2.push(
      settle(call<string>(ctx, ref, IFACE_TEXT, 'GetText', 'ii', [0, -1])).then((r) => {
        if (isFailure(r)) return note(r);
        node.text = String(r);
      }),
    );
  }
  if (has(IFACE_VALUE)) {
    // Note: never Properties.GetAll on Value: Chromium's atk-bridge aborts the whole browser
    // ("Array or variant type requires that type variant be written, but end_dict_entry was written").
    const fields = [
      ['current', 'CurrentValue'],
      ['min', 'MinimumValue'],
      ['max', 'MaximumValue'],
      ['step', 'MinimumIncrement'],
    ] as const;
    phase2.push(
      Promise.all(fields.map(([, prop]) => settle(call<number>(ctx, ref, IFACE_PROPERTIES, 'Get', 'ss', [IFACE_VALUE, prop])))).then((got) => {
        const v: NonNullable<A11yNode['value']> = {};
        got.forEach((r, i) => {
          if (isFailure(r)) return note(r);
          const n = numberOrUndefined(r);
          if (n !== undefined) v[fields[i]![0]] = n;
        });
        node.value = v;
      }),
    );
  }
  if (has(IFACE_ACTION)) {
    // Note: GetActions returns localized names ("Click"); OSWorld uses the programmatic one ("click") from
    // GetName, so ask for each name too.
    phase2.push(
      settle(call<unknown[][]>(ctx, ref, IFACE_ACTION, 'GetActions')).then(async (r) => {
        if (isFailure(r)) return note(r);
        const names = await Promise.all(r.map((_, i) => settle(call<string>(ctx, ref, IFACE_ACTION, 'GetName', 'i', [i]))));
        node.actions = r.map((a, i) => {
          const n = names[i];
          if (isFailure(n)) note(n);
          return { name: isFailure(n) ? String(a[0]) : String(n), description: String(a[1]), keyBinding: String(a[2]) };
        });
      }),
    );
  }
  phase2.push(
    buildChildren(ctx, node, ref, depth, childCount, served && !manages).then(
      (r) => {
        if (r.truncated) node.truncated = true;
        childList = r.list;
      },
      (err) => {
        if (err instanceof NodeFailure) {
          failed = true;
          if (err.reason !== 'gone') error = worst(error, err.reason);
          node.truncated = true;
        } else {
          throw err;
        }
      },
    ),
  );
  await Promise.all(phase2);
  if (served && !failed && !manages) {
    ctx.mirror!.put(
      ref.bus,
      ref.path,
      {
        role: node.role,
        name: node.name,
        ...(node.description !== undefined ? { description: node.description } : {}),
        states: node.states,
        attributes: node.attributes,
        interfaces: node.interfaces,
        ...(node.text !== undefined ? { text: node.text } : {}),
        ...(node.value ? { value: node.value } : {}),
        ...(node.actions ? { actions: node.actions } : {}),
        childCount,
        ...(childList ? { children: childList } : {}),
      },
      since,
    );
  }

  // Put optional fields in a stable order for readers of the JSON.
  const ordered: A11yNode = {
    role: node.role,
    name: node.name,
    ...(node.description !== undefined ? { description: node.description } : {}),
    states: node.states,
    attributes: node.attributes,
    interfaces: node.interfaces,
    ...(node.extents ? { extents: node.extents } : {}),
    ...(node.text !== undefined ? { text: node.text } : {}),
    ...(node.value ? { value: node.value } : {}),
    ...(node.actions ? { actions: node.actions } : {}),
    children: node.children,
    ...(node.truncated || error ? { truncated: true as const } : {}),
    ...(error ? { error } : {}),
    ref,
  };
  return ordered;
}

/**
 * Fill `node.children`; returns whether anything was left out, and the child list as read when it may be kept
 * (GetChildren, not GetChildAtIndex). Throws NodeFailure if the list is unreadable. `served`: the children may
 * come from the mirror; `known`: the list from the mirror, at this walk's maxWidth.
 */
async function buildChildren(
  ctx: Ctx,
  node: A11yNode,
  ref: Ref,
  depth: number,
  childCount: number | undefined,
  served: boolean,
  known?: MirrorEntry['children'],
): Promise<{ truncated: boolean; list?: MirrorEntry['children'] }> {
  if (childCount === 0) return { truncated: false, list: { refs: [], truncated: false, maxWidth: ctx.maxWidth } };
  if (depth >= ctx.maxDepth) return { truncated: childCount !== undefined && childCount > 0 };
  let truncated = false;
  let refs: Ref[];
  let list: MirrorEntry['children'];
  if (known) {
    refs = known.refs;
    truncated = known.truncated;
  } else if (childCount !== undefined && childCount > ctx.maxWidth) {
    // Note: never GetChildren on a huge container (a spreadsheet table has millions of cells).
    truncated = true;
    const got = await Promise.all(
      Array.from({ length: ctx.maxWidth }, (_, i) => settle(call<[string, string]>(ctx, ref, IFACE_ACCESSIBLE, 'GetChildAtIndex', 'i', [i]))),
    );
    refs = [];
    for (const g of got) {
      if (isFailure(g)) break; // as OSWorld: a failing child drops the rest
      refs.push({ bus: g[0], path: g[1] });
    }
  } else {
    const got = await call<Array<[string, string]>>(ctx, ref, IFACE_ACCESSIBLE, 'GetChildren');
    refs = got.map(([bus, path]) => ({ bus: String(bus), path: String(path) }));
    if (refs.length > ctx.maxWidth) {
      refs = refs.slice(0, ctx.maxWidth);
      truncated = true;
    }
    refs = refs.filter((r) => r.path !== NULL_PATH && r.bus !== '');
    list = { refs, truncated, maxWidth: ctx.maxWidth };
  }
  refs = refs.filter((r) => r.path !== NULL_PATH && r.bus !== '');
  // Note: a child on another bus (an embedded application) is not served from this one's events.
  const children = await Promise.all(refs.map((r) => buildNode(ctx, r, depth + 1, served && r.bus === ref.bus)));
  for (const [i, child] of children.entries()) {
    if (child === null) continue; // filtered out by `apps`
    if (isFailure(child)) {
      truncated = true;
      // An application keeps its place as a stub so callers see it was there but did not answer.
      if (depth === 0) node.children.push(stubNode(refs[i]!, child.reason, 'application'));
      continue;
    }
    node.children.push(child);
  }
  return { truncated, ...(list ? { list } : {}) };
}

/**
 * A node from its mirror entry: no call but its extents (asked every read: a window move changes them without
 * an event per object) and, if the entry has no list at this maxWidth, its children.
 */
async function fromMirror(ctx: Ctx, ref: Ref, depth: number, kept: MirrorEntry): Promise<A11yNode | null> {
  if (depth === 1 && ctx.appFilter && !ctx.appFilter({ name: kept.name, bus: ref.bus })) return null;
  ctx.stats.mirrored = (ctx.stats.mirrored ?? 0) + 1;
  ctx.stats.nodes++;
  let error: A11yNodeError | undefined;
  let extents: A11yNode['extents'];
  const node: A11yNode = { role: kept.role, name: kept.name, states: kept.states, attributes: kept.attributes, interfaces: kept.interfaces, children: [], ref };
  const work: Array<Promise<void>> = [];
  if (kept.interfaces.includes('Component') && kept.states.includes('visible') && kept.states.includes('showing')) {
    work.push(
      settle(call<number[]>(ctx, ref, IFACE_COMPONENT, 'GetExtents', 'u', [COORD_TYPE_SCREEN])).then((r) => {
        if (isFailure(r)) {
          if (r.reason !== 'gone') error = worst(error, r.reason);
          return;
        }
        const [x, y, width, height] = r.map(Number);
        extents = { x: x!, y: y!, width: width!, height: height! };
      }),
    );
  }
  const manages = kept.states.includes('manages_descendants');
  const known = kept.children && kept.children.maxWidth === ctx.maxWidth && !manages ? kept.children : undefined;
  let truncated = false;
  work.push(
    buildChildren(ctx, node, ref, depth, kept.childCount, !manages, known).then(
      (r) => {
        truncated = r.truncated;
        // A list read now (the entry had none at this maxWidth) joins the entry.
        if (r.list && !known && !manages) ctx.mirror!.put(ref.bus, ref.path, { ...kept, children: r.list }, ctx.mirror!.seq());
      },
      (err) => {
        if (!(err instanceof NodeFailure)) throw err;
        if (err.reason !== 'gone') error = worst(error, err.reason);
        truncated = true;
      },
    ),
  );
  await Promise.all(work);
  return {
    role: kept.role,
    name: kept.name,
    ...(kept.description !== undefined ? { description: kept.description } : {}),
    states: kept.states,
    attributes: kept.attributes,
    interfaces: kept.interfaces,
    ...(extents ? { extents } : {}),
    ...(kept.text !== undefined ? { text: kept.text } : {}),
    ...(kept.value ? { value: kept.value } : {}),
    ...(kept.actions ? { actions: kept.actions } : {}),
    children: node.children,
    ...(truncated || error ? { truncated: true as const } : {}),
    ...(error ? { error } : {}),
    ref,
  };
}

function appFilterOf(apps: WalkOptions['apps']): ((app: A11yAppInfo) => boolean) | undefined {
  if (apps === undefined) return undefined;
  if (typeof apps === 'function') return apps;
  const names = new Set(apps);
  return (app) => names.has(app.name);
}

export async function walk(client: A11yBus, options: WalkOptions = {}): Promise<WalkResult> {
  const started = performance.now();
  const ctx: Ctx = {
    client,
    deadline: Date.now() + (options.deadlineMs ?? DEFAULT_DEADLINE_MS),
    callTimeoutMs: options.callTimeoutMs ?? client.timeoutMs,
    maxDepth: options.maxDepth ?? OSWORLD_MAX_DEPTH,
    maxWidth: options.maxWidth ?? OSWORLD_MAX_WIDTH,
    maxInFlight: options.maxInFlightPerApp ?? DEFAULT_MAX_IN_FLIGHT_PER_APP,
    appFilter: appFilterOf(options.apps),
    limiters: new Map(),
    hung: new Set(),
    direct: options.direct ? (typeof options.direct === 'object' ? options.direct : {}) : undefined,
    peers: new Map(),
    toolkit: new Map(),
    caches: new Map(),
    useCache: options.cache ?? true,
    mirror: options.mirror,
    mirrored: new Map(),
    visited: options.mirror && !options.apps ? new Set() : undefined,
    bytes: 0,
    stats: {
      durationMs: 0,
      nodes: 0,
      calls: 0,
      errors: 0,
      timeouts: 0,
      hungApps: [],
      directApps: [],
      deadlineHit: false,
      budgetHit: false,
      profile: { byKind: {}, byBus: {} },
    },
  };
  // An abort is a deadline that has passed: no call starts after it, the walk unwinds, then throws.
  const { signal } = options;
  const onAbort = () => {
    ctx.deadline = 0;
  };
  if (signal?.aborted) onAbort();
  else signal?.addEventListener('abort', onAbort, { once: true });
  let root: Awaited<ReturnType<typeof buildNode>>;
  ctx.mirror?.beginRead();
  try {
    root = await buildNode(ctx, { bus: REGISTRY_BUS_NAME, path: ROOT_PATH }, 0);
  } finally {
    signal?.removeEventListener('abort', onAbort);
    // Only a read that reached everything it could says what is gone.
    const whole = !ctx.stats.deadlineHit && !ctx.stats.budgetHit && ctx.hung.size === 0 && !signal?.aborted && root! !== undefined && !isFailure(root!);
    ctx.mirror?.endRead(whole ? ctx.visited : undefined);
  }
  if (signal?.aborted) throw new CancelledError(`a11y walk cancelled after ${ctx.stats.calls} calls`, { calls: ctx.stats.calls });
  if (root === null || isFailure(root)) {
    const why = root === null ? 'no desktop' : root.message;
    throw new A11yError('a11y_unavailable', `AT-SPI registry did not answer: ${why}`);
  }
  ctx.stats.hungApps = [...ctx.hung];
  ctx.stats.durationMs = Math.round((performance.now() - started) * 10) / 10;
  for (const t of [...Object.values(ctx.stats.profile.byKind), ...Object.values(ctx.stats.profile.byBus)]) t.ms = Math.round(t.ms * 10) / 10;
  return { tree: root, stats: ctx.stats };
}
