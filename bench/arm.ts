import type { DrumsClient, SessionInfo } from '../src/client/client.ts';

/**
 * Arms: session configurations an experiment compares. Each arm says how to
 * create its sessions, what one agent "step" is for it, and whether it can run
 * on this host (a reason to skip it otherwise).
 */
export interface ArmOptions {
  osworldSrc?: string;
}

/** What an arm's hooks see: the run's client, the daemon instance, and the trial's data object (stored in the record). */
export interface ArmCtx {
  c: DrumsClient;
  instance: string;
  quick: boolean;
  status: (s: string) => void;
  data: Record<string, unknown>;
}

/** Optional per-arm machinery beyond the create spec (the memory arms, bench/memory-arms.ts). */
export interface ArmHooks {
  /** Labels added to every create of this arm. */
  labels?: Record<string, string>;
  /** Environment the private daemon needs for this arm (e.g. DRUMS_BENCH_HOOKS=1). */
  daemonEnv?: Record<string, string>;
  /** Before the arm's trial (host knobs on); its originals are journalled. */
  enter?(ctx: ArmCtx): Promise<void>;
  /** After the arm's trial, sessions destroyed (host knobs restored). Runs even when the trial failed. */
  exit?(ctx: ArmCtx): Promise<void>;
  /** Before each memory reading (N = 0 included), after the common settle: returns data kept with that ladder point. */
  settle?(ctx: ArmCtx, sessions: SessionInfo[], n: number): Promise<Record<string, unknown>>;
  /** At the largest N, right after its reading. */
  collect?(ctx: ArmCtx, sessions: SessionInfo[]): Promise<void>;
}

export interface Arm {
  name: string;
  description: string;
  image: string;
  /** Set when the arm trades isolation or safety for its savings. */
  unsafe?: string;
  /** Why the arm cannot run here (null = runnable). */
  unavailable(o: ArmOptions): string | null;
  /** Extra fields of the create spec (browser = open Chromium on `url`). */
  spec(url?: string): Record<string, unknown>;
  /** Runs after a create or reset returns (the peer stack starts its VNC server here), with the page the session opens, if any. Counted in create/reset latency. */
  afterStart?(c: DrumsClient, s: SessionInfo, url?: string): Promise<void>;
  /** Runs after the runner destroyed one of the arm's sessions. */
  afterDestroy?(s: SessionInfo): Promise<void>;
  /** One agent step: act + observe. */
  step(c: DrumsClient, s: SessionInfo): Promise<void>;
  /** What one step is, for the record. */
  stepNote: string;
  hooks?: ArmHooks;
  /** A saving bought with isolation: what a session gives up (shown next to the memory figure). */
  tradeoff?: string;
  /**
   * The arm's isolation verdict when it does not come from a `drums audit`
   * record of its own: 'fail' by design (the run's own probe, if any, names the
   * failing probe), or the baseline's audit verdict for arms whose sessions are
   * baseline sessions.
   */
  isolation?: { kind: 'fail-by-design'; probe: string; why: string } | { kind: 'as-baseline'; why: string };
}
