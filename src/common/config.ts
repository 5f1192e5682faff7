/**
 * The daemon's configuration: one documented field per `DRUMS_*` variable,
 * resolved once as argument (overrides) → environment → default, and passed
 * down (startDaemon → SessionManager, OsworldService, the API, the image
 * builder). Nothing below the composition roots reads `process.env` for a
 * setting. A bad value is an `invalid_config` error naming the variable.
 * README.md's variable table is generated from FIELDS (scripts/gen-config-docs.ts).
 */
import { resolve } from 'node:path';
import { DrumsError } from './errors.ts';

export type LogFormat = 'text' | 'json';
export type LogLevel = 'debug' | 'info' | 'warn' | 'error';

export interface DaemonConfig {
  stateDir: string;
  instance: string | undefined;
  imagesDir: string;
  claimsDir: string;
  token: string | undefined;
  listen: string;
  port: number;
  runtime: string | undefined;
  subnetPool: string;
  userns: boolean;
  usernsUidBase: number;
  maxSessions: number;
  startConcurrency: number;
  readyTimeoutMs: number;
  rateLimit: number;
  rateBurst: number | undefined;
  fairSlots: number | undefined;
  fairQueue: number;
  a11yMirrorIdleS: number;
  a11yDeadlineMs: number;
  logFormat: LogFormat;
  logLevel: LogLevel;
  debianMirror: string | undefined;
  debianSecurityMirror: string | undefined;
  osworldUids: number[];
  osworldPeerCheck: boolean;
  osworldOpenTimeoutS: number;
  osworldRecordingStopS: number;
  osworldMaxBodyBytes: number;
  osworldMaxBufferedBodyBytes: number;
  debugKeepFailed: boolean;
  keepSessions: boolean;
  hostId: string | undefined;
  pools: string | undefined;
  poolsFile: string | undefined;
  poolRefillConcurrency: number | undefined;
  defaultCpus: number | undefined;
  memoryReserveMb: number | undefined;
  sessionMemoryMb: number;
  diskReserveMb: number;
  diskOvercommit: number;
  diskWriteMbps: number;
  diskReadMbps: number;
  episodeSessionMb: number;
  episodeMaxMb: number;
  episodeKeepDays: number;
  episodeKeep: number;
  testFailStep: string | undefined;
  testHooks: boolean;
  browserZygote: boolean;
  benchHooks: boolean;
  benchStoredFrame: boolean;
}

interface Field<T> {
  env: string;
  /** One line for the README table. */
  doc: string;
  default: T;
  /** How the default reads in the README, when it is not the value itself. */
  defaultDoc?: string;
  /** Throws a message (what is wanted) on a bad value. */
  parse: (raw: string) => T;
  /** Who sets it: the README groups test-only fields apart. */
  audience?: 'test';
}

const str = (raw: string): string => raw;
function int(min: number, max = Number.MAX_SAFE_INTEGER) {
  return (raw: string): number => {
    const n = Number(raw);
    if (!/^\d+$/.test(raw.trim()) || !Number.isSafeInteger(n) || n < min || n > max) throw `must be an integer from ${min} to ${max}`;
    return n;
  };
}
function number(min: number) {
  return (raw: string): number => {
    const n = Number(raw);
    if (!Number.isFinite(n) || n < min) throw `must be a number of at least ${min}`;
    return n;
  };
}
function bool(raw: string): boolean {
  if (/^(1|true|yes|on)$/i.test(raw)) return true;
  if (/^(0|false|no|off)$/i.test(raw)) return false;
  throw 'must be 1 or 0';
}
function oneOf<T extends string>(...values: T[]) {
  return (raw: string): T => {
    if (!(values as string[]).includes(raw)) throw `must be one of ${values.join(', ')}`;
    return raw as T;
  };
}
/** A directory; a relative one is taken from the working directory, as before. */
function dirPath(raw: string): string {
  if (raw.includes('\0')) throw 'must be a path without NUL';
  return resolve(raw);
}

const GiB = 1024 ** 3;

