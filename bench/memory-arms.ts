import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { SessionInfo } from '../src/client/client.ts';
import type { ArmCtx, ArmHooks } from './arm.ts';
import { addZramSwap, changedKnobs, readKnob, removeZramSwap, restoreHostKnobs, setKnob, zramStat, type ZramSwap } from './host-knobs.ts';
import { cgroupCpuNs, cgroupDir, procCpuNs, sessionPids, sleep } from './measure.ts';

/**
 * The memory arms: KSM (prctl(PR_SET_MEMORY_MERGE) in the session init, ksmd
 * on; with and without ASLR) and zram-idle (idle sessions' memory pushed into a
 * zram swap device through their own memory cgroup). Each arm changes host
 * knobs only for the duration of its own trial (journalled and restored, see
 * host-knobs.ts), so the interleaved baseline runs on an untouched host.
 */

const KSM = '/sys/kernel/mm/ksm';
const ksmRead = (k: string) => Number(readKnob(`${KSM}/${k}`));
const ksmCounters = () =>
  Object.fromEntries(
    ['pages_shared', 'pages_sharing', 'pages_unshared', 'pages_volatile', 'full_scans', 'general_profit', 'ksm_zero_pages', 'pages_skipped']
      .filter((k) => existsSync(`${KSM}/${k}`))
      .map((k) => [k, ksmRead(k)]),
  );

/** PID of a kernel thread by name (ksmd, kswapd0), or undefined. */
export function kthreadPid(name: string): number | undefined {
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      if (readFileSync(`/proc/${d}/comm`, 'utf8').trim() !== name) continue;
      if (/^PPid:\s+2$/m.test(readFileSync(`/proc/${d}/status`, 'utf8'))) return Number(d);
    } catch {
      /* gone */
    }
  }
  return undefined;
}

/** CPU time (ns) of the host kernel threads the memory arms cost: ksmd and every kswapd. */
export function hostThreadsCpuNs(): Record<string, number> {
  const out: Record<string, number> = {};
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const comm = readFileSync(`/proc/${d}/comm`, 'utf8').trim();
      if (comm === 'ksmd' || /^kswapd\d+$/.test(comm)) out[comm] = procCpuNs(Number(d));
    } catch {
      /* gone */
    }
  }
  return out;
}

const r2 = (x: number) => Math.round(x * 100) / 100;
const mib = (bytes: number) => bytes / 1024 ** 2;

/** What share of a session's processes carry MMF_VM_MERGE_ANY (ksm_stat: "ksm_merge_any: yes"), and their KSM counters. */
function sessionKsm(instance: string, id: string): { processes: number; mergeAny: number; mergingPages: number; profitMiB: number; missing: string[] } {
  let processes = 0,
    mergeAny = 0,
    mergingPages = 0,
    profit = 0;
  const missing: string[] = [];
  for (const pid of sessionPids(instance, id)) {
    try {
      const st = readFileSync(`/proc/${pid}/ksm_stat`, 'utf8');
      const comm = readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
      processes++;
      if (/ksm_merge_any: yes/.test(st)) mergeAny++;
      else missing.push(comm);
      mergingPages += Number(/ksm_merging_pages (\d+)/.exec(st)?.[1] ?? 0);
      profit += Number(/ksm_process_profit (-?\d+)/.exec(st)?.[1] ?? 0);
    } catch {
      /* exited */
    }
  }
  return { processes, mergeAny, mergingPages, profitMiB: r2(mib(profit)), missing };
}

/**
 * Waits until KSM has merged what it will: pages_sharing read at each
 * completed full scan, stable once two consecutive full scans (after at least
 * two complete ones since the call) differ by under 2 % (or 256 pages); bounded.
 */
