// A per-session mirror of the AT-SPI tree, kept from the applications' events, so a read asks only for what
// changed. It is a cache with event invalidation, not a second tree: it holds, per object (bus + path), what a
// walk read of it (role, name, description, states, attributes, interfaces, text, value, actions, child list), and
// drops an object's entry on any event about that object. A read (walk.ts with `mirror`) takes an object's entry
// where there is one and reads (then stores) the rest, so what it returns is what a walk would have read.
//
// Order of things, so no change is missed:
// - Subscribe first (AddMatch, Registry.RegisterEvent), then read: an event that arrives while an object is being
//   read is remembered (`recent`) and keeps that read's result out of the mirror.
// - Events come over the bus; a walk reads an application over its own socket. Before an application's objects
//   are taken from the mirror, `sync` pings it over the event connection: it answers after every event it sent
//   before, and the bus keeps one sender's messages in order, so those events have been applied.
// - Only applications whose toolkit emits an event for every change of what a read returns are served
//   (MIRROR_TOOLKITS); below an object that `manages_descendants` (LibreOffice's table cells) nothing is
//   served. Extents are asked every read (a window move changes every descendant's screen position without an
//   event per object). See docs/a11y.md, "The event mirror".
//
// The events are the session's: their rate and the mirror's size are bounded. Past a bound the mirror stops
// (closes its connection, which also tells the registry it no longer listens) and reads are walks again.

import { A11yCallError } from './bus.ts';
import type { A11yClient, A11ySignal } from './client.ts';
import type { MirrorEntry, WalkMirror } from './types.ts';

/**
 * `Application.ToolkitName`s whose objects are served from the mirror: atk-bridge ('gtk': GTK 3 apps and
 * LibreOffice's gtk3 VCL) and GTK 4's own bridge ('GTK'). Chromium ('Chromium') changes object attributes and
 * text without an event, so it is walked each read; so is any other toolkit (Qt, Gecko, unknown).
 */
export const MIRROR_TOOLKITS: ReadonlySet<string> = new Set(['gtk', 'GTK']);
/** At most this many objects and about this many bytes (strings by length) per session; past either it stops. */
export const MIRROR_MAX_OBJECTS = 50_000;
export const MIRROR_MAX_BYTES = 32 * 1024 * 1024;
/**
 * Events are metered by a token bucket: a burst of MIRROR_EVENT_BURST (a first read makes the applications create
 * their accessibles and send some thousands of events at once; 2,900 on the 5-app desktop of the fast-read test)
 * refilled at MIRROR_MAX_EVENTS_PER_S. An empty bucket is a flood: the mirror stops and reads are walks (until it
 * is started again). So one session's events cost the daemon at most the burst plus that rate.
 */
export const MIRROR_MAX_EVENTS_PER_S = 2000;
export const MIRROR_EVENT_BURST = 20_000;
/** The event connection refuses (and closes on) a message larger than this: an event is a path and a detail. */
export const MIRROR_MAX_MESSAGE_BYTES = 1024 * 1024;

const IFACE_EVENT_OBJECT = 'org.a11y.atspi.Event.Object';
/**
 * What the mirror registers for with the registry (atk-bridge sends children-changed, property-change and
 * state-changed always, the rest only when someone listens). Not text-caret-moved, bounds-changed or
 * text-selection-changed: none changes what a read returns but for extents, which are asked every read.
 */
export const MIRROR_EVENTS: readonly string[] = [
  'object:children-changed',
  'object:property-change',
  'object:state-changed',
  'object:text-changed',
  'object:attributes-changed',
  'object:value-changed',
  'object:row-inserted',
  'object:row-deleted',
  'object:row-reordered',
  'object:column-inserted',
  'object:column-deleted',
  'object:column-reordered',
  'object:model-changed',
];
/** Signals of Event.Object that change nothing a read keeps (extents are asked every read). */
const IGNORED = new Set(['TextCaretMoved', 'BoundsChanged', 'TextSelectionChanged', 'ActiveDescendantChanged', 'LinkSelected']);

