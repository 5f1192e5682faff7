// Screen recording: /start_recording and /end_recording (ffmpeg x11grab inside the session).

import { runGuest, spawnGuest } from '../guest-exec.ts';
import { ensureReady, flaskPage, type Handler, json, sleep } from '../guest.ts';
import { attachment, streamGuestFile } from './files.ts';

const RECORDING = '/tmp/recording.mp4';

export const routeStartRecording: Handler = async (ctx, s, _req, rec) => {
  if (rec.child && rec.child.exitCode === null && rec.child.signalCode === null && rec.generation === s.generation) {
    return json(400, { status: 'error', message: 'Recording is already in progress.' });
  }
  ensureReady(s);
  const rm = await runGuest(ctx.mgr, s, { argv: ['rm', '-f', RECORDING], timeoutMs: 10_000 });
  if (rm.code !== 0) return json(500, { status: 'error', message: `Failed to remove old recording file: ${rm.stderr.trim()}` });
  const { width, height } = (await ctx.display.connection(s)).screenSize();
  // Under coreutils `timeout` with no time limit (0): when the SIGINT of /end_recording reaches it (the
  // runtime forwards it), it passes it on to ffmpeg and, if ffmpeg has not finished the file
  // DRUMS_OSWORLD_RECORDING_STOP_S later, SIGKILLs it inside the session. A SIGKILL to the runtime's
  // exec process from here would not be forwarded and would leave ffmpeg running in the session.
  // --foreground: the signal goes to ffmpeg alone. Without it `timeout` also signals its process group,
  // and ffmpeg takes a second SIGINT as "abort the output now": the file ended without its trailer.
  const child = spawnGuest(ctx.mgr, s, [
    '/usr/bin/timeout',
    '--foreground',
    `--kill-after=${ctx.mgr.config.osworldRecordingStopS}`,
    '--signal=INT',
    '0',
    'ffmpeg',
    '-y',
    '-f',
    'x11grab',
    '-draw_mouse',
    '1',
    '-s',
    `${width}x${height}`,
    '-i',
    ':0.0',
    '-c:v',
    'libx264',
    '-preset',
    'ultrafast',
    '-r',
    '30',
    RECORDING,
  ]);
  rec.child = child;
  rec.generation = s.generation;
  rec.stderr = '';
  child.stdin!.on('error', () => {});
  child.stdout!.resume();
  child.stderr!.on('data', (d: Buffer) => {
    rec.stderr = (rec.stderr! + d.toString()).slice(-4000);
  });
  child.on('error', () => {});
  const exited = await Promise.race([new Promise<boolean>((r) => child.once('close', () => r(true))), sleep(2000).then(() => false)]);
  if (exited) {
    rec.child = undefined;
    return json(500, { status: 'error', message: `Failed to start recording. ffmpeg exited: ${rec.stderr}` });
  }
  return json(200, { status: 'success', message: 'Started recording successfully.' });
};

export const routeEndRecording: Handler = async (ctx, s, _req, rec) => {
  const child = rec.child;
  if (!child || child.exitCode !== null || child.signalCode !== null || rec.generation !== s.generation) {
    rec.child = undefined;
    return json(400, { status: 'error', message: 'No recording in progress to stop.' });
  }
  rec.child = undefined;
  const closed = new Promise<void>((r) => child.once('close', () => r()));
  // Our own runtime exec process; it forwards the signal to `timeout`, which passes it to ffmpeg, which
  // finalises the file. Sessions share the host's cores, so ffmpeg may be well behind at 1080p and 30 fps
  // (four sessions recording at once on 2 busy cores took 24-40 s to finish): the in-session `timeout` gives
  // it DRUMS_OSWORLD_RECORDING_STOP_S, then kills it; the daemon's own limit is a last resort.
  child.kill('SIGINT');
  const graceMs = ctx.mgr.config.osworldRecordingStopS * 1000;
  const done = await Promise.race([closed.then(() => true), sleep(graceMs + 10_000).then(() => false)]);
  if (!done || child.exitCode === 137 || child.signalCode !== null) {
    if (!done) child.kill('SIGKILL');
    return json(500, { status: 'error', message: 'Recording process was unresponsive and had to be killed.' });
  }
  // Streamed like /file: a recording is as large as the session made it (up to DRUMS_OSWORLD_MAX_BODY), and the
  // daemon holds no more than the pipes' buffers of it.
  const r = await streamGuestFile(ctx, s, RECORDING, { nonEmpty: true }).catch(() => undefined);
  if (!r || !('body' in r)) return flaskPage(500, 'Internal Server Error', 'Recording failed. The output file is missing or empty.');
  return { ...attachment(Buffer.alloc(0), RECORDING, 'video/mp4'), body: r.body };
};
