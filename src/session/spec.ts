import { ValidationError } from '../common/errors.ts';
import { defaultSessionCpus } from '../host/resources.ts';

/** What a client asks for when it creates a session (validated before any side effect). */
export interface SessionSpec {
  image: string;
  url?: string;
  screen: { width: number; height: number; depth: number };
  memoryBytes: number;
  /** Size of the session's own filesystem (its writable layer); writes past it fail with ENOSPC. */
  diskBytes: number;
  /** Read and write bandwidth of the session's disk (reads also from the image's device), MiB/s; undefined: the daemon's DRUMS_DISK_READ_MBPS / DRUMS_DISK_WRITE_MBPS. */
  diskReadMbps?: number;
  diskWriteMbps?: number;
  cpus: number;
  pids: number;
  egress: boolean;
  /** TCP ports on the session's gateway address that the session may connect to. */
  hostPorts: number[];
  browserFlags: string[];
  /**
   * false: Chromium runs without its own sandbox even where the session has a user namespace (what a
   * memory fork of it needs: CRIU can't checkpoint the sandbox's nested namespaces); undefined: with it.
   */
  browserSandbox?: false;
  /** Seconds after which the daemon destroys the session (0 = never). */
  ttlSeconds: number;
  labels: Record<string, string>;
  /** A user namespace of its own (its own host uid range); undefined: the daemon's default (DRUMS_USERNS). */
  userns?: boolean;
  /** Record every attempt as an episode (src/session/episodes.ts); undefined: not recorded. */
  record?: RecordSpec;
  /**
   * How many standbys the session keeps: fresh sessions of its own spec, booted ahead of time, that
   * a reset swaps in instead of booting (src/session/standby.ts); undefined: none.
   */
  standbys?: number;
}

/** What a recorded session keeps (docs/episodes.md): frames at up to `frames` per second (0: hashes only), and tree reads whole when `a11y`. */
export interface RecordSpec {
  frames: number;
  a11y: boolean;
}

/** The most frames per second an episode keeps. */
export const MAX_RECORD_FPS = 30;

/** The label the daemon sets on a warm pool's sessions (the pool's name); clients may not set it. */
export const POOL_LABEL = 'drums.pool';
/** The label the daemon sets on a standby (its owner's id; src/session/standby.ts); clients may not set it. */
export const STANDBY_LABEL = 'drums.standby.of';

export const DEFAULTS = {
  image: 'default',
  screen: { width: 1280, height: 800, depth: 24 },
  memoryBytes: 2 * 1024 ** 3,
  diskBytes: 512 * 1024 ** 2,
  pids: 1024,
};

const SPEC_FIELDS = [
  'image',
  'url',
  'screen',
  'memoryMb',
  'diskMb',
  'diskReadMbps',
  'diskWriteMbps',
  'cpus',
  'pids',
  'egress',
  'hostPorts',
  'browserFlags',
  'browserSandbox',
  'ttlSeconds',
  'labels',
  'userns',
  'record',
  'standbys',
];
/** The most standbys a session may keep (each one costs a whole session's memory; docs/pools.md). */
export const MAX_STANDBYS = 4;
const bad = (field: string, msg: string) => new ValidationError(field, msg, 'invalid_spec');

function int(v: unknown, field: string, min: number, max: number): number {
  if (typeof v !== 'number' || !Number.isInteger(v)) throw bad(field, `must be an integer, got ${JSON.stringify(v)}`);
  if (v < min || v > max) throw bad(field, `must be within ${min}..${max}, got ${v}`);
  return v;
}

export function parseScreen(v: unknown, field = 'screen'): SessionSpec['screen'] {
  let width: unknown,
    height: unknown,
    depth: unknown = 24;
  if (typeof v === 'string') {
    const m = /^(\d{1,6})x(\d{1,6})(?:x(\d{1,2}))?$/.exec(v);
    if (!m) throw bad(field, `must look like 1280x800 or 1280x800x24, got '${v}'`);
    width = Number(m[1]);
    height = Number(m[2]);
    if (m[3]) depth = Number(m[3]);
  } else if (v && typeof v === 'object') {
    ({ width, height } = v as Record<string, unknown>);
    depth = (v as Record<string, unknown>).depth ?? 24;
  } else {
    throw bad(field, 'must be a string like 1280x800 or an object {width, height}');
  }
  const w = int(width, `${field}.width`, 320, 7680);
  const h = int(height, `${field}.height`, 200, 4320);
  const d = int(depth, `${field}.depth`, 16, 24);
  if (d !== 16 && d !== 24) throw bad(`${field}.depth`, 'must be 16 or 24');
  return { width: w, height: h, depth: d };
}