/** Every field, in README order. */
export const FIELDS: { [K in keyof DaemonConfig]: Field<DaemonConfig[K]> } = {
  stateDir: { env: 'DRUMS_STATE_DIR', doc: 'state directory; one directory = one independent instance', default: '/var/lib/drums', parse: dirPath },
  instance: {
    env: 'DRUMS_INSTANCE',
    doc: 'short name in every host object this instance makes (1-5 of a-z, 0-9)',
    default: undefined,
    defaultDoc: 'hash of the state directory',
    parse: (raw) => {
      if (!/^[a-z0-9]{1,5}$/.test(raw)) throw 'must be 1-5 lowercase letters or digits';
      return raw;
    },
  },
  imagesDir: {
    env: 'DRUMS_IMAGE_DIR',
    doc: 'built images (shared by instances; content-addressed by recipe hash)',
    default: '/var/lib/drums/images',
    parse: dirPath,
  },
  claimsDir: {
    env: 'DRUMS_CLAIMS_DIR',
    doc: 'where instances claim subnets and uid ranges (host-wide, shared by all instances)',
    default: '/run/drums/subnets',
    parse: dirPath,
  },
  token: {
    env: 'DRUMS_TOKEN',
    doc: 'bearer token (the CLI and clients send it too)',
    default: undefined,
    defaultDoc: 'generated into `<state>/token`',
    parse: str,
  },
  listen: { env: 'DRUMS_LISTEN', doc: 'address to listen on (non-loopback needs `--allow-remote`)', default: '127.0.0.1', parse: str },
  port: { env: 'DRUMS_PORT', doc: 'port to listen on (0: any free port)', default: 7450, parse: int(0, 65535) },
  runtime: { env: 'DRUMS_RUNTIME', doc: '`runc`, `crun` or a path', default: undefined, defaultDoc: 'crun on cgroup v2, else runc', parse: str },
  subnetPool: { env: 'DRUMS_SUBNET_POOL', doc: 'IPv4 pool cut into one /30 per session', default: '10.231.0.0/16', parse: str },
  userns: {
    env: 'DRUMS_USERNS',
    doc: 'a user namespace per session by default (each its own host uid range; a spec may ask otherwise with `userns`; `0` gives sessions the host ids)',
    default: true,
    defaultDoc: '`1`',
    parse: bool,
  },
  usernsUidBase: {
    env: 'DRUMS_USERNS_UID_BASE',
    doc: 'first host uid of the 16384 per-session ranges of 65536 (must not overlap /etc/subuid)',
    default: 2 ** 30,
    parse: int(65536, 2 ** 32 - 1 - 16384 * 65536),
  },
  maxSessions: { env: 'DRUMS_MAX_SESSIONS', doc: 'sessions one daemon holds', default: 128, parse: int(1) },
  startConcurrency: { env: 'DRUMS_START_CONCURRENCY', doc: 'creates/resets in flight at once', default: 4, parse: int(1) },
  readyTimeoutMs: { env: 'DRUMS_READY_TIMEOUT_MS', doc: 'how long a create or reset waits for the desktop to be ready', default: 60_000, parse: int(1) },
  rateLimit: { env: 'DRUMS_RATE_LIMIT', doc: 'API requests per second per token (0: no limit)', default: 5000, parse: number(0) },
  rateBurst: { env: 'DRUMS_RATE_BURST', doc: 'API burst per token', default: undefined, defaultDoc: '2 × `DRUMS_RATE_LIMIT`', parse: number(1) },
  fairSlots: {
    env: 'DRUMS_FAIR_SLOTS',
    doc: 'observe/act requests served at once, over all sessions; the rest wait per session, least-served session first',
    default: undefined,
    defaultDoc: 'max(4, 2 × cores)',
    parse: int(1),
  },
  fairQueue: { env: 'DRUMS_FAIR_QUEUE', doc: "one session's observe/act requests that may wait; more get 429", default: 64, parse: int(1) },
  a11yDeadlineMs: {
    env: 'DRUMS_A11Y_DEADLINE_MS',
    doc: 'the longest one accessibility-tree read of the API walks before it returns what it has, marked truncated, in ms',
    default: 10_000,
    parse: int(100),
  },
  a11yMirrorIdleS: {
    env: 'DRUMS_A11Y_MIRROR_IDLE_S',
    doc: "seconds without a tree read after which a session's accessibility mirror stops (it starts at the next read); `0`: no mirror, every read walks",
    default: 120,
    parse: int(0),
  },
  logFormat: { env: 'DRUMS_LOG', doc: '`json` for JSON lines on stderr', default: 'text', parse: oneOf('text', 'json') },
  logLevel: { env: 'DRUMS_LOG_LEVEL', doc: '`debug`, `info`, `warn` or `error`', default: 'info', parse: oneOf('debug', 'info', 'warn', 'error') },
  debianMirror: {
    env: 'DRUMS_DEBIAN_MIRROR',
    doc: 'Debian mirror for image builds',
    default: undefined,
    defaultDoc: "the host's apt sources, else deb.debian.org",
    parse: str,
  },
  debianSecurityMirror: {
    env: 'DRUMS_DEBIAN_SECURITY_MIRROR',
    doc: 'Debian security mirror for image builds',
    default: undefined,
    defaultDoc: "the host's apt sources, else security.debian.org",
    parse: str,
  },
  osworldUids: {
    env: 'DRUMS_OSWORLD_UIDS',
    doc: "host uids (comma-separated) besides the daemon's own that may connect to a session's OSWorld ports",
    default: [],
    defaultDoc: '',
    parse: (raw) =>
      raw
        .split(',')
        .map((u) => u.trim())
        .filter(Boolean)
        .map((u) => {
          if (!/^\d+$/.test(u)) throw 'must be uids separated by commas';
          return Number(u);
        }),
  },
  osworldPeerCheck: {
    env: 'DRUMS_OSWORLD_PEER_CHECK',
    doc: '`0` lets any local uid connect to the OSWorld ports',
    default: true,
    defaultDoc: '`1`',
    parse: bool,
  },
  osworldOpenTimeoutS: {
    env: 'DRUMS_OSWORLD_OPEN_TIMEOUT_S',
    doc: "OSWorld `open_file`'s longest wait for the window, in seconds",
    default: 1800,
    parse: int(1),
  },
  osworldRecordingStopS: {
    env: 'DRUMS_OSWORLD_RECORDING_STOP_S',
    doc: "OSWorld `/end_recording`'s longest wait for ffmpeg to finish the file after SIGINT, in seconds; then ffmpeg is killed inside the session (OSWorld's own server waits 15 s, on a VM of its own)",
    default: 60,
    parse: int(1),
  },
  osworldMaxBodyBytes: {
    env: 'DRUMS_OSWORLD_MAX_BODY',
    doc: "OSWorld guest server's largest request (an upload streams into the session) or file, in bytes",
    default: GiB,
    defaultDoc: '1 GiB',
    parse: int(1),
  },
  osworldMaxBufferedBodyBytes: {
    env: 'DRUMS_OSWORLD_MAX_BUFFERED_BODY',
    doc: "OSWorld guest server's largest request body held whole in the daemon (every route but `/setup/upload`, which streams), in bytes; at most DRUMS_OSWORLD_MAX_BODY",
    default: 16 * 1024 * 1024,
    defaultDoc: '16 MiB',
    parse: int(1),
  },
  debugKeepFailed: {
    env: 'DRUMS_DEBUG_KEEP_FAILED',
    doc: '`1` leaves a failed create in place for inspection (the sweep removes it)',
    default: false,
    defaultDoc: '`0`',
    parse: bool,
  },
  keepSessions: {
    env: 'DRUMS_KEEP_SESSIONS',
    doc: '`1`: a stopped daemon leaves its sessions running, for the next daemon of the instance to adopt',
    default: false,
    defaultDoc: '`0`',
    parse: bool,
  },
  hostId: {
    env: 'DRUMS_HOST_ID',
    doc: "this host's stable id in `GET /v1/host` (e.g. the Kubernetes node name)",
    default: undefined,
    defaultDoc: 'generated once into `<state>/host-id`',
    parse: str,
  },
  pools: {
    env: 'DRUMS_POOLS',
    doc: 'warm pools, as JSON: `{"web": {"size": 8, "template": {SessionSpec}}}` ([docs/pools.md](docs/pools.md))',
    default: undefined,
    defaultDoc: 'none',
    parse: str,
  },
  poolsFile: { env: 'DRUMS_POOLS_FILE', doc: 'warm pools, as a JSON file of the same shape', default: undefined, defaultDoc: 'none', parse: dirPath },
  poolRefillConcurrency: {
    env: 'DRUMS_POOL_REFILL_CONCURRENCY',
    doc: 'pool refills in flight at once (a share of the create admission)',
    default: undefined,
    defaultDoc: 'half of `DRUMS_START_CONCURRENCY`',
    parse: int(1),
  },
  defaultCpus: {
    env: 'DRUMS_DEFAULT_CPUS',
    doc: "a session's CPU quota in cores when its spec sets none (0: no quota)",
    default: undefined,
    defaultDoc: "half the host's cores, at least 1",
    parse: number(0),
  },
  memoryReserveMb: {
    env: 'DRUMS_MEMORY_RESERVE_MB',
    doc: 'memory admission: MiB of MemAvailable kept free; creates beyond it get 503 insufficient_memory',
    default: undefined,
    defaultDoc: '5% of RAM, at least 1024',
    parse: number(0),
  },
  sessionMemoryMb: {
    env: 'DRUMS_SESSION_MEMORY_MB',
    doc: "memory admission: a session's expected footprint in MiB (at most its memoryMb)",
    default: 256,
    parse: number(0),
  },
  diskReserveMb: {
    env: 'DRUMS_DISK_RESERVE_MB',
    doc: 'disk admission: MiB of the state filesystem kept free; creates beyond it get 503 insufficient_disk',
    default: 2048,
    parse: number(0),
  },
  diskOvercommit: {
    env: 'DRUMS_DISK_OVERCOMMIT',
    doc: "disk admission: factor on every session's unwritten quota (1: no overcommit)",
    default: 1,
    parse: number(0),
  },
  diskWriteMbps: {
    env: 'DRUMS_DISK_WRITE_MBPS',
    doc: "a session disk's write bandwidth in MiB/s, so a disk-filling session does not slow its neighbours (0: no limit); a spec may ask for less with `diskWriteMbps`",
    default: 100,
    parse: number(0),
  },
  diskReadMbps: {
    env: 'DRUMS_DISK_READ_MBPS',
    doc: "a session's read bandwidth in MiB/s on its disk's loop device and on the disk under the images, so a session reading in a loop does not starve the host's disk (0: no limit); a spec may ask for less with `diskReadMbps`",
    default: 200,
    parse: number(0),
  },
  episodeSessionMb: {
    env: 'DRUMS_EPISODE_SESSION_MB',
    doc: "MiB one session's recorded episodes (spec `record`) may hold, all its generations together; past it the session's recording stops (`recording.stopped: session_quota`) and the session goes on (docs/episodes.md)",
    default: 256,
    parse: int(1),
  },
  episodeMaxMb: {
    env: 'DRUMS_EPISODE_MAX_MB',
    doc: 'MiB every recorded episode of this instance may hold together (`<state>/episodes`); past it recordings stop (`recording.stopped: host_quota`) until episodes are deleted',
    default: 4096,
    parse: int(1),
  },
  episodeKeepDays: {
    env: 'DRUMS_EPISODE_KEEP_DAYS',
    doc: 'retention: closed episodes are deleted this many days after they closed (checked at start and every 5 minutes; 0: kept until deleted by hand); open ones never are (docs/episodes.md)',
    default: 30,
    parse: number(0),
  },
  episodeKeep: {
    env: 'DRUMS_EPISODE_KEEP',
    doc: 'retention: at most this many closed episodes on the instance, the oldest deleted first (0: no count limit)',
    default: 0,
    parse: int(0),
  },
  browserZygote: {
    env: 'DRUMS_BROWSER_ZYGOTE',
    doc: "`1` keeps Chromium's zygote in sessions without a user namespace (by default they run it with `--no-zygote`, so they can be memory-forked; docs/pools.md)",
    default: false,
    defaultDoc: '`0`',
    parse: bool,
  },
  testFailStep: { env: 'DRUMS_TEST_FAIL_STEP', doc: 'fail every create at this step (tests)', default: undefined, parse: str, audience: 'test' },
  testHooks: {
    env: 'DRUMS_TEST_HOOKS',
    doc: '`1` honours the `drums.test.failStep` label (tests)',
    default: false,
    defaultDoc: '`0`',
    parse: bool,
    audience: 'test',
  },
  benchHooks: {
    env: 'DRUMS_BENCH_HOOKS',
    doc: "`1` honours the bench's `drums.bench.*` labels (the bench's private daemon)",
    default: false,
    defaultDoc: '`0`',
    parse: bool,
    audience: 'test',
  },
  benchStoredFrame: {
    env: 'DRUMS_BENCH_STORED_FRAME',
    doc: "bench only (`drums bench steps`' ceiling arm): `1` makes every screenshot of a session the one it first captured with the same options, so a step costs the HTTP path and its actions but no capture or encode; screenshots go stale, never set it for real use",
    default: false,
    defaultDoc: '`0`',
    parse: bool,
    audience: 'test',
  },
};

