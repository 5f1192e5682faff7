import { type Command, Option } from 'commander';
import { writeFileSync } from 'node:fs';
import type { SessionInfo } from '../../client/client.ts';
import { DrumsError } from '../../common/errors.ts';
import { loopbackPeerUid } from '../../common/peer-uid.ts';
import { client, print } from '../util.ts';

const line = (s: SessionInfo) =>
  `${s.id}  ${s.state.padEnd(10)} gen ${String(s.generation).padEnd(3)} ${s.image.padEnd(8)} ${s.screen.width}x${s.screen.height}  ${s.network.address}  ${s.url ?? ''}`;

/** `session ...`: create, inspect, drive and destroy sessions, through the public client. */
export function registerSession(program: Command): void {
  const session = program.command('session').description('create, inspect, drive and destroy sessions');
  session
    .command('create')
    .description('create a session and wait until it is ready')
    .option('--image <name>', 'image name', 'default')
    .option('--url <url>', 'open Chromium on this URL')
    .option('--screen <WxH>', 'screen size, e.g. 1280x800')
    .option('--memory-mb <n>', 'memory limit in MiB')
    .option('--disk-mb <n>', "disk quota in MiB (the session's own filesystem)")
    .option('--disk-read-mbps <n>', "disk read bandwidth in MiB/s (at most the daemon's DRUMS_DISK_READ_MBPS)")
    .option('--disk-write-mbps <n>', "disk write bandwidth in MiB/s (at most the daemon's DRUMS_DISK_WRITE_MBPS)")
    .option('--cpus <n>', 'CPU limit in cores')
    .option('--egress', 'allow internet egress (NAT)')
    .option('--host-port <port...>', 'gateway TCP ports the session may reach')
    .option('--ttl <seconds>', 'destroy after this many seconds')
    .option('--json', 'JSON output')
    .action(async (o: Record<string, string | boolean | string[] | undefined>) => {
      const spec: Record<string, unknown> = { image: o.image };
      if (o.url) spec.url = o.url;
      if (o.screen) spec.screen = o.screen;
      if (o.memoryMb) spec.memoryMb = Number(o.memoryMb);
      if (o.diskMb) spec.diskMb = Number(o.diskMb);
      if (o.diskReadMbps) spec.diskReadMbps = Number(o.diskReadMbps);
      if (o.diskWriteMbps) spec.diskWriteMbps = Number(o.diskWriteMbps);
      if (o.cpus) spec.cpus = Number(o.cpus);
      if (o.egress) spec.egress = true;
      if (o.hostPort) spec.hostPorts = (o.hostPort as string[]).map(Number);
      if (o.ttl) spec.ttlSeconds = Number(o.ttl);
      const s = await client().createSession(spec);
      print(!!o.json, s, () => line(s));
    });
  session
    .command('ls')
    .option('--json', 'JSON output')
    .action(async (o: { json?: boolean }) => {
      const list = await client().listSessions();
      print(!!o.json, list, () => list.map(line).join('\n') || '(no sessions)');
    });
  session
    .command('get')
    .argument('<id>')
    .option('--json', 'JSON output')
    .action(async (id: string, o: { json?: boolean }) => {
      const s = await client().getSession(id);
      print(!!o.json, s, () => line(s));
    });
  session
    .command('reset')
    .argument('<id>')
    .option('--json', 'JSON output')
    .action(async (id: string, o: { json?: boolean }) => {
      const s = await client().resetSession(id);
      print(!!o.json, s, () => line(s));
    });
  session
    .command('rm')
    .argument('<id...>')
    .action(async (ids: string[]) => {
      for (const id of ids) await client().destroySession(id);
    });
  session
    .command('exec')
    .description('run a command in the session; exits with its exit code')
    .argument('<id>')
    .argument('<cmd...>')
    .option('--root', 'run as root inside the session (still confined)')
    .option('--cwd <dir>', 'working directory')
    .option('--timeout <ms>', 'timeout in ms')
    .action(async (id: string, cmd: string[], o: { root?: boolean; cwd?: string; timeout?: string }) => {
      const r = await client().exec(id, { argv: cmd, root: !!o.root, cwd: o.cwd, timeoutMs: o.timeout ? Number(o.timeout) : undefined });
      process.stdout.write(r.stdout);
      process.stderr.write(r.stderr);
      process.exitCode = r.exitCode;
    });
  session
    .command('screenshot')
    .argument('<id>')
    .requiredOption('-o, --output <file>', 'output file')
    .addOption(new Option('--format <fmt>', 'image format').choices(['png', 'jpeg', 'webp', 'raw']).default('png'))
    .option('--quality <n>', 'JPEG/WebP quality 1..100')
    .option('--region <x,y,w,h>', 'capture only this rectangle')
    .option('--scale <WxH>', 'resize the image to WxH')
    .option('--no-cursor', 'do not draw the pointer')
    .action(async (id: string, o: { output: string; format: string; quality?: string; region?: string; scale?: string; cursor?: boolean }) => {
      const region = o.region ? (([x, y, width, height]) => ({ x: x!, y: y!, width: width!, height: height! }))(o.region.split(',').map(Number)) : undefined;
      const scale = o.scale ? (([width, height]) => ({ width: width!, height: height! }))(o.scale.split('x').map(Number)) : undefined;
      const r = await client().screenshotEx(id, {
        format: o.format as 'png',
        quality: o.quality ? Number(o.quality) : undefined,
        region,
        scale,
        cursor: o.cursor === false ? false : undefined,
      });
      writeFileSync(o.output, r.data);
      process.stderr.write(`${o.output}: ${r.width}x${r.height} ${r.mimeType} (generation ${r.generation})\n`);
    });
  session
    .command('act')
    .description('run a batch of actions (JSON array, or an object {actions, scale, screenshot})')
    .argument('<id>')
    .requiredOption('--json <actions>', 'actions JSON, e.g. \'[{"type":"click","x":10,"y":20}]\' (\'-\' reads stdin)')
    .option('--generation <n>', 'expected generation (409 if stale)')
    .option('--screenshot <file>', 'take a screenshot after the batch and write it here (format from the extension)')
    .action(async (id: string, o: { json: string; generation?: string; screenshot?: string }) => {
      const { readFileSync } = await import('node:fs');
      const text = o.json === '-' ? readFileSync(0, 'utf8') : o.json;
      let parsed: unknown;
      try {
        parsed = JSON.parse(text);
      } catch (e) {
        throw new DrumsError('invalid_json', `--json is not valid JSON: ${(e as Error).message}`);
      }
      const req = (Array.isArray(parsed) ? { actions: parsed } : parsed) as { actions: unknown[]; generation?: number; screenshot?: Record<string, unknown> };
      if (o.generation) req.generation = Number(o.generation);
      if (o.screenshot) {
        const ext = o.screenshot.split('.').pop()!.toLowerCase();
        req.screenshot = {
          ...(req.screenshot ?? {}),
          format: ext === 'jpg' || ext === 'jpeg' ? 'jpeg' : ext === 'webp' ? 'webp' : ext === 'raw' ? 'raw' : 'png',
        };
      }
      const r = await client().act(id, req as never);
      if (o.screenshot && r.screenshot) writeFileSync(o.screenshot, Buffer.from(r.screenshot.data, 'base64'));
      const out = {
        ...r,
        screenshot: r.screenshot
          ? { ...r.screenshot, data: `<${Buffer.byteLength(r.screenshot.data, 'base64')} bytes${o.screenshot ? ' → ' + o.screenshot : ''}>` }
          : undefined,
      };
      process.stdout.write(JSON.stringify(out, null, 2) + '\n');
    });
  session
    .command('a11y')
    .description("print the session's accessibility tree (OSWorld XML or JSON)")
    .argument('<id>')
    .addOption(new Option('--format <fmt>', 'output format').choices(['xml', 'json']).default('xml'))
    .option('--max-depth <n>', 'maximum depth')
    .option('--max-width <n>', 'maximum children per node')
    .action(async (id: string, o: { format: 'xml' | 'json'; maxDepth?: string; maxWidth?: string }) => {
      const r = await client().a11y(id, {
        format: o.format,
        maxDepth: o.maxDepth ? Number(o.maxDepth) : undefined,
        maxWidth: o.maxWidth ? Number(o.maxWidth) : undefined,
      });
      process.stdout.write((typeof r === 'string' ? r : JSON.stringify(r, null, 2)) + '\n');
    });
  session
    .command('vnc')
    .description(
      'serve the session over VNC on a local TCP port for standard viewers (x11vnc in the session starts on the first viewer, stops after the last); only your own uid (and root) may connect; view-only unless --take-over',
    )
    .argument('<id>')
    .option('--port <n>', 'local port on 127.0.0.1 (0 = any)', '5900')
    .option('--take-over [holder]', 'take the session over so the viewers can drive it (view-only otherwise); released on exit')
    .action(async (id: string, o: { port: string; takeOver?: string | boolean }) => {
      const net = await import('node:net');
      const c = client();
      await c.getSession(id);
      const held = o.takeOver ? await c.takeOver(id, typeof o.takeOver === 'string' ? o.takeOver : 'vnc') : null;
      if (held) process.stdout.write(`take-over: held by '${held.holder}' since ${held.since}; agent input gets 409 until this exits\n`);
      const path = `/v1/sessions/${encodeURIComponent(id)}/vnc${held ? `?takeover=${held.id}` : ''}`;
      // RFB here has no password (the daemon's token is the credential, and the CLI holds it): the port serves only
      // connections whose socket belongs to this uid or root, as the kernel says (docs/security.md).
      const me = process.getuid?.() ?? 0;
      const srv = net.createServer((tcp) => {
        const uid = loopbackPeerUid(tcp);
        if (uid === undefined || (uid !== me && uid !== 0)) {
          process.stderr.write(
            `drums: vnc: refused a connection from ${uid === undefined ? 'an unknown uid' : `uid ${uid}`} (only uid ${me} and root may connect)\n`,
          );
          tcp.destroy();
          return;
        }
        const ws = c.webSocket(path, 'binary');
        const pending: Buffer[] = [];
        tcp.on('data', (d) => (ws.readyState === ws.OPEN ? ws.send(d) : pending.push(d)));
        ws.on('open', () => {
          for (const d of pending.splice(0)) ws.send(d);
        });
        ws.on('message', (d) => tcp.write(d as Buffer));
        ws.on('unexpected-response', (_q, r) => {
          process.stderr.write(`drums: vnc refused: HTTP ${r.statusCode}\n`);
          tcp.destroy();
        });
        ws.on('close', () => tcp.end());
        ws.on('error', () => tcp.destroy());
        tcp.on('close', () => ws.close());
        tcp.on('error', () => ws.terminate());
      });
      srv.listen(Number(o.port), '127.0.0.1', () => {
        const port = (srv.address() as { port: number }).port;
        process.stdout.write(`vnc: 127.0.0.1:${port} (e.g. vncviewer 127.0.0.1::${port}); Ctrl-C to stop\n`);
      });
      const conns = new Set<import('node:net').Socket>();
      srv.on('connection', (t) => {
        conns.add(t);
        t.on('close', () => conns.delete(t));
      });
      await new Promise<void>((res) =>
        process.once('SIGINT', () => {
          srv.close();
          for (const t of conns) t.destroy();
          res();
        }),
      );
      if (held) await c.releaseTakeover(id, held.id).catch(() => {});
      process.exit(0);
    });
  session
    .command('windows')
    .description("list the session's windows")
    .argument('<id>')
    .option('--json', 'JSON output')
    .action(async (id: string, o: { json?: boolean }) => {
      const w = await client().windows(id);
      print(!!o.json, w, () =>
        [
          `screen ${w.screen.width}x${w.screen.height}  cursor ${w.cursor.x},${w.cursor.y}  active ${w.active === null ? '-' : '0x' + w.active.toString(16)}`,
          ...w.windows.map((x) => `0x${x.id.toString(16).padEnd(9)} ${`${x.width}x${x.height}+${x.x}+${x.y}`.padEnd(20)} ${x.className.padEnd(16)} ${x.title}`),
        ].join('\n'),
      );
    });
  session
    .command('cp')
    .description('copy a file into or out of a session; one side is ID:/abs/path')
    .argument('<src>')
    .argument('<dst>')
    .option('--root', 'as root inside the session')
    .option('--mode <octal>', 'file mode when copying in', '0644')
    .action(async (src: string, dst: string, o: { root?: boolean; mode: string }) => {
      const { readFileSync } = await import('node:fs');
      const remote = (x: string) => (/^s[0-9a-f]{10}:\//.exec(x) ? { id: x.slice(0, 11), path: x.slice(12) } : null);
      const rs = remote(src),
        rd = remote(dst);
      if (!!rs === !!rd) throw new DrumsError('invalid_request', 'exactly one of SRC and DST must be ID:/path');
      if (rs) {
        const data = await client().readFile(rs.id, rs.path, { root: o.root });
        if (dst === '-') process.stdout.write(data);
        else writeFileSync(dst, data);
      } else {
        const data = src === '-' ? readFileSync(0) : readFileSync(src);
        await client().writeFile(rd!.id, rd!.path, data, { root: o.root, mode: o.mode });
      }
    });
}