const URL_SCHEMES = ['http:', 'https:', 'about:', 'data:', 'file:', 'chrome:'];
const FLAG_RE = /^--[a-z0-9][a-z0-9-]*(=[A-Za-z0-9_.,:/=+-]*)?$/;

/**
 * `defaultCpus`: the CPU quota of a spec that sets none. The daemon passes the one
 * resolved from its config (`SessionManager.defaultCpus`, DRUMS_DEFAULT_CPUS);
 * without it, half the host's cores, at least 1: a busy session cannot take the whole host.
 */
export function parseSpec(body: unknown, defaultCpus: number = defaultSessionCpus()): SessionSpec {
  if (body === undefined || body === null) body = {};
  if (typeof body !== 'object' || Array.isArray(body)) throw bad('body', 'must be a JSON object');
  const b = body as Record<string, unknown>;
  for (const k of Object.keys(b)) if (!SPEC_FIELDS.includes(k)) throw bad(k, `unknown field; allowed: ${SPEC_FIELDS.join(', ')}`);

  const image = b.image ?? DEFAULTS.image;
  if (typeof image !== 'string' || !/^[a-z0-9][a-z0-9._-]{0,63}$/.test(image)) throw bad('image', 'must be an image name like "default"');

  let url: string | undefined;
  if (b.url !== undefined && b.url !== null) {
    if (typeof b.url !== 'string' || b.url.length > 8192) throw bad('url', 'must be a string of at most 8192 characters');
    let parsed: URL;
    try {
      parsed = new URL(b.url);
    } catch {
      throw bad('url', `not a valid URL: '${b.url.slice(0, 100)}'`);
    }
    if (!URL_SCHEMES.includes(parsed.protocol)) throw bad('url', `scheme must be one of ${URL_SCHEMES.join(' ')}`);
    url = b.url;
  }
  const screen = b.screen === undefined ? { ...DEFAULTS.screen } : parseScreen(b.screen);
  const memoryBytes = b.memoryMb === undefined ? DEFAULTS.memoryBytes : int(b.memoryMb, 'memoryMb', 128, 65536) * 1024 ** 2;
  const diskBytes = b.diskMb === undefined ? DEFAULTS.diskBytes : int(b.diskMb, 'diskMb', 64, 1024 * 1024) * 1024 ** 2;
  // Bandwidth: at most the daemon's limit, which admission checks (422 limit_exceeds_host); the bound here only refuses the absurd.
  const diskReadMbps = b.diskReadMbps === undefined ? undefined : int(b.diskReadMbps, 'diskReadMbps', 1, 1024 * 1024);
  const diskWriteMbps = b.diskWriteMbps === undefined ? undefined : int(b.diskWriteMbps, 'diskWriteMbps', 1, 1024 * 1024);
  let cpus = defaultCpus;
  if (b.cpus !== undefined) {
    if (typeof b.cpus !== 'number' || !(b.cpus >= 0.05 && b.cpus <= 256)) throw bad('cpus', `must be a number within 0.05..256, got ${JSON.stringify(b.cpus)}`);
    cpus = b.cpus;
  }
  const pids = b.pids === undefined ? DEFAULTS.pids : int(b.pids, 'pids', 64, 65536);
  if (b.egress !== undefined && typeof b.egress !== 'boolean') throw bad('egress', 'must be a boolean');
  const hostPorts: number[] = [];
  if (b.hostPorts !== undefined) {
    if (!Array.isArray(b.hostPorts) || b.hostPorts.length > 16) throw bad('hostPorts', 'must be an array of at most 16 ports');
    b.hostPorts.forEach((p, i) => hostPorts.push(int(p, `hostPorts[${i}]`, 1, 65535)));
  }
  const browserFlags: string[] = [];
  if (b.browserFlags !== undefined) {
    if (!Array.isArray(b.browserFlags) || b.browserFlags.length > 32) throw bad('browserFlags', 'must be an array of at most 32 flags');
    b.browserFlags.forEach((f, i) => {
      if (typeof f !== 'string' || !FLAG_RE.test(f))
        throw bad(`browserFlags[${i}]`, 'must look like --flag or --flag=value (letters, digits and .,:/=+-_ only)');
      browserFlags.push(f);
    });
  }
  if (b.browserSandbox !== undefined && typeof b.browserSandbox !== 'boolean') throw bad('browserSandbox', 'must be a boolean');
  const ttlSeconds = b.ttlSeconds === undefined ? 0 : int(b.ttlSeconds, 'ttlSeconds', 0, 7 * 24 * 3600);
  const labels: Record<string, string> = {};
  if (b.labels !== undefined) {
    if (!b.labels || typeof b.labels !== 'object' || Array.isArray(b.labels)) throw bad('labels', 'must be an object of strings');
    const entries = Object.entries(b.labels as Record<string, unknown>);
    if (entries.length > 32) throw bad('labels', 'at most 32 labels');
    for (const [k, v] of entries) {
      if (!/^[A-Za-z0-9_./-]{1,63}$/.test(k)) throw bad(`labels.${k}`, 'key must be 1-63 of A-Z a-z 0-9 _ . / -');
      if (typeof v !== 'string' || v.length > 256) throw bad(`labels.${k}`, 'value must be a string of at most 256 characters');
      labels[k] = v;
    }
    if (STANDBY_LABEL in labels) throw bad(`labels.${STANDBY_LABEL}`, 'is set by the daemon on standbys; choose another key');
  }
  if (b.userns !== undefined && typeof b.userns !== 'boolean') throw bad('userns', 'must be a boolean');
  const record = b.record === undefined || b.record === null || b.record === false ? undefined : parseRecord(b.record);
  const standbys = b.standbys === undefined ? 0 : int(b.standbys, 'standbys', 0, MAX_STANDBYS);
  return {
    image,
    url,
    screen,
    memoryBytes,
    diskBytes,
    ...(diskReadMbps === undefined ? {} : { diskReadMbps }),
    ...(diskWriteMbps === undefined ? {} : { diskWriteMbps }),
    cpus,
    pids,
    egress: b.egress === true,
    hostPorts,
    browserFlags,
    // Absent when true (the default): a spec with the sandbox compares equal to one made before the field.
    ...(b.browserSandbox === false ? { browserSandbox: false as const } : {}),
    ttlSeconds,
    labels,
    ...(b.userns === undefined ? {} : { userns: b.userns }),
    ...(record ? { record } : {}),
    // Absent when 0: a spec without standbys compares equal to one made before the field (pool templates).
    ...(standbys ? { standbys } : {}),
  };
}

