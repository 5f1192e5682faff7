/**
 * A local host user against a session's X server and VNC (issue 27, finding 3 and the VNC part of 7).
 *
 * - host.x11.setup-no-cookie (host-uid): a host uid other than root (65534) opens the session's X socket and sends
 *   the 12-byte connection setup with no authorization; the first reply byte must not be 1 (Success). A refused
 *   connect (the runtime directories closed to it) also holds.
 * - host.x11.setup-no-cookie-root (host): the same as host root, which reaches every path: only the cookie stands in
 *   the way. A wrong cookie must be refused too, and the session's own cookie (from its record) must be accepted:
 *   otherwise the probe could not tell a refusal from a broken socket (invalid).
 * - host.vnc.cli-listener (host-uid): `drums session vnc` (run by root here) serves RFB on a loopback port; uid 65534
 *   connects to it and must not get the RFB banner, where root (the CLI's own uid) does.
 * - host.vnc.x11vnc-socket (host-uid): while a viewer keeps x11vnc running, uid 65534 connects to x11vnc's own unix
 *   socket in the session's X socket directory and must not get the banner either.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync, realpathSync } from 'node:fs';
import { createConnection, type Socket } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Probe } from '../probe.ts';
import type { HostProbeContext } from './types.ts';

const DRUMS = fileURLToPath(new URL('../../bin/drums', import.meta.url));
const NOBODY = 65534;

/** The X connection setup request: byte order 'l', protocol 11.0, MIT-MAGIC-COOKIE-1 with `cookie` (hex) or nothing. */
export function xSetup(cookie?: string): Buffer {
  const name = cookie ? Buffer.from('MIT-MAGIC-COOKIE-1') : Buffer.alloc(0);
  const data = cookie ? Buffer.from(cookie, 'hex') : Buffer.alloc(0);
  const pad = (n: number) => Buffer.alloc((4 - (n % 4)) % 4);
  const head = Buffer.alloc(12);
  head.write('l', 0);
  head.writeUInt16LE(11, 2);
  head.writeUInt16LE(name.length, 6);
  head.writeUInt16LE(data.length, 8);
  return Buffer.concat([head, name, pad(name.length), data, pad(data.length)]);
}

/**
 * A client run as a host uid: connects to a unix path or a loopback port, writes `send` (hex) and answers, as JSON,
 * how the connect went and the first bytes that came back (at most `want`) within `ms`. It is the host's own
 * python3, not this checkout's Node: a uid such as 65534 may not be able to reach the checkout at all (a clone in
 * a 0700 directory, as CI's is).
 */
const CLIENT = `
import errno, json, socket, sys, time
target, send, want, ms = sys.argv[1], bytes.fromhex(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
connected, got, how = False, b"", "timeout"
deadline = time.monotonic() + ms / 1000
try:
    if target.isdigit():
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        addr = ("127.0.0.1", int(target))
    else:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        addr = target
    s.settimeout(ms / 1000)
    s.connect(addr)
    connected = True
    if send:
        s.sendall(send)
    while len(got) < want:
        s.settimeout(max(0.001, deadline - time.monotonic()))
        d = s.recv(65536)
        if not d:
            how = "closed"
            break
        got += d
    else:
        how = "data"
except socket.timeout:
    how = "timeout"
except OSError as e:
    how = errno.errorcode.get(e.errno, str(e)) if e.errno else str(e)
sys.stdout.write(json.dumps({"connected": connected, "how": how, "got": got.hex()}))
`;

export interface ClientResult {
  connected: boolean;
  how: string;
  got: Buffer;
}

