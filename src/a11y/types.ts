// The JSON accessibility tree the walker produces.

import type { DirectHow } from './bus.ts';

export type A11yExtents = { x: number; y: number; width: number; height: number };

export type A11yValue = { current?: number; min?: number; max?: number; step?: number };

export type A11yAction = { name: string; description: string; keyBinding: string };

/** Why a node's own data or its children are incomplete. */
export type A11yNodeError =
  /** A call to this node's application did not answer within the per-call timeout (the app is treated as hung). */
  | 'timeout'
  /** The whole-walk deadline passed. */
  | 'deadline'
  /** The walk's byte or node budget was spent (WALK_MAX_BYTES, WALK_MAX_NODES in walk.ts). */
  | 'budget'
  /** The object or its application went away, or answered with a D-Bus error. */
  | 'gone';

export type A11yNode = {
  /** AT-SPI role name as libatspi spells it: `push button`, `document web`, `terminal`. Empty if unknown. */
  role: string;
  name: string;
  description?: string;
  /** OSWorld-style state names: `enabled`, `focused`, `multi_line`, `has_tooltip`… in AT-SPI enum order. */
  states: string[];
  /** Object attributes (`toolkit`, `id`, `tag`, `class`, `xml-roles`…). */
  attributes: Record<string, string>;
  /** AT-SPI interfaces without the `org.a11y.atspi.` prefix: `Accessible`, `Component`, `Text`… */
  interfaces: string[];
  /** Screen coordinates (`Component.GetExtents(SCREEN)`), when the node implements Component. */
  extents?: A11yExtents;
  /** Full `Text` content, when the node implements Text. */
  text?: string;
  /** `Value` interface numbers, when implemented. */
  value?: A11yValue;
  /** `Action` interface entries, when implemented. */
  actions?: A11yAction[];
  children: A11yNode[];
  /** Some children (or, for a stub, everything) were left out: depth/width limit, timeout, deadline or error. */
  truncated?: true;
  error?: A11yNodeError;
  /**
   * Only the reference is known (an application that did not answer). Stubs keep their place in the JSON tree
   * but are not written to OSWorld XML.
   */
  stub?: true;
  /** Where the object lives: D-Bus unique name and object path. Valid only while the app runs. */
  ref: { bus: string; path: string };
};

export type A11yAppInfo = { name: string; bus: string };

export type WalkOptions = {
  /** Nodes at this depth (desktop = 0, applications = 1) get no children. Default 50, as OSWorld. */
  maxDepth?: number;
  /** At most this many children per node. Default 1024, as OSWorld. */
  maxWidth?: number;
  /** Whole-walk budget in ms. When it passes, the walk returns what it has, marked truncated. Default 10000. */
  deadlineMs?: number;
  /** Per-call timeout in ms; default: the client's `timeoutMs`. */
  callTimeoutMs?: number;
  /** Stops the walk (no further calls; it throws CancelledError), e.g. when the client of the request went away. */
  signal?: AbortSignal;
  /** Keep only these applications: names (exact match) or a predicate. */
  apps?: readonly string[] | ((app: A11yAppInfo) => boolean);
  /** At most this many calls in flight per application. Default 64. */
  maxInFlightPerApp?: number;
  /**
   * Talk to each application over its own peer-to-peer socket (`GetApplicationBusAddress`) instead of through
   * the bus daemon: about a third less CPU per walk. Falls back to the bus per app when that fails. The path
   * the app reports is in the session's view; give `mapPath` to turn it into the host's (e.g. swap the
   * XDG_RUNTIME_DIR prefix), or `open` to connect it yourself (DirectHow). Off by default: an unmapped session
   * path could name an unrelated host socket.
   */
  direct?: boolean | DirectHow;
  /**
   * Read an application's objects from its `Cache.GetItems` (one call) where its toolkit answers it
   * (CACHE_TOOLKITS in walk.ts: GTK 4), instead of five calls per object. Default true; false walks every object
   * call by call (the reference walk).
   */
  cache?: boolean;
  /**
   * Serve objects from an event-kept mirror (A11yMirror in mirror.ts) where it holds them and no event has
   * touched them since; read (and store) the rest. Extents are asked every read.
   */
  mirror?: WalkMirror;
};

/** One object's own data as a mirror keeps it: everything a walk reads of it but its extents. */
export type MirrorEntry = Pick<A11yNode, 'role' | 'name' | 'description' | 'states' | 'attributes' | 'interfaces' | 'text' | 'value' | 'actions'> & {
  childCount: number | undefined;
  /** The child list as read at `maxWidth` (absent: not read yet, or not to be kept). */
  children?: { refs: Array<{ bus: string; path: string }>; truncated: boolean; maxWidth: number };
};

/** What a walk needs of a mirror (A11yMirror implements it). */
export interface WalkMirror {
  /** The toolkits whose events are trusted: their objects are served from the mirror. */
  trusts(toolkit: string): boolean;
  /**
   * 'synced': every event the application sent before has been applied (a Peer.Ping over the connection the
   * events come on answered). 'hung': the ping timed out. 'no': it failed otherwise, or the mirror is gone. Unless
   * synced, the application is walked.
   */
  sync(bus: string, timeoutMs: number): Promise<'synced' | 'hung' | 'no'>;
  /** A counter that moves with every event; taken before an object is read, given back to `put`. */
  seq(): number;
  /** The object's entry if no event touched it since it was stored. */
  get(bus: string, path: string): MirrorEntry | undefined;
  /** Keep what a read found, unless an event touched the object since `since`. */
  put(bus: string, path: string, entry: MirrorEntry, since: number): void;
  /** A read starts / ends; `visited` (only if the read saw the whole tree) lets the mirror drop what is gone. */
  beginRead(): void;
  endRead(visited: Set<string> | undefined): void;
}

export type WalkStats = {
  durationMs: number;
  nodes: number;
  calls: number;
  /** Calls that failed with a D-Bus error reply (e.g. an interface the object lacks). */
  errors: number;
  /** Calls that hit the per-call timeout. */
  timeouts: number;
  /** Bus names of applications that timed out during this walk. */
  hungApps: string[];
  /** Bus names of applications walked over a direct connection. */
  directApps: string[];
  deadlineHit: boolean;
  /** The walk stopped at its byte or node budget. */
  budgetHit: boolean;
  /**
   * Answered calls by kind (`GetRole`, `Get(Name)`, `GetAll(Accessible)`…) and by application bus name: how many,
   * their summed round trips in ms (calls overlap, so the sum exceeds the wall time) and the reply bytes.
   */
  profile: { byKind: Record<string, CallTally>; byBus: Record<string, CallTally> };
  /** Objects served from the mirror (WalkOptions.mirror) without a call but for their extents. */
  mirrored?: number;
};

export type CallTally = { calls: number; ms: number; bytes: number };

export type WalkResult = { tree: A11yNode; stats: WalkStats };