/** `record`: true (actions and observations, no frames), or `{frames?: fps, a11y?: bool}`. */
function parseRecord(v: unknown): RecordSpec {
  if (v === true) return { frames: 0, a11y: false };
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw bad('record', 'must be true or an object {frames?: fps, a11y?: boolean}');
  const r = v as Record<string, unknown>;
  for (const k of Object.keys(r)) if (k !== 'frames' && k !== 'a11y') throw bad(`record.${k}`, 'unknown field; allowed: frames, a11y');
  let frames = 0;
  if (r.frames !== undefined) {
    if (typeof r.frames !== 'number' || !Number.isFinite(r.frames) || r.frames < 0 || r.frames > MAX_RECORD_FPS)
      throw bad('record.frames', `must be a number of frames per second within 0..${MAX_RECORD_FPS}, got ${JSON.stringify(r.frames)}`);
    frames = r.frames;
  }
  if (r.a11y !== undefined && typeof r.a11y !== 'boolean') throw bad('record.a11y', 'must be a boolean');
  return { frames, a11y: r.a11y === true };
}

/** The session's disk bandwidth in bytes/s (0: none): its spec's, else the daemon's. */
export function diskRates(
  spec: Pick<SessionSpec, 'diskReadMbps' | 'diskWriteMbps'>,
  config: { diskReadMbps: number; diskWriteMbps: number },
): { readBytesPerSecond: number; writeBytesPerSecond: number } {
  return {
    readBytesPerSecond: (spec.diskReadMbps ?? config.diskReadMbps) * 1024 ** 2,
    writeBytesPerSecond: (spec.diskWriteMbps ?? config.diskWriteMbps) * 1024 ** 2,
  };
}
