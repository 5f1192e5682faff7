import { cgroupPressure, memoryUsage, oomKills, type Pressure } from '../host/cgroup-fs.ts';
import { hostPressure } from '../host/resources.ts';
import type { SessionManager } from '../session/manager.ts';
import { idleCollections } from './metrics.ts';

type Gauge = { name: string; help: string; values: [Record<string, string>, number][] };

const psiGauges = (prefix: string, help: string, rows: [Record<string, string>, Pressure][]): Gauge[] => [
  {
    name: `${prefix}_pressure_avg10`,
    help: `${help}: share of the last 10 s (percent) in which some (or all, kind=full) tasks stalled on the resource (PSI).`,
    values: rows.map(([l, p]) => [{ ...l, resource: p.resource, kind: p.kind }, p.avg10]),
  },
  {
    name: `${prefix}_pressure_stall_seconds`,
    help: `${help}: total stall time (PSI), seconds.`,
    values: rows.map(([l, p]) => [{ ...l, resource: p.resource, kind: p.kind }, p.totalSeconds]),
  },
];

/**
 * Host and session resource gauges for /metrics: PSI (host-wide; per session
 * on cgroup v2), each session's memory use and OOM kills, and how many more
 * sessions admission would take.
 */
export function resourceGauges(mgr: SessionManager): Gauge[] {
  const sessions = mgr.list();
  const cap = mgr.capacity();
  return [
    ...psiGauges(
      'drums_host',
      'Host',
      hostPressure().map((p) => [{}, p]),
    ),
    ...psiGauges(
      'drums_session',
      'Per session (cgroup v2 only)',
      sessions.flatMap((s) => cgroupPressure(s.names.cgroup).map((p) => [{ session: s.id }, p] as [Record<string, string>, Pressure])),
    ),
    {
      name: 'drums_session_memory_bytes',
      help: "Memory the session's cgroup uses.",
      values: sessions.map((s) => [{ session: s.id }, memoryUsage(s.names.cgroup)]),
    },
    {
      name: 'drums_session_oom_kills',
      help: 'Processes the kernel killed at the session memory limit (this generation).',
      values: sessions.map((s) => [{ session: s.id }, oomKills(s.names.cgroup)]),
    },
    {
      name: 'drums_admission_more_sessions',
      help: 'How many more default sessions admission would take now, by resource.',
      values: [
        [{ resource: 'memory' }, cap.memory.moreSessions],
        [{ resource: 'disk' }, cap.disk.moreSessions],
      ],
    },
    {
      name: 'drums_daemon_memory_bytes',
      help: 'The daemon process: rss, V8 heap used/total, external (Buffers), arrayBuffers.',
      values: Object.entries(process.memoryUsage()).map(([kind, v]) => [{ kind }, v]),
    },
    { name: 'drums_daemon_idle_gc_total', help: 'Full garbage collections the daemon ran when its API went idle.', values: [[{}, idleCollections()]] },
    { name: 'drums_host_memory_available_bytes', help: 'MemAvailable.', values: [[{}, cap.memory.availableBytes]] },
    { name: 'drums_host_disk_free_bytes', help: 'Free bytes on the state filesystem.', values: [[{}, cap.disk.freeBytes]] },
  ];
}