/**
 * Variables read outside the daemon (by the CLI, the clients and scripts),
 * documented here so the README lists every `DRUMS_*` variable in one table.
 * `client/` may not import `common/`, so these stay read where they are used.
 */
export const OTHER_VARIABLES: { env: string; doc: string; default: string }[] = [
  { env: 'DRUMS_URL', doc: 'daemon URL for the CLI and clients', default: '`daemon.json` in the state directory' },
  { env: 'DRUMS_PYTHON', doc: 'Python for `drums osworld run`', default: '`.runtime/venv/bin/python`' },
  { env: 'DRUMS_NODE', doc: 'Node for `bin/drums`', default: '`.runtime/node/bin/node`' },
  {
    env: 'DRUMS_MALLOC',
    doc: "the daemon's allocator, chosen by `bin/drums serve`: `jemalloc` (libjemalloc2, which hands freed pages back within a second, so the daemon's RSS follows what is live; docs/bench.md, soak) or `glibc`",
    default: '`jemalloc` where libjemalloc2 is installed',
  },
  { env: 'DRUMS_OSWORLD_CACHE', doc: 'the shared OSWorld asset cache (`drums osworld run|assets --cache`)', default: '`<state dir>/osworld-cache`' },
  {
    env: 'DRUMS_OSWORLD_MIRROR',
    doc: "a mirror of OSWorld's file store for `drums osworld assets fetch` (`--mirror`)",
    default: 'the Hugging Face file store',
  },
  {
    env: 'DRUMS_OSWORLD_WINDOW_WAIT',
    doc: "seconds `drums osworld run` waits for a task's app windows after setup (`drums bench osworld-run` sets 300)",
    default: '60',
  },
  {
    env: 'DRUMS_OSWORLD_OBSERVE_SETTLE',
    doc: "seconds `drums osworld run` waits after a task's first observation before it looks for its apps' windows again (an app lost after observing)",
    default: '2',
  },
  { env: 'DRUMS_OSWORLD_SRC', doc: 'set by `drums osworld run --osworld-src DIR` for the Python driver (the checkout whose desktop_env runs)', default: '' },
  {
    env: 'DRUMS_OSWORLD_TASKS',
    doc: "OSWorld's task files, a folder per domain, for the tests and `drums bench osworld-run` (src/testing/osworld-data.ts)",
    default: '`../shared/osworld-tasks` next to the repository',
  },
  {
    env: 'DRUMS_OSWORLD_CHECKOUT',
    doc: 'an OSWorld checkout for the tests (src/testing/osworld-data.ts); not `DRUMS_OSWORLD_SRC`',
    default: '`../shared/osworld-src` next to the repository',
  },
];