/** Runs CLIENT as `uid` (this process's uid when undefined). */
export function clientAs(uid: number | undefined, target: string | number, send: Buffer, want: number, ms = 5000): Promise<ClientResult> {
  return new Promise((resolve, reject) => {
    const ids = uid === undefined ? {} : { uid, gid: uid };
    const p = spawn('/usr/bin/python3', ['-c', CLIENT, String(target), send.toString('hex'), String(want), String(ms)], {
      ...ids,
      cwd: '/',
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    p.stdout!.on('data', (d: Buffer) => (out += d.toString()));
    p.stderr!.on('data', (d: Buffer) => (err = (err + d.toString()).slice(-500)));
    p.once('error', reject);
    p.once('close', () => {
      try {
        const r = JSON.parse(out) as { connected: boolean; how: string; got: string };
        resolve({ connected: r.connected, how: r.how, got: Buffer.from(r.got, 'hex') });
      } catch {
        reject(new Error(`the probe client as uid ${uid ?? 'self'} said nothing parsable: ${out.slice(0, 200)} ${err}`));
      }
    });
  });
}

/** How an X connection setup went, in words: the reply's first byte is 0 Failed, 1 Success, 2 Authenticate. */
function xOutcome(r: ClientResult): string {
  if (!r.connected) return `connect refused (${r.how})`;
  if (!r.got.length) return `no reply (${r.how})`;
  return ['Failed', 'Success', 'Authenticate'][r.got[0]!] ?? `byte ${r.got[0]}`;
}

/** The session's X cookie as its record keeps it (the daemon's own state; read as root). */
export function recordedCookie(stateDir: string, id: string): string | undefined {
  const rec = JSON.parse(readFileSync(join(stateDir, 'sessions', id, 'session.json'), 'utf8')) as { xCookie?: string };
  return rec.xCookie;
}

/** Starts `drums session vnc ID --port 0` against the daemon; answers its port and a stop function. */
async function vncCli(ctx: HostProbeContext, id: string): Promise<{ port: number; stop: () => Promise<void> }> {
  const env = { ...process.env, DRUMS_URL: ctx.d.url, DRUMS_TOKEN: ctx.d.token };
  const cli = spawn(DRUMS, ['session', 'vnc', id, '--port', '0'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  const exited = new Promise<void>((r) => cli.once('close', () => r()));
  const stop = async () => {
    if (cli.exitCode === null && cli.signalCode === null) cli.kill('SIGINT');
    await Promise.race([exited, new Promise((r) => setTimeout(r, 5000))]);
    if (cli.exitCode === null && cli.signalCode === null) cli.kill('SIGKILL');
  };
  try {
    const port = await new Promise<number>((resolve, reject) => {
      let out = '';
      let err = '';
      const timer = setTimeout(() => reject(new Error(`drums session vnc printed no port in 30 s: ${err.slice(-300)}`)), 30_000);
      cli.stdout!.on('data', (b: Buffer) => {
        out += b.toString();
        const m = /127\.0\.0\.1:(\d+)/.exec(out);
        if (m) {
          clearTimeout(timer);
          resolve(Number(m[1]));
        }
      });
      cli.stderr!.on('data', (b: Buffer) => (err = (err + b.toString()).slice(-1000)));
      cli.once('close', (c) => {
        clearTimeout(timer);
        reject(new Error(`drums session vnc exited (${c}): ${err.slice(-300)}`));
      });
    });
    return { port, stop };
  } catch (e) {
    await stop();
    throw e;
  }
}

/** Keeps an RFB viewer (as this process, root) connected to `port` until closed: x11vnc runs while it is. */
function holdViewer(port: number): Promise<{ banner: string; sock: Socket }> {
  return new Promise((resolve, reject) => {
    const sock = createConnection(port, '127.0.0.1');
    let got = Buffer.alloc(0);
    const timer = setTimeout(() => {
      sock.destroy();
      reject(new Error('no RFB banner for the CLI’s own uid within 30 s'));
    }, 30_000);
    sock.on('data', (d) => {
      got = Buffer.concat([got, d]);
      if (got.length >= 12) {
        clearTimeout(timer);
        resolve({ banner: got.toString('latin1', 0, 12), sock });
      }
    });
    sock.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
  });
}

const RFB = /^RFB \d{3}\.\d{3}\n/;

export async function x11Probes(ctx: HostProbeContext): Promise<Probe[]> {
  const { d, arm } = ctx;
  const out: Probe[] = [];
  const probe = (id: string, as: string, ok: boolean | undefined, detail: string) =>
    out.push({ arm, id, category: 'host', as, result: ok === undefined ? 'invalid' : ok ? 'pass' : 'fail', detail });
  ctx.progress('host probes: x11: a session');
  const s = await d.client.createSession({ image: 'minimal', screen: '800x600' });
  try {
    const x0 = join(realpathSync(d.stateDir), 'rt', s.id, 'x11', 'X0');
    const cookie = recordedCookie(d.stateDir, s.id);
    const other = randomBytes(16).toString('hex');

    // Host root, which reaches the socket whatever the directories' modes: the cookie alone must decide.
    const rootNone = await clientAs(undefined, x0, xSetup(), 1);
    const rootWrong = await clientAs(undefined, x0, xSetup(other), 1);
    const rootOwn = cookie ? await clientAs(undefined, x0, xSetup(cookie), 1) : undefined;
    const control = rootOwn ? xOutcome(rootOwn) : 'no cookie in the session record';
    probe(
      'host.x11.setup-no-cookie-root',
      'host',
      rootOwn && xOutcome(rootOwn) !== 'Success' ? undefined : xOutcome(rootNone) === 'Failed' && xOutcome(rootWrong) === 'Failed',
      `as host root on ${s.id}'s X0: no authorization → ${xOutcome(rootNone)}, a wrong cookie → ${xOutcome(rootWrong)}; the session's own cookie → ${control}`,
    );
    // A host uid other than root.
    const nobodyNone = await clientAs(NOBODY, x0, xSetup(), 1);
    const nobodyWrong = await clientAs(NOBODY, x0, xSetup(other), 1);
    probe(
      'host.x11.setup-no-cookie',
      'host-uid',
      xOutcome(nobodyNone) !== 'Success' && xOutcome(nobodyWrong) !== 'Success',
      `as uid ${NOBODY} on ${s.id}'s X0: no authorization → ${xOutcome(nobodyNone)}, a wrong cookie → ${xOutcome(nobodyWrong)}`,
    );

    ctx.progress('host probes: x11: drums session vnc');
    const cli = await vncCli(ctx, s.id);
    let viewer: Socket | undefined;
    try {
      const own = await holdViewer(cli.port);
      viewer = own.sock;
      const nobody = await clientAs(NOBODY, cli.port, Buffer.alloc(0), 12);
      const banner = nobody.got.toString('latin1');
      probe(
        'host.vnc.cli-listener',
        'host-uid',
        RFB.test(own.banner) ? !RFB.test(banner) : undefined,
        `drums session vnc on 127.0.0.1:${cli.port}: root (the CLI's uid) got ${JSON.stringify(own.banner)}; uid ${NOBODY} got ${JSON.stringify(banner.slice(0, 12))} (${nobody.connected ? nobody.how : `connect: ${nobody.how}`})`,
      );
      // x11vnc runs for the root viewer: its own socket, in the session's X socket directory.
      const sock = join(realpathSync(d.stateDir), 'rt', s.id, 'x11', 'drums-vnc');
      const direct = await clientAs(NOBODY, sock, Buffer.alloc(0), 12);
      const got = direct.got.toString('latin1');
      probe(
        'host.vnc.x11vnc-socket',
        'host-uid',
        !RFB.test(got),
        `as uid ${NOBODY} on ${s.id}'s x11vnc socket: ${direct.connected ? `connected, got ${JSON.stringify(got.slice(0, 12))} (${direct.how})` : `connect refused (${direct.how})`}`,
      );
    } finally {
      viewer?.destroy();
      await cli.stop();
    }
  } finally {
    await d.client.destroySession(s.id).catch(() => {});
  }
  return out;
}
