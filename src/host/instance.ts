import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, realpathSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { DaemonConfig } from '../common/config.ts';
import { DrumsError } from '../common/errors.ts';
import { checkRootOnly } from './safe-fs.ts';

/**
 * A Drums instance is one state directory. Every host object it makes carries
 * the instance's short name, so two instances (two test runs, say) never touch
 * each other's objects and `drums sweep` can find everything one left behind.
 */
export interface Instance {
  stateDir: string;
  /** 5 hex chars derived from the state dir (or DRUMS_INSTANCE). */
  name: string;
  imagesDir: string;
  sessionsDir: string;
  runcRoot: string;
  /** A tmpfs of this instance holding each session's bound directories (sockets, status, the init). */
  rtDir: string;
  /** Host-wide directory where instances claim subnets (shared by all instances). */
  claimsDir: string;
  /** DRUMS_RUNTIME: the OCI runtime asked for (a name or a path), else detected. */
  runtime?: string;
}

export const DEFAULT_STATE_DIR = '/var/lib/drums';

export type InstanceConfig = Pick<DaemonConfig, 'stateDir' | 'instance' | 'imagesDir' | 'claimsDir' | 'runtime'>;

/**
 * The instance a config names (creates the state directory). Refuses a state, image or claims
 * directory that is not root's alone, up to `/` (checkRootOnly): the daemon keeps the sessions'
 * bundles, disks and checkpoints there and acts on them as root, so a user who could write any
 * directory on that path could swap them for links to host files (or change every session's image).
 */
export function resolveInstance(config: InstanceConfig): Instance {
  const stateDir = resolve(config.stateDir);
  mkdirSync(stateDir, { recursive: true, mode: 0o700 });
  const real = realpathSync(stateDir);
  // The images (every session's lower layer) and the host-wide claims likewise, where they exist already.
  const dirs: [string, string][] = [
    ['DRUMS_STATE_DIR', real],
    ['DRUMS_IMAGE_DIR', resolve(config.imagesDir)],
    ['DRUMS_CLAIMS_DIR', resolve(config.claimsDir)],
  ];
  for (const [name, dir] of dirs) {
    if (dir !== real && !existsSync(dir)) continue;
    try {
      checkRootOnly(realpathSync(dir));
    } catch (e) {
      throw new DrumsError(
        'invalid_config',
        `${name} ${dir}: ${(e as Error).message}; give a directory that only root can write, on a path only root can write`,
      );
    }
  }
  const name = config.instance || createHash('sha256').update(real).digest('hex').slice(0, 5);
  return {
    stateDir: real,
    name,
    imagesDir: resolve(config.imagesDir),
    sessionsDir: join(real, 'sessions'),
    runcRoot: join(real, 'runc'),
    rtDir: join(real, 'rt'),
    claimsDir: config.claimsDir,
    runtime: config.runtime,
  };
}

/**
 * An instance's cgroups sit under one top cgroup, so that the daemon, a client on the host (a bench's
 * harness) and the sessions compete as siblings with known weights, and one sweep finds them all:
 *   drums-<inst>/daemon     the daemon (CPU controllers only)
 *   drums-<inst>/client     a client that asks for it (CPU controllers only)
 *   drums-<inst>/sessions/<id>  each session (every controller)
 */
export function instanceCgroup(instName: string): string {
  return `drums-${instName}`;
}

export function sessionsCgroup(instName: string): string {
  return `${instanceCgroup(instName)}/sessions`;
}

/** One session's cgroup, relative to a hierarchy's root (no leading slash). */
export function sessionCgroup(instName: string, sessionId: string): string {
  return `${sessionsCgroup(instName)}/${sessionId}`;
}

/** Host object names for one session of one instance. Interface names must fit in 15 bytes. */
export function objectNames(inst: Instance, sessionId: string, slot: number) {
  return {
    container: `drums-${inst.name}-${sessionId}`,
    netns: `drums-${inst.name}-${sessionId}`,
    hostVeth: `dr${inst.name}h${slot}`,
    cgroup: `/${sessionCgroup(inst.name, sessionId)}`,
    overlaySource: `drums-${inst.name}`,
  };
}

export function vethPrefix(inst: Instance): string {
  return `dr${inst.name}h`;
}

export function nftTableName(inst: Instance): string {
  return `drums_${inst.name}`;
}