async function ksmSettle(maxMs: number): Promise<{ ms: number; stable: boolean; scans: number; pagesSharing: number; ksmdCpuMs: number }> {
  const t0 = performance.now();
  const ksmd = kthreadPid('ksmd');
  const c0 = ksmd ? procCpuNs(ksmd) : 0;
  let last = ksmRead('full_scans');
  const start = last;
  const atScan: number[] = [];
  let stable = false;
  while (performance.now() - t0 < maxMs) {
    await sleep(250);
    const fs = ksmRead('full_scans');
    if (fs === last) continue;
    last = fs;
    atScan.push(ksmRead('pages_sharing'));
    if (atScan.length >= 3) {
      const a = atScan[atScan.length - 2]!,
        b = atScan[atScan.length - 1]!;
      if (Math.abs(b - a) <= Math.max(0.02 * b, 256)) {
        stable = true;
        break;
      }
    }
  }
  return {
    ms: Math.round(performance.now() - t0),
    stable,
    scans: last - start,
    pagesSharing: ksmRead('pages_sharing'),
    ksmdCpuMs: ksmd ? Math.round((procCpuNs(ksmd) - c0) / 1e6) : NaN,
  };
}

/**
 * The cross-session probe: session A and session B each fill 1024 distinct
 * random pages from the same seed (the "secret" B holds; A's guess); A also
 * fills 1024 pages from a seed no one else has (control). All regions are
 * opted into KSM. A reports how many of its pages KSM merged
 * (/proc/self/ksm_merging_pages of each region's process) and then times a
 * one-byte write to each page: a write to a merged page takes a copy-on-write
 * fault, so A learns which of its guesses B holds from timing alone, without
 * reading any counter. Merged guess pages + no merged control pages = A
 * observed B's memory contents: FAIL.
 */
const PROBE_PY = `
import ctypes, mmap, random, sys, time
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(67, 1, 0, 0, 0) != 0:
    print('prctl-failed', ctypes.get_errno()); sys.exit(3)
role, seed, pages, wait = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
P = 4096
m = mmap.mmap(-1, pages * P, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
rng = random.Random(seed)
for i in range(pages):
    m[i * P:(i + 1) * P] = rng.randbytes(P)
# Merged = the region's page is present and no longer exclusively mapped
# (pagemap bit 56 clear): counted per region, so the interpreter's own pages
# (identical across the probe's processes) don't count. The regions' pages are
# distinct, so a shared one can only be shared with another process.
import struct
addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
def merged():
    with open('/proc/self/pagemap', 'rb') as f:
        f.seek((addr // P) * 8); data = f.read(pages * 8)
    return sum(1 for (e,) in struct.iter_unpack('<Q', data) if (e >> 63) & 1 and not (e >> 56) & 1)
print('filled', flush=True)
import os
STOP = '/tmp/.ksm-probe-stop'
t0 = time.time(); best = 0
while time.time() - t0 < wait:
    best = max(best, merged())
    if role == 'guess' and best >= pages * 0.9: break
    if role != 'guess' and os.path.exists(STOP): break
    time.sleep(0.25)
if role == 'guess':
    open(STOP, 'w').close()
if role == 'hold':
    print('held', best); sys.exit(0)
# Timing: one-byte writes, one per page (a merged page takes a COW fault).
def timed(n):
    out = []
    for i in range(n):
        t = time.perf_counter_ns(); m[i * P] = (m[i * P] + 1) & 255; out.append(time.perf_counter_ns() - t)
    out.sort(); return out[len(out) // 2]
print('result', best, round(time.time() - t0, 2), timed(min(256, pages)), int(open('/proc/self/ksm_merging_pages').read()))
`;

