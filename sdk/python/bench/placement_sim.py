"""A discrete-event simulation of client-side placement at cluster scale (docs/scale.md).

    python sdk/python/bench/placement_sim.py [--hosts 1000] [--sessions 100000] [--out FILE.json]

``hosts`` Drums hosts of ``capacity`` sessions each; ``clients`` cluster clients, each
with its own view of the hosts (their ``GET /v1/host`` reports, re-read every
``refresh_s``, staggered) and its own in-flight counts, exactly as
:class:`drums.cluster.AsyncClusterClient` keeps them (the same :class:`drums.placement.Placer`
and :class:`HostLoad`). Sessions arrive to fill the cluster to ``sessions`` within
``fill_s`` and then churn (exponential lifetimes, mean ``life_s``; arrivals replace them).
A create takes ``create_s``; a host counts a session from the moment it admits it.
Hosts fail (``failures`` of them, at random times) and rejoin empty after ``down_s``
(a restart: new instance). A placement on a full host is refused (429) and moves to the
next host; one on a dead host fails (connection refused), marks it unusable in that
client's view, and moves on. Nothing is mocked but time: the placement code is the
real one, and its decision time is measured on this machine.

Policies compared in the same run, on the same arrivals: ``p2c`` (power of two choices,
what the cluster client does), ``random`` (one random usable host with room) and
``least`` (the host with most room in the client's view: every client herds onto the
same host until its next report).
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import random
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from drums.placement import HostLoad, Placer


@dataclass
class SimConfig:
    hosts: int = 1000
    capacity: int = 128
    sessions: int = 100_000
    clients: int = 10
    refresh_s: float = 2.0
    fill_s: float = 60.0
    life_s: float = 600.0
    duration_s: float = 900.0
    create_s: float = 0.6
    failures: int = 20
    down_s: float = 60.0
    seed: int = 1


class _Least:
    """The herd-prone policy: the most room in this client's (stale) view."""

    def __init__(self) -> None:
        self.scans = 0

    def choose(self, hosts: list[HostLoad], need: int = 1, exclude: Any = frozenset()) -> HostLoad | None:
        best = None
        for h in hosts:
            if h.usable and h.free >= need and h.key not in exclude and (best is None or h.free > best.free):
                best = h
        return best


