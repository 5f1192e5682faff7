/** Small, dependency-free statistics for benchmark records. */
export function quantile(xs: number[], q: number): number {
  if (!xs.length) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  const pos = (s.length - 1) * q;
  const lo = Math.floor(pos);
  const hi = Math.ceil(pos);
  return s[lo]! + (s[hi]! - s[lo]!) * (pos - lo);
}

export function summary(xs: number[]) {
  return { n: xs.length, p50: quantile(xs, 0.5), p95: quantile(xs, 0.95), min: Math.min(...xs), max: Math.max(...xs) };
}

/** summary() with p90 too, or null for no samples. */
export const summaryP90 = (xs: number[]) => (xs.length ? { ...summary(xs), p90: quantile(xs, 0.9) } : null);

/** Least-squares line y = a + b x, with R². */
export function linearFit(xs: number[], ys: number[]) {
  const n = xs.length;
  const mx = xs.reduce((a, b) => a + b, 0) / n;
  const my = ys.reduce((a, b) => a + b, 0) / n;
  let sxy = 0,
    sxx = 0,
    syy = 0;
  for (let i = 0; i < n; i++) {
    sxy += (xs[i]! - mx) * (ys[i]! - my);
    sxx += (xs[i]! - mx) ** 2;
    syy += (ys[i]! - my) ** 2;
  }
  const slope = sxy / sxx;
  const intercept = my - slope * mx;
  const r2 = syy === 0 ? 1 : (sxy * sxy) / (sxx * syy);
  return { slope, intercept, r2 };
}

/** Bootstrap 95% interval of a statistic over resampled indices (deterministic seed). */
export function bootstrap(n: number, stat: (idx: number[]) => number, iterations = 1000, seed = 42): [number, number] {
  let state = seed >>> 0;
  const rand = () => (state = (state * 1664525 + 1013904223) >>> 0) / 2 ** 32;
  const vals: number[] = [];
  for (let it = 0; it < iterations; it++) {
    const idx = Array.from({ length: n }, () => Math.floor(rand() * n));
    const v = stat(idx);
    if (Number.isFinite(v)) vals.push(v);
  }
  return [quantile(vals, 0.025), quantile(vals, 0.975)];
}

/** The arithmetic mean (NaN for no values). */
export const mean = (xs: number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : NaN);

/** Rounded to two decimals, for records. */
export const r1 = (x: number) => Math.round(x * 100) / 100;