export type MirrorOptions = {
  maxObjects?: number;
  maxBytes?: number;
  maxEventsPerSecond?: number;
  eventBurst?: number;
  /** Called once when the mirror stops by itself (flood, memory, connection lost). */
  onStop?: (reason: string) => void;
};

export type MirrorStatus = {
  state: 'live' | 'stopped';
  /** Why it stopped. */
  reason?: string;
  objects: number;
  bytes: number;
  /** Events received since it started. */
  events: number;
};

type Held = { entry: MirrorEntry; bytes: number };

/** A value's size as the mirror holds it: strings by length, other leaves 8 bytes, containers their parts. */
function sizeOf(v: unknown): number {
  if (typeof v === 'string') return v.length + 8;
  if (Array.isArray(v)) {
    let n = 8;
    for (const x of v) n += sizeOf(x);
    return n;
  }
  if (v !== null && typeof v === 'object') {
    let n = 8;
    for (const [k, x] of Object.entries(v)) n += k.length + sizeOf(x);
    return n;
  }
  return 8;
}

export class A11yMirror implements WalkMirror {
  private readonly _client: A11yClient;
  private readonly _maxObjects: number;
  private readonly _maxBytes: number;
  private readonly _maxRate: number;
  private readonly _onStop: ((reason: string) => void) | undefined;
  private readonly _entries = new Map<string, Held>();
  /** While reads run: the last event's seq per object, and per bus for an application that went away. */
  private readonly _recent = new Map<string, number>();
  private _reading = 0;
  private _seq = 0;
  private _bytes = 0;
  private _events = 0;
  private readonly _burst: number;
  private _tokens: number;
  private _refilled = Date.now();
  private _stopped: string | undefined;

  private constructor(client: A11yClient, options: MirrorOptions) {
    this._client = client;
    this._maxObjects = options.maxObjects ?? MIRROR_MAX_OBJECTS;
    this._maxBytes = options.maxBytes ?? MIRROR_MAX_BYTES;
    this._maxRate = options.maxEventsPerSecond ?? MIRROR_MAX_EVENTS_PER_S;
    this._burst = options.eventBurst ?? MIRROR_EVENT_BURST;
    this._tokens = this._burst;
    this._onStop = options.onStop;
  }

  /**
   * Subscribe on `client` (a connection of its own to the session's AT-SPI bus, which the mirror then owns and
   * closes) and return the mirror, empty: the first read fills it. Rejects if the bus refuses the subscription.
   */
  static async start(client: A11yClient, options: MirrorOptions = {}): Promise<A11yMirror> {
    const m = new A11yMirror(client, options);
    client.onSignal(
      (s) => m._onSignal(s),
      (why) => m.stop(`event connection lost: ${why}`),
    );
    try {
      const dbus = {
        destination: 'org.freedesktop.DBus',
        path: '/org/freedesktop/DBus',
        interface: 'org.freedesktop.DBus',
        member: 'AddMatch',
        signature: 's',
      };
      await client.call({ ...dbus, body: [`type='signal',interface='${IFACE_EVENT_OBJECT}'`] });
      await client.call({ ...dbus, body: ["type='signal',sender='org.freedesktop.DBus',interface='org.freedesktop.DBus',member='NameOwnerChanged'"] });
      // Note: the registry drops these when this connection closes (it watches the listener's name).
      await Promise.all(
        MIRROR_EVENTS.map((event) =>
          client.call({
            destination: 'org.a11y.atspi.Registry',
            path: '/org/a11y/atspi/registry',
            interface: 'org.a11y.atspi.Registry',
            member: 'RegisterEvent',
            signature: 's',
            body: [event],
          }),
        ),
      );
    } catch (err) {
      await m.stop(`subscription refused: ${(err as Error).message}`);
      throw err;
    }
    return m;
  }

  get live(): boolean {
    return this._stopped === undefined;
  }

  status(): MirrorStatus {
    return {
      state: this.live ? 'live' : 'stopped',
      ...(this._stopped !== undefined ? { reason: this._stopped } : {}),
      objects: this._entries.size,
      bytes: this._bytes,
      events: this._events,
    };
  }