export type ConfigOverrides = { [K in keyof DaemonConfig]?: DaemonConfig[K] | undefined };

/** Argument → environment → default, for every field; throws invalid_config naming the variable. */
export function loadConfig(env: Record<string, string | undefined> = process.env, overrides: ConfigOverrides = {}): DaemonConfig {
  const out: Record<string, unknown> = {};
  for (const [key, f] of Object.entries(FIELDS) as [keyof DaemonConfig, Field<unknown>][]) {
    if (overrides[key] !== undefined) {
      out[key] = overrides[key];
      continue;
    }
    const raw = env[f.env];
    if (raw === undefined || raw === '') {
      out[key] = f.default;
      continue;
    }
    try {
      out[key] = f.parse(raw);
    } catch (e) {
      throw new DrumsError('invalid_config', `${f.env}=${JSON.stringify(raw)}: ${typeof e === 'string' ? e : (e as Error).message}`, {
        details: { variable: f.env },
      });
    }
  }
  return out as unknown as DaemonConfig;
}

/** The README's table, from FIELDS and OTHER_VARIABLES. */
export function configTable(): string {
  const code = (v: unknown): string => (v === undefined || (Array.isArray(v) && v.length === 0) ? '' : `\`${Array.isArray(v) ? v.join(',') : String(v)}\``);
  const rows = ['| variable | meaning | default |', '|---|---|---|'];
  const fields = Object.values(FIELDS) as Field<unknown>[];
  for (const f of fields.filter((x) => x.audience !== 'test')) rows.push(`| \`${f.env}\` | ${f.doc} | ${f.defaultDoc ?? code(f.default)} |`);
  for (const v of OTHER_VARIABLES) rows.push(`| \`${v.env}\` | ${v.doc} | ${v.default} |`);
  for (const f of fields.filter((x) => x.audience === 'test')) rows.push(`| \`${f.env}\` | ${f.doc} | ${f.defaultDoc ?? code(f.default)} |`);
  return rows.join('\n');
}