async function runProbe(ctx: ArmCtx, a: SessionInfo, b: SessionInfo, waitS: number): Promise<Record<string, unknown>> {
  const seed = Math.floor(Math.random() * 2 ** 31),
    control = seed + 1,
    pages = 1024;
  const script = Buffer.from(PROBE_PY).toString('base64');
  const run = (s: SessionInfo, role: string, sd: number, w: number) =>
    ctx.c.exec(s.id, {
      shell: `echo ${script} | base64 -d > /tmp/.ksm-probe-${role}.py && exec python3 /tmp/.ksm-probe-${role}.py ${role} ${sd} ${pages} ${w}`,
      timeoutMs: (w + 30) * 1000,
    });
  const sharing0 = ksmRead('pages_sharing');
  await Promise.all([a, b].map((s) => ctx.c.exec(s.id, { shell: 'rm -f /tmp/.ksm-probe-stop' })));
  // B holds the secret until told to stop; A's guess stops once merged (or at the timeout) and then stops A's control.
  const holderP = run(b, 'hold', seed, waitS + 10);
  const [guess, ctrl] = await Promise.all([run(a, 'guess', seed, waitS), run(a, 'control', control, waitS + 5)]);
  await ctx.c.exec(b.id, { shell: ': > /tmp/.ksm-probe-stop' }).catch(() => {});
  const holder = await holderP;
  type Side = { mergedPages?: number; seconds?: number; medianWriteNs?: number; processKsmMergingPages?: number; error?: string };
  const parse = (r: typeof guess): Side => {
    const m = /result (\d+) ([\d.]+) (\d+) (\d+)/.exec(r.stdout);
    return m
      ? { mergedPages: Number(m[1]), seconds: Number(m[2]), medianWriteNs: Number(m[3]), processKsmMergingPages: Number(m[4]) }
      : { error: (r.stdout + r.stderr).trim().slice(-300) || `exit ${r.exitCode}` };
  };
  const g = parse(guess),
    c = parse(ctrl);
  const detected = g.mergedPages !== undefined && c.mergedPages !== undefined && g.mergedPages >= pages * 0.5 && c.mergedPages <= pages * 0.05;
  const timing = g.medianWriteNs !== undefined && c.medianWriteNs !== undefined && g.medianWriteNs > 2 * c.medianWriteNs;
  return {
    pages,
    guess: g,
    control: c,
    holder: holder.stdout.trim().slice(-80),
    pagesSharingBefore: sharing0,
    pagesSharingAfter: ksmRead('pages_sharing'),
    crossSessionMerge: detected,
    cowTimingVisible: timing,
    verdict: detected ? 'fail' : 'not-observed',
  };
}

/** ksmd settings for the KSM arms (recorded). */
export const KSM_SETTINGS = { run: 1, pages_to_scan: 1000, sleep_millisecs: 20 };

