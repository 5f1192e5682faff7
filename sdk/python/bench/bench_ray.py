"""Cluster bench on a local Ray cluster (docs/scale.md): ``python sdk/python/bench/bench_ray.py --out FILE.json``
(not shipped in the package: sdk/python/bench/ holds the SDK's benches)

Starts a Ray cluster of ``--nodes`` nodes on this machine (ray.cluster_utils.Cluster), one
Drums daemon per node (drums.ray.DrumsNodes), and measures in one run:
- create latency through the cluster client against a direct ``AsyncClient`` create on
  one host, interleaved (A, B, A, B, ...), and the same for one action (the wrapper's cost);
- the spread of sessions per node after ``--spread`` creates through the cluster client;
- a node failure in the middle of a rollout: every held session acts in a loop, one node's
  daemon is SIGKILLed, and it records the time until the client declared its sessions
  lost, how many were lost, and how many of the creates issued right after the kill failed;
- a claim from a warm pool through the cluster client against a direct claim (``claim``), and
  ``ClusterSession.fork(n)`` against the same source's direct fork (``fork``).
``--arms`` picks arms (default all).
Every session, daemon and Ray process it made is gone at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import ray
from ray.cluster_utils import Cluster

from drums.client import AsyncClient
from drums.cluster import SessionLost
from drums.ray import DrumsNodes

SPEC = {"image": "minimal", "screen": "320x240"}


def _stats(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    return {
        "n": len(xs),
        "p50": statistics.median(xs),
        "p95": xs[min(len(xs) - 1, int(0.95 * len(xs)))],
        "min": xs[0],
        "max": xs[-1],
    }


async def _latency(nodes: DrumsNodes, rounds: int) -> dict[str, Any]:
    ep = nodes.endpoints[0]
    create_cluster, create_direct, act_cluster, act_direct = [], [], [], []
    async with nodes.cluster(rng=random.Random(1)) as cluster, AsyncClient(ep.url, ep.token) as direct:
        for _ in range(rounds):
            t0 = time.perf_counter()
            cs = await cluster.create(**SPEC)
            create_cluster.append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            ds = await direct.sessions.create(**SPEC)
            create_direct.append((time.perf_counter() - t0) * 1000)
            for _ in range(5):
                t0 = time.perf_counter()
                await cs.act({"type": "move", "x": 3, "y": 3})
                act_cluster.append((time.perf_counter() - t0) * 1000)
                t0 = time.perf_counter()
                await ds.act({"type": "move", "x": 3, "y": 3})
                act_direct.append((time.perf_counter() - t0) * 1000)
            await cs.destroy()
            await ds.destroy()
        decide = []
        for _ in range(2000):
            t0 = time.perf_counter_ns()
            cluster._choose(1, set())
            decide.append((time.perf_counter_ns() - t0) / 1000)
    cc, cd, ac, ad = _stats(create_cluster), _stats(create_direct), _stats(act_cluster), _stats(act_direct)
    return {
        "createMs": {"cluster": cc, "direct": cd, "ratioP50": cc["p50"] / cd["p50"]},
        "actMs": {"cluster": ac, "direct": ad, "ratioP50": ac["p50"] / ad["p50"]},
        "placementDecisionUs": _stats(decide),
    }


async def _pool_ready(c: AsyncClient, name: str, size: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while (await c.pools.get(name))["ready"] < size:
        if time.monotonic() > deadline:
            raise TimeoutError(f"pool {name} did not refill to {size} within {timeout:g} s")
        await asyncio.sleep(0.2)


async def _claim(nodes: DrumsNodes, rounds: int, size: int = 2) -> dict[str, Any]:
    """A claim from a warm pool through the cluster client (placed on a host whose report shows a
    ready session) against a direct claim on one host, interleaved; every claim a hit (the pools are
    refilled and the reports re-read between rounds, untimed)."""
    name = f"bench{os.getpid()}"
    clients = [AsyncClient(ep.url, ep.token) for ep in nodes.endpoints]
    via_cluster, direct, hits = [], [], {"cluster": 0, "direct": 0}
    try:
        for c in clients:
            await c.pools.put(name, size=size, **SPEC)
        async with nodes.cluster(rng=random.Random(2)) as cluster:
            for _ in range(rounds):
                await asyncio.gather(*(_pool_ready(c, name, size) for c in clients))
                await cluster.refresh()
                t0 = time.perf_counter()
                cs = await cluster.claim(name, onEmpty="fail")
                via_cluster.append((time.perf_counter() - t0) * 1000)
                t0 = time.perf_counter()
                ds = await clients[0].pools.claim(name, on_empty="fail")
                direct.append((time.perf_counter() - t0) * 1000)
                hits["cluster"] += cs.info["labels"].get("drums.pool") == name
                hits["direct"] += bool(ds.pool_hit)
                await cs.destroy()
                await ds.destroy()
    finally:
        for c in clients:
            try:
                await c.pools.delete(name)
            finally:
                await c.aclose()
    cl, di = _stats(via_cluster), _stats(direct)
    return {"claimMs": {"cluster": cl, "direct": di, "ratioP50": cl["p50"] / di["p50"]}, "hits": hits, "poolSize": size}


async def _fork(nodes: DrumsNodes, counts: list[int]) -> dict[str, Any]:
    """``ClusterSession.fork(n)`` (copies on the source's host, tracked) against the same source's
    direct ``AsyncSession.fork(n)``, disk mode, for each n; the copies destroyed between."""
    out: dict[str, Any] = {}
    async with nodes.cluster() as cluster:
        src = await cluster.create(**SPEC)
        try:
            for n in counts:
                t0 = time.perf_counter()
                copies = await src.fork(n)
                c_ms = (time.perf_counter() - t0) * 1000
                same_host = all(c.host is src.host for c in copies) and all(c.id in src.host.sessions for c in copies)
                await asyncio.gather(*(c.destroy() for c in copies))
                t0 = time.perf_counter()
                raw = await src.session.fork(n)
                d_ms = (time.perf_counter() - t0) * 1000
                await asyncio.gather(*(c.destroy() for c in raw))
                out[str(n)] = {
                    "clusterMs": c_ms,
                    "directMs": d_ms,
                    "ratio": c_ms / d_ms,
                    "onSourceHostAndTracked": same_host,
                }
        finally:
            await src.destroy()
    return out


async def _spread(nodes: DrumsNodes, n: int) -> dict[str, Any]:
    async with nodes.cluster() as cluster:
        made = [await cluster.create(**SPEC) for _ in range(n)]
        spread = cluster.spread()
        await asyncio.gather(*(s.destroy() for s in made))
    return {"sessions": n, "perNode": spread, "maxMinusMin": max(spread.values()) - min(spread.values())}


async def _failure(nodes: DrumsNodes, held: int, creates_after: int) -> dict[str, Any]:
    async with nodes.cluster(refresh_s=0.5, dead_after_s=2.0, wait_s=60) as cluster:
        sessions = list(await asyncio.gather(*(cluster.create(**SPEC) for _ in range(held))))
        spread = cluster.spread()
        victim_name = max(spread, key=lambda k: spread[k])
        victim = next(a for a, i in zip(nodes.actors, nodes.infos, strict=True) if i["name"] == victim_name)
        lost_at: dict[str, float] = {}
        stop = asyncio.Event()

        async def drive(s: Any) -> None:
            while not stop.is_set():
                try:
                    await s.act({"type": "move", "x": 4, "y": 4})
                except SessionLost:
                    lost_at[s.id] = time.monotonic()
                    return
                await asyncio.sleep(0.05)

        drivers = [asyncio.create_task(drive(s)) for s in sessions]
        await asyncio.sleep(1.0)
        killed = time.monotonic()
        await asyncio.to_thread(ray.get, victim.kill_daemon.remote())
        results = await asyncio.gather(*(cluster.create(**SPEC) for _ in range(creates_after)), return_exceptions=True)
        failed = [r for r in results if isinstance(r, BaseException)]
        deadline = time.monotonic() + 60
        while len(lost_at) < spread[victim_name] and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        stop.set()
        await asyncio.gather(*drivers)
        new = [r for r in results if not isinstance(r, BaseException)]
        await asyncio.gather(*(s.destroy() for s in sessions + new), return_exceptions=True)
        detect = [t - killed for t in lost_at.values()]
        return {
            "heldBefore": held,
            "onVictim": spread[victim_name],
            "sessionsLost": len(cluster.lost),
            "detectS": _stats(detect) if detect else None,
            "createsDuringFailure": creates_after,
            "createsFailed": len(failed),
            "createsPlacedOn": sorted({s.host.name for s in new}),
            "victim": victim_name,
            "deadAfterS": 2.0,
            "refreshS": 0.5,
        }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--drums-bin", default=str(Path(__file__).resolve().parents[3] / "bin" / "drums"))
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--spread", type=int, default=9)
    ap.add_argument("--claims", type=int, default=20, help="claim arm: rounds (cluster and direct each)")
    ap.add_argument("--fork-counts", default="1,4", help="fork arm: copies per fork, comma-separated")
    ap.add_argument("--arms", default="latency,spread,failure,claim,fork", help="which arms, comma-separated")
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    arms = set(a.arms.split(","))
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    temp_dir = tempfile.mkdtemp(prefix="drums-ray-", dir="/tmp")  # Ray's session files, removed at the end
    # ray.cluster_utils writes the head's address to /tmp/ray whatever temp_dir says: it must exist.
    args = {"num_cpus": 1, "object_store_memory": 80 * 1024 * 1024, "temp_dir": temp_dir}
    made_ray_dir = not os.path.isdir("/tmp/ray")
    os.makedirs("/tmp/ray", exist_ok=True)
    cluster = Cluster(initialize_head=True, head_node_args={**args, "include_dashboard": False})
    nodes = None
    rec: dict[str, Any] = {
        "schemaVersion": 1,
        "kind": "cluster-ray",
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": {
            "cpus": os.cpu_count(),
            "loadavg": os.getloadavg(),
            "kernel": platform.release(),
            "ray": ray.__version__,
            "gitCommit": subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip(),
        },
        "nodes": a.nodes,
        "image": SPEC["image"],
    }
    try:
        for _ in range(a.nodes - 1):
            cluster.add_node(**args)
        ray.init(address=cluster.address, logging_level="warning", log_to_driver=False)
        cluster.wait_for_nodes()
        nodes = DrumsNodes.start(
            a.drums_bin, subnet_pool=lambda i: f"10.240.{16 * i}.0/20", env={"DRUMS_MAX_SESSIONS": "8"}
        )
        if "latency" in arms:
            rec["latency"] = asyncio.run(_latency(nodes, a.rounds))
        if "claim" in arms:
            rec["claim"] = asyncio.run(_claim(nodes, a.claims))
        if "fork" in arms:
            rec["fork"] = asyncio.run(_fork(nodes, [int(x) for x in a.fork_counts.split(",")]))
        if "spread" in arms:
            rec["spread"] = asyncio.run(_spread(nodes, a.spread))
        if "failure" in arms:  # last: it kills a node's daemon
            rec["failure"] = asyncio.run(_failure(nodes, 9, 3))
    finally:
        if nodes is not None:
            nodes.stop()
        ray.shutdown()
        cluster.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)
        if made_ray_dir:
            shutil.rmtree("/tmp/ray", ignore_errors=True)
    text = json.dumps(rec, indent=2)
    if a.out:
        Path(a.out).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