@dataclass
class _Client:
    view: list[HostLoad]
    placer: Any
    #: placements answered since the last refresh, per host index (the report does not count them)
    placed: dict[int, int] = field(default_factory=dict)


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def simulate(cfg: SimConfig, policy: str) -> dict[str, Any]:
    rng = random.Random(cfg.seed)  # arrivals, lifetimes, failures: the same for every policy
    prng = random.Random(cfg.seed + 1)  # the placers' own randomness
    n = cfg.hosts
    held = [0] * n
    alive = [True] * n
    epoch = [0] * n
    clients: list[_Client] = []
    for _ in range(cfg.clients):
        view = [HostLoad(str(i), capacity=cfg.capacity, usable=True, problem=None) for i in range(n)]
        placer = (
            Placer(random.Random(prng.random()), choices=2)
            if policy == "p2c"
            else Placer(random.Random(prng.random()), choices=1)
            if policy == "random"
            else _Least()
        )
        clients.append(_Client(view, placer))

    events: list[tuple[float, int, str, tuple]] = []
    seq = 0

    def push(t: float, kind: str, *args: Any) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(events, (t, seq, kind, args))

    # Arrivals: fill, then replace departures at the steady rate.
    t = 0.0
    fill_rate = cfg.sessions / cfg.fill_s
    for _ in range(cfg.sessions):
        t += rng.expovariate(fill_rate)
        push(t, "arrive")
    steady = cfg.sessions / cfg.life_s
    t = cfg.fill_s
    while t < cfg.duration_s:
        t += rng.expovariate(steady)
        push(t, "arrive")
    for c in range(cfg.clients):
        push(rng.uniform(0, cfg.refresh_s), "refresh", c)
    fail_times = sorted(rng.uniform(cfg.fill_s + 60, cfg.duration_s - cfg.down_s - 60) for _ in range(cfg.failures))
    for ft in fail_times:
        push(ft, "fail", rng.randrange(n))
    for k in range(int(cfg.fill_s) + 30, int(cfg.duration_s), 30):
        push(float(k), "sample")
    push(cfg.duration_s - 0.5, "sample")

    decide_ns: list[int] = []
    placed = refused = dead_tries = failed = lost = 0
    lost_per_failure: list[int] = []
    detect: list[float] = []  # per (failure, client): time until that client stopped offering the host
    failed_at: dict[int, float] = {}
    undetected: dict[int, set[int]] = {}
    imbalance: list[float] = []
    cv: list[float] = []
    full_frac: list[float] = []
    sessions_at: dict[tuple[int, int], int] = {}
    held_live = 0

    def mark_detected(c: int, i: int, now: float) -> None:
        if i in undetected and c in undetected[i]:
            undetected[i].discard(c)
            detect.append(now - failed_at[i])

    while events:
        now, _, kind, args = heapq.heappop(events)
        if now > cfg.duration_s:
            break
        if kind == "arrive":
            c = rng.randrange(cfg.clients)
            cl = clients[c]
            tried: set[str] = set()
            while True:
                t0 = time.perf_counter_ns()
                h = cl.placer.choose(cl.view, 1, tried)
                decide_ns.append(time.perf_counter_ns() - t0)
                if h is None:
                    failed += 1  # no room in this client's view: NoCapacity (after its bounded wait)
                    break
                i = int(h.key)
                if not alive[i]:
                    dead_tries += 1
                    h.usable, h.problem = False, "unreachable"
                    mark_detected(c, i, now)
                    tried.add(h.key)
                    continue
                if held[i] >= cfg.capacity:
                    refused += 1
                    h.capacity = 0
                    tried.add(h.key)
                    continue
                held[i] += 1
                held_live += 1
                placed += 1
                h.placed += 1
                sessions_at[(i, epoch[i])] = sessions_at.get((i, epoch[i]), 0) + 1
                push(now + rng.expovariate(1 / cfg.life_s), "leave", i, epoch[i])
                break
        elif kind == "leave":
            i, ep = args
            if alive[i] and epoch[i] == ep:
                held[i] -= 1
                held_live -= 1
        elif kind == "refresh":
            (c,) = args
            for i, h in enumerate(clients[c].view):
                if alive[i]:
                    h.capacity, h.placed, h.usable, h.problem = cfg.capacity - held[i], 0, True, None
                else:
                    h.usable, h.problem = False, "unreachable"
                    mark_detected(c, i, now)
            if now + cfg.refresh_s < cfg.duration_s:
                push(now + cfg.refresh_s, "refresh", c)
        elif kind == "fail":
            (i,) = args
            if not alive[i]:
                continue
            lost += held[i]
            lost_per_failure.append(held[i])
            held_live -= held[i]
            held[i] = 0
            alive[i] = False
            failed_at[i] = now
            undetected[i] = set(range(cfg.clients))
            push(now + cfg.down_s, "rejoin", i)
        elif kind == "rejoin":
            (i,) = args
            alive[i] = True
            epoch[i] += 1
            undetected.pop(i, None)
        elif kind == "sample":
            live = [held[i] for i in range(n) if alive[i]]
            mean = statistics.fmean(live)
            if mean > 0:
                imbalance.append(max(live) / mean)
                cv.append(statistics.pstdev(live) / mean)
            full_frac.append(sum(1 for x in live if x >= cfg.capacity) / len(live))

    us = [d / 1000 for d in decide_ns]
    return {
        "policy": policy,
        "placements": placed,
        "decisions": len(decide_ns),
        "decisionUs": {"p50": _pct(us, 0.5), "p99": _pct(us, 0.99), "mean": statistics.fmean(us)},
        "refusedPer1k": 1000 * refused / max(1, placed),
        "deadHostTriesPer1k": 1000 * dead_tries / max(1, placed),
        "failedPlacements": failed,
        "fullScans": sum(getattr(c.placer, "scans", 0) for c in clients),
        "balance": {
            "maxOverMeanMedian": statistics.median(imbalance) if imbalance else None,
            "maxOverMeanWorst": max(imbalance) if imbalance else None,
            "cvMedian": statistics.median(cv) if cv else None,
            "fullHostsMedian": statistics.median(full_frac) if full_frac else None,
        },
        "hostFailures": len(lost_per_failure),
        "sessionsLost": lost,
        "sessionsLostPerFailure": statistics.fmean(lost_per_failure) if lost_per_failure else 0,
        "detectS": {"p50": _pct(detect, 0.5), "max": max(detect) if detect else None, "n": len(detect)},
        "heldAtEnd": held_live,
    }