export function ksmHooks(aslr: boolean): ArmHooks {
  let ksmd: number | undefined;
  let t0 = 0,
    c0 = 0;
  return {
    labels: { 'drums.bench.ksm': '1' },
    daemonEnv: { DRUMS_BENCH_HOOKS: '1' },
    async enter(ctx) {
      ksmd = kthreadPid('ksmd');
      if (!ksmd) throw new Error('no ksmd kernel thread');
      const original: Record<string, string> = {};
      for (const [k, v] of Object.entries(KSM_SETTINGS)) original[k] = setKnob(`${KSM}/${k}`, v);
      if (!aslr) original.randomize_va_space = setKnob('/proc/sys/kernel/randomize_va_space', 0);
      ctx.data.hostKnobs = {
        set: { ...KSM_SETTINGS, ...(aslr ? {} : { randomize_va_space: 0 }) },
        original,
        smart_scan: existsSync(`${KSM}/smart_scan`) ? readKnob(`${KSM}/smart_scan`) : null,
        max_page_sharing: readKnob(`${KSM}/max_page_sharing`),
        merge_across_nodes: readKnob(`${KSM}/merge_across_nodes`),
      };
      ctx.data.ksmAtEnter = ksmCounters();
      t0 = performance.now();
      c0 = procCpuNs(ksmd);
    },
    async exit(ctx) {
      if (ksmd && t0) {
        const ms = performance.now() - t0,
          cpu = (procCpuNs(ksmd) - c0) / 1e6;
        ctx.data.ksmdTrial = { wallMs: Math.round(ms), cpuMs: Math.round(cpu), pctOfCore: r2((cpu / ms) * 100) };
      }
      ctx.data.ksmAtExit = ksmCounters();
      const errors = restoreHostKnobs();
      ctx.data.knobsRestored = errors.length ? { errors } : true;
      if (errors.length) throw new Error(`could not restore host knobs: ${errors.join('; ')}`);
    },
    async settle(ctx, sessions, n) {
      const out: Record<string, unknown> = {};
      if (n > 0) {
        const per = sessions.map((s) => sessionKsm(ctx.instance, s.id));
        const miss = per.filter((p) => p.mergeAny < p.processes);
        out.mergeAny = {
          processes: per.reduce((a, p) => a + p.processes, 0),
          optedIn: per.reduce((a, p) => a + p.mergeAny, 0),
          notOptedIn: [...new Set(miss.flatMap((p) => p.missing))],
        };
        if (per.every((p) => p.mergeAny === 0))
          throw new Error('no session process carries ksm_merge_any: the session init did not opt in (is the daemon running with DRUMS_BENCH_HOOKS=1?)');
      }
      // At N = 0 nothing is opted in: ksmd has no process to scan (full_scans does not move), so there is nothing to wait for.
      if (n > 0) {
        ctx.status(`ksm: waiting for merging to settle at N=${n}`);
        out.settle = await ksmSettle(ctx.quick ? 45_000 : 120_000);
      }
      out.counters = ksmCounters();
      return { ksm: out };
    },
    async collect(ctx, sessions) {
      const per = sessions.map((s) => sessionKsm(ctx.instance, s.id));
      ctx.data.ksm = {
        counters: ksmCounters(),
        perSession: per.map((p) => ({ processes: p.processes, mergeAny: p.mergeAny, mergingPages: p.mergingPages, profitMiB: p.profitMiB })),
        knobsNow: changedKnobs(),
      };
      if (sessions.length >= 2) {
        ctx.status("ksm: cross-session merge probe (A guesses B's pages)");
        ctx.data.ksmProbe = await runProbe(ctx, sessions[0]!, sessions[1]!, ctx.quick ? 40 : 90);
      }
    },
  };
}

/** Pushes one session's memory out through its own memory cgroup (v1: a temporary lower limit, swappiness 100; v2: memory.reclaim). */
function pushSession(instance: string, id: string): Record<string, unknown> {
  const dir = cgroupDir(instance, id, 'memory');
  const harness0 = process.cpuUsage();
  const t0 = performance.now();
  if (existsSync(join(dir, 'memory.reclaim'))) {
    const cur = Number(readFileSync(join(dir, 'memory.current'), 'utf8'));
    let err: string | undefined;
    try {
      writeFileSync(join(dir, 'memory.reclaim'), `${Math.round(cur * 0.75)}`);
    } catch (e) {
      err = (e as NodeJS.ErrnoException).code;
    }
    const after = Number(readFileSync(join(dir, 'memory.current'), 'utf8'));
    const h = process.cpuUsage(harness0);
    return {
      how: 'v2 memory.reclaim',
      beforeMiB: r2(mib(cur)),
      afterMiB: r2(mib(after)),
      ms: Math.round(performance.now() - t0),
      reclaimCpuMs: r2((h.user + h.system) / 1000),
      ...(err ? { partial: err } : {}),
    };
  }
  const f = (x: string) => join(dir, x);
  const usage0 = Number(readFileSync(f('memory.usage_in_bytes'), 'utf8'));
  const limit0 = readFileSync(f('memory.limit_in_bytes'), 'utf8').trim();
  const swappiness0 = readFileSync(f('memory.swappiness'), 'utf8').trim();
  writeFileSync(f('memory.swappiness'), '100');
  let reached: number | null = null;
  const tried: number[] = [];
  try {
    for (const frac of [0.25, 0.4, 0.6, 0.8]) {
      const target = Math.max(Math.round(usage0 * frac), 24 * 1024 ** 2);
      tried.push(frac);
      try {
        writeFileSync(f('memory.limit_in_bytes'), String(target));
        reached = frac;
        break;
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'EBUSY') throw e;
      }
    }
  } finally {
    writeFileSync(f('memory.limit_in_bytes'), limit0);
    writeFileSync(f('memory.swappiness'), swappiness0);
  }
  // The reclaim ran in this thread (the writer of limit_in_bytes): its CPU is the harness's.
  const h = process.cpuUsage(harness0);
  const usage1 = Number(readFileSync(f('memory.usage_in_bytes'), 'utf8'));
  const stat = readFileSync(f('memory.stat'), 'utf8');
  const swap = Number(/^swap (\d+)/m.exec(stat)?.[1] ?? NaN);
  return {
    how: 'v1 memory.limit_in_bytes lowered then restored (swappiness 100)',
    beforeMiB: r2(mib(usage0)),
    afterMiB: r2(mib(usage1)),
    swapMiB: r2(mib(swap)),
    limitFraction: reached,
    tried,
    ms: Math.round(performance.now() - t0),
    reclaimCpuMs: r2((h.user + h.system) / 1000),
  };
}

