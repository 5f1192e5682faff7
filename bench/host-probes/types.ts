/** What every host probe is given (index.ts runs them; the probe modules import only this). */
import type { PrivateDaemon } from '../../src/client/private-daemon.ts';
import type { Probe } from '../probe.ts';

export interface HostProbeContext {
  /** A private daemon of the audited configuration (a user namespace per session). */
  d: PrivateDaemon;
  arm: string;
  progress: (s: string) => void;
}

export type HostProbe = (ctx: HostProbeContext) => Promise<Probe[]>;
