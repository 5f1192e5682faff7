/** Minimal structured logger: JSON lines on stderr when DRUMS_LOG=json, else short text. */
type Level = 'debug' | 'info' | 'warn' | 'error';
const order: Record<Level, number> = { debug: 10, info: 20, warn: 30, error: 40 };
const threshold = order[(process.env.DRUMS_LOG_LEVEL as Level) ?? 'info'] ?? 20;

export function log(level: Level, msg: string, fields: Record<string, unknown> = {}): void {
  if (order[level] < threshold) return;
  if (process.env.DRUMS_LOG === 'json') {
    process.stderr.write(JSON.stringify({ t: new Date().toISOString(), level, msg, ...fields }) + '\n');
  } else {
    const extra = Object.entries(fields).map(([k, v]) => `${k}=${typeof v === 'string' ? v : JSON.stringify(v)}`).join(' ');
    process.stderr.write(`[drums] ${level} ${msg}${extra ? ' ' + extra : ''}\n`);
  }
}