export const ZRAM_SIZE_MIB = 4096;

export function zramHooks(): ArmHooks {
  let z: ZramSwap | undefined;
  return {
    async enter(ctx) {
      z = addZramSwap(ZRAM_SIZE_MIB);
      ctx.data.zram = {
        device: z.dev,
        sizeMiB: z.sizeMiB,
        algorithm: z.algorithm,
        priority: z.priority,
        swapsAtEnter: readFileSync('/proc/swaps', 'utf8').trim().split('\n').slice(1),
      };
    },
    async exit(ctx) {
      if (!z) {
        const left = restoreHostKnobs();
        if (left.length) throw new Error(`zram teardown: ${left.join('; ')}`);
        return;
      }
      (ctx.data.zram as Record<string, unknown>).statAtExit = zramStat(z.id);
      const errors = removeZramSwap(z.id);
      const restored = restoreHostKnobs();
      z = undefined;
      if (errors.length || restored.length) throw new Error(`zram teardown: ${[...errors, ...restored].join('; ')}`);
    },
    async settle(ctx, sessions, n) {
      if (n === 0 || !z) return {};
      ctx.status(`zram: pushing ${sessions.length} idle session(s) into zram`);
      const threads0 = hostThreadsCpuNs();
      const cg0 = sessions.map((s) => cgroupCpuNs(ctx.instance, s.id));
      const t0 = performance.now();
      const pushes = sessions.map((s) => pushSession(ctx.instance, s.id));
      const wallMs = performance.now() - t0;
      const threads1 = hostThreadsCpuNs();
      const cg1 = sessions.map((s) => cgroupCpuNs(ctx.instance, s.id));
      return {
        zram: {
          pushes,
          wallMs: Math.round(wallMs),
          reclaimCpuMs: r2(pushes.reduce((a, p) => a + (p.reclaimCpuMs as number), 0)),
          kswapdCpuMs: r2(
            Object.entries(threads1)
              .filter(([k]) => k.startsWith('kswapd'))
              .reduce((a, [k, v]) => a + (v - (threads0[k] ?? v)) / 1e6, 0),
          ),
          sessionCpuMs: r2(cg1.reduce((a, c, i) => a + (c - cg0[i]!) / 1e6, 0)),
          stat: zramStat(z.id),
        },
      };
    },
    async collect(ctx, sessions) {
      if (!z) return;
      ctx.data.zramAtMaxN = { stat: zramStat(z.id), swaps: readFileSync('/proc/swaps', 'utf8').trim().split('\n').slice(1), sessions: sessions.length };
    },
  };
}

/** Session SwapPss (MiB): what of the session's memory is in swap, by proportional share. */
export function sessionSwapPss(instance: string, id: string): number {
  let kb = 0;
  for (const pid of sessionPids(instance, id)) {
    try {
      kb += Number(/^SwapPss:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8'))?.[1] ?? 0);
    } catch {
      /* gone */
    }
  }
  return kb / 1024;
}