def run(cfg: SimConfig, policies: tuple[str, ...] = ("p2c", "random", "least")) -> dict[str, Any]:
    t0 = time.monotonic()
    results = [simulate(cfg, p) for p in policies]
    return {"config": cfg.__dict__, "results": results, "wallS": time.monotonic() - t0}


def sweep_fill(base: SimConfig, fills: tuple[float, ...]) -> list[dict[str, Any]]:
    """Where it breaks: the same cluster filled to a growing share of its capacity (p2c only).
    Sessions live for the whole run here, so the cluster really reaches that fill."""
    out = []
    for f in fills:
        cfg = SimConfig(
            **{
                **base.__dict__,
                "sessions": int(f * base.hosts * base.capacity),
                "failures": 0,
                "life_s": 1e9,
                "duration_s": base.fill_s + 30,
            }
        )
        r = simulate(cfg, "p2c")
        out.append(
            {
                "fill": f,
                **{
                    k: r[k]
                    for k in (
                        "placements",
                        "decisions",
                        "refusedPer1k",
                        "failedPlacements",
                        "fullScans",
                        "decisionUs",
                        "balance",
                        "heldAtEnd",
                    )
                },
            }
        )
    return out


def sweep_hosts(sizes: tuple[int, ...], per_host: int = 100) -> list[dict[str, Any]]:
    """Decision time against cluster size (p2c): it should not grow with the number of hosts."""
    out = []
    for n in sizes:
        cfg = SimConfig(hosts=n, sessions=n * per_host, clients=2, duration_s=120, fill_s=60, failures=0, refresh_s=5)
        r = simulate(cfg, "p2c")
        out.append({"hosts": n, "decisionUs": r["decisionUs"], "maxOverMeanMedian": r["balance"]["maxOverMeanMedian"]})
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=1000)
    ap.add_argument("--sessions", type=int, default=100_000)
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--duration", type=float, default=900.0)
    ap.add_argument("--failures", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--sweeps", action="store_true", help="also the fill and cluster-size sweeps")
    ap.add_argument("--out", help="write the JSON record here")
    a = ap.parse_args(argv)
    cfg = SimConfig(
        hosts=a.hosts, sessions=a.sessions, clients=a.clients, duration_s=a.duration, failures=a.failures, seed=a.seed
    )
    rec: dict[str, Any] = {
        "schemaVersion": 1,
        "kind": "cluster-sim",
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **run(cfg),
    }
    if a.sweeps:
        rec["fillSweep"] = sweep_fill(
            SimConfig(hosts=a.hosts, clients=a.clients, seed=a.seed), (0.5, 0.9, 0.97, 0.99, 0.999, 1.01)
        )
        rec["sizeSweep"] = sweep_hosts((100, 1000, 10_000))
    text = json.dumps(rec, indent=2, default=lambda x: None if isinstance(x, float) and math.isnan(x) else x)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
