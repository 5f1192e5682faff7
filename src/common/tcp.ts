import type { Socket } from 'node:net';

/** Joins two sockets both ways; when either ends or fails, both are destroyed. */
export function joinSockets(a: Socket, b: Socket): void {
  a.pipe(b).pipe(a);
  const end = () => {
    a.destroy();
    b.destroy();
  };
  for (const s of [a, b]) {
    s.on('error', end);
    s.on('close', end);
  }
}
