/**
 * A local host user (uid 65534) watching /proc for what a session's exec carries: the command's
 * argv and its `env` reached the OCI runtime's command line (`runc exec --env K=V ... -- argv`),
 * which every local user can read. The observer scans every /proc/<pid>/cmdline and
 * /proc/<pid>/environ while an exec with a secret in its argv and one in its environment runs.
 *
 * Held when the environment secret is seen nowhere and the argv secret only in the session's own
 * processes (in its PID namespace: the command itself; on Linux every process's own argv is public, so a
 * secret belongs in `env` or `stdin`, never in argv; docs/security.md). The observer must have
 * seen the argv secret in the command's own process, or the probe proves nothing ('invalid').
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import type { Probe } from '../probe.ts';
import type { PrivateDaemon } from '../../src/client/private-daemon.ts';

/** Reads the two secrets from its first stdin line (never its argv), prints `ready`, scans until stdin ends. */
const OBSERVER = `
import json, os, select, sys
argv_secret, env_secret = sys.stdin.readline().split()
me = str(os.getpid())
hits = {}
print('ready', flush=True)
def scan():
    for pid in os.listdir('/proc'):
        if not pid.isdigit() or pid == me: continue
        for what in ('cmdline', 'environ'):
            try:
                with open('/proc/' + pid + '/' + what, 'rb') as f: data = f.read(1 << 20)
            except OSError: continue
            for name, secret in (('argv', argv_secret), ('env', env_secret)):
                if secret.encode() in data:
                    try: st = open('/proc/' + pid + '/status').read().splitlines()
                    except Exception: st = []
                    uid = next((int(l.split()[1]) for l in st if l.startswith('Uid:')), -1)
                    # More than one NSpid: the process lives in a container's PID namespace (the command itself).
                    nested = next((len(l.split()) > 2 for l in st if l.startswith('NSpid:')), False)
                    try: comm = open('/proc/' + pid + '/comm').read().strip()
                    except Exception: comm = '?'
                    hits[(name, what, pid)] = {'secret': name, 'file': what, 'pid': int(pid), 'uid': uid, 'nested': nested, 'comm': comm}
while True:
    scan()
    r, _, _ = select.select([sys.stdin], [], [], 0)
    if r and not sys.stdin.readline(): break
scan()
print(json.dumps(list(hits.values())), flush=True)
`;

interface Hit {
  secret: 'argv' | 'env';
  file: 'cmdline' | 'environ';
  pid: number;
  uid: number;
  /** In a PID namespace below the host's: a process of the session, not of the host. */
  nested: boolean;
  comm: string;
}

/** Runs the observer as uid 65534 around `during`; returns what it saw. */
async function observe(argvSecret: string, envSecret: string, during: () => Promise<unknown>): Promise<Hit[]> {
  const child = spawn('python3', ['-c', OBSERVER], { uid: 65534, gid: 65534, cwd: '/', stdio: ['pipe', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout.on('data', (d: Buffer) => (out += d));
  child.stderr.on('data', (d: Buffer) => (err += d));
  const exited = new Promise<number>((resolve) => child.on('close', (c) => resolve(c ?? 1)));
  try {
    child.stdin.write(`${argvSecret} ${envSecret}\n`);
    const until = Date.now() + 10_000;
    while (!out.startsWith('ready')) {
      if (Date.now() > until || child.exitCode !== null) throw new Error(`observer did not start: ${err.slice(0, 300)}`);
      await new Promise((r) => setTimeout(r, 20));
    }
    await during();
  } finally {
    child.stdin.end();
  }
  const code = await exited;
  if (code !== 0) throw new Error(`observer exit ${code}: ${err.slice(0, 300)}`);
  return JSON.parse(out.slice('ready'.length).trim()) as Hit[];
}

/** A HostProbe (./index.ts; its context type is spelt out here so the registry's import is the only edge). */
export async function probeExecCmdline(ctx: { d: PrivateDaemon; arm: string }): Promise<Probe[]> {
  const c = ctx.d.client;
  const s = await c.createSession({ image: 'default' });
  try {
    const out: Probe[] = [];
    for (const root of [false, true]) {
      const argvSecret = `argv${randomBytes(12).toString('hex')}`;
      const envSecret = `env${randomBytes(12).toString('hex')}`;
      const hits = await observe(argvSecret, envSecret, () =>
        c.exec(s.id, { argv: ['/bin/sh', '-c', `sleep 2; : ${argvSecret}`], env: { DRUMS_PROBE_SECRET: envSecret }, root, timeoutMs: 30_000 }),
      );
      const leaks = hits.filter((h) => h.secret === 'env' || !h.nested);
      const own = hits.filter((h) => h.secret === 'argv' && h.nested);
      const fmt = (l: Hit[]) => l.map((h) => `${h.secret} in ${h.comm}[${h.pid}] uid ${h.uid}${h.nested ? ' (session)' : ''} ${h.file}`).join('; ');
      out.push({
        arm: ctx.arm,
        id: `host.exec.${root ? 'root' : 'user'}-argv-env-off-cmdlines`,
        category: 'host',
        as: 'host-uid',
        result: leaks.length ? 'fail' : own.length ? 'pass' : 'invalid',
        detail: leaks.length
          ? `uid 65534 read an exec's secret: ${fmt(leaks)}`.slice(0, 300)
          : own.length
            ? `env secret seen nowhere; argv secret only in the command's own process (${fmt(own)})`.slice(0, 300)
            : 'the observer saw the command run nowhere (the scan missed it)',
      });
    }
    return out;
  } finally {
    await c.destroySession(s.id);
  }
}
