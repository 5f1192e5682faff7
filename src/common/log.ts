/** Minimal structured logger: JSON lines on stderr when DRUMS_LOG=json, else short text (configureLog sets both). */
import type { LogFormat, LogLevel } from './config.ts';

const order: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };
let threshold = order.info;
let json = false;

/** Set once by a composition root (the daemon, the CLI) from the config's DRUMS_LOG and DRUMS_LOG_LEVEL. */
export function configureLog(c: { logFormat: LogFormat; logLevel: LogLevel }): void {
  threshold = order[c.logLevel];
  json = c.logFormat === 'json';
}

export function log(level: LogLevel, msg: string, fields: Record<string, unknown> = {}): void {
  if (order[level] < threshold) return;
  if (json) {
    process.stderr.write(JSON.stringify({ t: new Date().toISOString(), level, msg, ...fields }) + '\n');
  } else {
    const extra = Object.entries(fields)
      .map(([k, v]) => `${k}=${typeof v === 'string' ? v : JSON.stringify(v)}`)
      .join(' ');
    process.stderr.write(`[drums] ${level} ${msg}${extra ? ' ' + extra : ''}\n`);
  }
}
