/** Reading Prometheus text exposition (format 0.0.4), as GET /metrics renders it (src/api/metrics.ts). */

/** A histogram's cumulative bucket counts by upper bound (`le`, '+Inf' included) in exposition text, unlabelled series only. */
export function bucketCounts(text: string, name: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const m of text.matchAll(new RegExp(`^${name}_bucket\\{le="([^"]+)"\\} (\\d+)$`, 'gm'))) out.set(m[1]!, Number(m[2]));
  return out;
}