  /** Stop listening and forget everything; reads through it are walks. Idempotent. */
  async stop(reason: string): Promise<void> {
    if (this._stopped !== undefined) return;
    this._stopped = reason;
    this._entries.clear();
    this._recent.clear();
    this._bytes = 0;
    try {
      this._onStop?.(reason);
    } catch {
      // the owner's bookkeeping must not stop the stop
    }
    await this._client.close().catch(() => {});
  }

  trusts(toolkit: string): boolean {
    return this.live && MIRROR_TOOLKITS.has(toolkit);
  }

  async sync(bus: string, timeoutMs: number): Promise<'synced' | 'hung' | 'no'> {
    if (!this.live) return 'no';
    try {
      await this._client.call({ destination: bus, path: '/org/a11y/atspi/accessible/root', interface: 'org.freedesktop.DBus.Peer', member: 'Ping' }, timeoutMs);
      return this.live ? 'synced' : 'no';
    } catch (err) {
      return err instanceof A11yCallError && err.kind === 'timeout' ? 'hung' : 'no';
    }
  }

  seq(): number {
    return this._seq;
  }

  get(bus: string, path: string): MirrorEntry | undefined {
    return this._entries.get(`${bus} ${path}`)?.entry;
  }

  put(bus: string, path: string, entry: MirrorEntry, since: number): void {
    if (!this.live) return;
    const key = `${bus} ${path}`;
    if ((this._recent.get(key) ?? 0) > since || (this._recent.get(bus) ?? 0) > since) return;
    const bytes = sizeOf(entry) + key.length;
    const old = this._entries.get(key);
    this._bytes += bytes - (old?.bytes ?? 0);
    this._entries.set(key, { entry, bytes });
    if (this._entries.size > this._maxObjects || this._bytes > this._maxBytes) {
      void this.stop(`memory bound: more than ${this._maxObjects} objects or ${this._maxBytes} bytes`);
    }
  }

  beginRead(): void {
    this._reading++;
  }

  endRead(visited: Set<string> | undefined): void {
    this._reading = Math.max(0, this._reading - 1);
    if (this._reading > 0) return;
    this._recent.clear();
    // Objects a whole read did not reach are gone (or out of its bounds): drop them.
    if (visited) {
      for (const [key, held] of this._entries) {
        if (visited.has(key)) continue;
        this._entries.delete(key);
        this._bytes -= held.bytes;
      }
    }
  }

  private _onSignal(s: A11ySignal): void {
    if (!this.live) return;
    const now = Date.now();
    this._tokens = Math.min(this._burst, this._tokens + ((now - this._refilled) * this._maxRate) / 1000);
    this._refilled = now;
    this._events++;
    if (--this._tokens < 0) {
      void this.stop(`event flood: more than ${this._burst} events at once or ${this._maxRate} a second`);
      return;
    }
    if (s.interface === 'org.freedesktop.DBus' && s.member === 'NameOwnerChanged') {
      const [name, , owner] = s.body;
      if (typeof name === 'string' && name.startsWith(':') && owner === '') this._forgetBus(name);
      return;
    }
    if (s.interface !== IFACE_EVENT_OBJECT || IGNORED.has(s.member)) return;
    this._seq++;
    const key = `${s.sender} ${s.path}`;
    const held = this._entries.get(key);
    if (held) {
      this._entries.delete(key);
      this._bytes -= held.bytes;
    }
    if (this._reading > 0) this._remember(key);
  }

  private _forgetBus(bus: string): void {
    this._seq++;
    const prefix = `${bus} `;
    for (const [key, held] of this._entries) {
      if (!key.startsWith(prefix)) continue;
      this._entries.delete(key);
      this._bytes -= held.bytes;
    }
    if (this._reading > 0) this._remember(bus);
  }

  private _remember(key: string): void {
    this._recent.set(key, this._seq);
    // Note: bounded by the event rate already; this is the backstop.
    if (this._recent.size > this._maxObjects) void this.stop('memory bound: too many objects changed during one read');
  }
}
