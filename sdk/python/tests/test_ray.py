"""drums.ray on a real Ray cluster on this machine: three Ray nodes (ray.cluster_utils.Cluster),
each with its own Drums daemon started and supervised by a DrumsNode actor pinned to it
(own state dir, instance, port, subnet pool). Sessions spread over the nodes; one node's
daemon is killed in the middle of a vector-env rollout; bad hosts are skipped; a cluster
with no room fails with a clear error after a bounded wait. Every Ray process is gone after."""

from __future__ import annotations

import asyncio
import http.server
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
import ray
from ray.cluster_utils import Cluster

from drums.cluster import AsyncClusterClient, Endpoint, NoCapacity, SessionLost
from drums.cluster_env import ClusterVectorEnv
from drums.ray import DrumsNodes

DRUMS = Path(__file__).resolve().parents[3] / "bin" / "drums"

NODES = 3
MAX_PER_HOST = 4
NODE_ARGS = {"num_cpus": 1, "object_store_memory": 80 * 1024 * 1024}


def _ray_procs() -> list[psutil.Process]:
    me = psutil.Process()
    out = []
    for p in me.children(recursive=True):
        try:
            if p.name() in ("raylet", "gcs_server"):
                out.append(p)
        except psutil.Error:
            pass
    return out


@pytest.fixture(scope="module")
def nodes():
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    # Ray's session files (logs, sockets) go to a directory of this run, removed at the end.
    temp_dir = tempfile.mkdtemp(prefix="drums-ray-", dir="/tmp")
    node_args = {**NODE_ARGS, "temp_dir": temp_dir}
    # ray.cluster_utils writes the head's address to /tmp/ray whatever temp_dir says; it must exist.
    made_ray_dir = not os.path.isdir("/tmp/ray")
    os.makedirs("/tmp/ray", exist_ok=True)
    cluster = None
    drums = None
    try:
        cluster = Cluster(initialize_head=True, head_node_args={**node_args, "include_dashboard": False})
        for _ in range(NODES - 1):
            cluster.add_node(**node_args)
        ray.init(address=cluster.address, logging_level="warning", log_to_driver=False)
        cluster.wait_for_nodes()
        drums = DrumsNodes.start(
            str(DRUMS), subnet_pool=lambda i: f"10.240.{16 * i}.0/20", env={"DRUMS_MAX_SESSIONS": str(MAX_PER_HOST)}
        )
        yield drums
    finally:
        instances = [i["instance"] for i in drums.infos] if drums else []
        try:
            if drums is not None:
                drums.stop()
        finally:
            ray.shutdown()
            if cluster is not None:
                cluster.shutdown()
        deadline = time.monotonic() + 60
        while _ray_procs() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _ray_procs() == [], "Ray processes left behind"
        shutil.rmtree(temp_dir, ignore_errors=True)
        if made_ray_dir:
            shutil.rmtree("/tmp/ray", ignore_errors=True)
        netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        for inst in instances:
            assert f"drums-{inst}-" not in netns, f"instance {inst} left network namespaces"
            assert not os.path.exists(f"/var/tmp/drums-ray-{inst}")


def test_one_daemon_per_node(nodes):
    assert len({i["node_id"] for i in nodes.infos}) == NODES
    assert len({i["instance"] for i in nodes.infos}) == NODES
    assert len({i["url"] for i in nodes.infos}) == NODES


def test_vector_env_survives_a_daemon_killed_mid_rollout(nodes):
    env = ClusterVectorEnv(
        lambda: nodes.cluster(refresh_s=0.5, dead_after_s=2, wait_s=60), 6, image="minimal", screen=(320, 240)
    )
    try:
        obs, infos = env.reset(seed=0)
        assert obs["screenshot"].shape == (6, 240, 320, 3) and obs["screenshot"].dtype == np.uint8
        hosts = list(infos["host"])
        assert len(set(hosts)) == NODES, hosts
        move = [{"type": "move", "x": 10 + i, "y": 20} for i in range(6)]
        for _ in range(2):
            obs, rew, term, trunc, infos = env.step(move)
            assert not trunc.any() and list(infos["error"]) == [None] * 6
        # Kill the daemon of the busiest node (SIGKILL: nothing is cleaned up by it).
        victim_name = max(set(hosts), key=hosts.count)
        on_victim = hosts.count(victim_name)
        victim = next(a for a, i in zip(nodes.actors, nodes.infos, strict=True) if i["name"] == victim_name)
        killed_at = time.monotonic()
        before = list(env.sessions)
        ray.get(victim.kill_daemon.remote())
        obs, rew, term, trunc, infos = env.step(move)
        lost = [i for i in range(6) if infos["error"][i] == "session_lost"]
        assert len(lost) == on_victim and all(trunc[i] for i in lost), (list(infos["error"]), hosts)
        assert all(hosts[i] == victim_name for i in lost)
        assert (obs["screenshot"][lost] == 0).all()
        assert env.lost_episodes == on_victim
        detect_s = time.monotonic() - killed_at
        assert detect_s < 30
        # A lost session's handle raises SessionLost (code session_lost) on any later call.
        with pytest.raises(SessionLost) as e:
            env._run(before[lost[0]].act({"type": "move", "x": 1, "y": 1}))
        assert e.value.code == "session_lost" and victim_name in str(e.value)
        # Next step autoresets them onto live hosts (the supervisor may have restarted the victim).
        obs, rew, term, trunc, infos = env.step(move)
        assert list(infos["error"]) == [None] * 6 and not trunc.any()
        for _ in range(2):
            obs, rew, term, trunc, infos = env.step(move)
            assert list(infos["error"]) == [None] * 6
        assert sum(env.cluster.spread().values()) == 6
        assert any("lost" in ev for _, _, ev in env.cluster.events)
        # The restarted victim came back with a new instance and an empty session list.
        info = ray.get(victim.endpoint.remote())
        assert info["starts"] == 2
    finally:
        env.close()


async def test_sessions_spread_and_refusals_move_on(nodes):
    import random

    async with nodes.cluster(rng=random.Random(7), wait_s=5) as cluster:
        reports = [h.report for h in cluster.hosts]
        assert all(r and r["capacity"]["sessions"] == MAX_PER_HOST for r in reports), [
            r and r["capacity"] for r in reports
        ]
        made = [await cluster.create(image="minimal", screen="320x240") for _ in range(2 * NODES)]
        try:
            spread = cluster.spread()
            # Power of two choices over 3 hosts of 4: every host used, none over 3.
            assert sorted(spread.values())[0] >= 1 and max(spread.values()) <= 3, spread
            # A group (GRPO) lands on one host; it needs room for all of it.
            await cluster.refresh()
            group = await cluster.create_group(2, image="minimal", screen="320x240")
            assert len({s.host.name for s in group}) == 1
            made += group
            # Drain one host: the next creates avoid it (its report says capacity 0, and a
            # stale report that still offers it gets 503 host_draining, which moves on).
            drained = cluster.hosts[0]
            await drained.client.drain()
            drained.load.capacity = MAX_PER_HOST  # pretend the report is stale: the refusal must move it on
            drained.load.placed = 0
            extra = await cluster.create(image="minimal", screen="320x240")
            made.append(extra)
            assert extra.host is not drained
            # Fill up the rest: with no room anywhere, a clear error after the bounded wait.
            await cluster.refresh()
            while any(h.load.free > 0 for h in cluster.hosts):
                made.append(await cluster.create(image="minimal", screen="320x240"))
            t0 = time.monotonic()
            with pytest.raises(NoCapacity) as e:
                await cluster.create(image="minimal", screen="320x240")
            assert 4.5 <= time.monotonic() - t0 < 30
            assert "draining" in str(e.value) and "room for 0" in str(e.value), str(e.value)
        finally:
            await asyncio.gather(*(s.destroy() for s in made))
        assert sum(cluster.spread().values()) == 0


class _BadHost(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        body = json.dumps(
            {"hostId": "x", "instanceId": "y", "draining": False, "capacity": {"sessions": "lots"}}
        ).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


async def test_bad_hosts_are_skipped_and_reported(nodes):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _BadHost)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    import socket

    s = socket.socket()  # a port nobody listens on: bind, read the port, close
    s.bind(("127.0.0.1", 0))
    dead_port = s.getsockname()[1]
    s.close()
    eps = [
        Endpoint(f"http://127.0.0.1:{srv.server_address[1]}", "t", "malformed"),
        Endpoint(f"http://127.0.0.1:{dead_port}", "t", "unreachable"),
        nodes.endpoints[1],
    ]
    try:
        async with AsyncClusterClient(eps, wait_s=5) as cluster:
            assert cluster.problems["malformed"].startswith("malformed report: capacity.sessions")
            assert cluster.problems["unreachable"].startswith("unreachable")
            s1 = await cluster.create(image="minimal", screen="320x240")
            try:
                assert s1.host.endpoint == nodes.endpoints[1]
            finally:
                await s1.destroy()
    finally:
        srv.shutdown()
        srv.server_close()


async def test_fork_stays_on_its_host_and_a_group_claims_from_a_pool(nodes):
    # A pool on one (undrained) host only: a group claim with pool= goes there, all of it.
    async with nodes.cluster(wait_s=30) as cluster:
        target = next(h for h in cluster.hosts if h.report and not h.report["draining"])
        name = f"p{os.getpid()}"
        await target.client.pools.put(name, size=2, image="minimal", screen="320x240")
        made: list = []
        try:
            deadline = time.monotonic() + 120
            while _ready(target, name) < 2 and time.monotonic() < deadline:
                await asyncio.sleep(0.5)
                await cluster.refresh()
            assert _ready(target, name) == 2, target.report and target.report.get("pools")
            group = await cluster.create_group(2, pool=name, onEmpty="fail")
            made += group
            assert all(s.host is target for s in group), [s.host.name for s in group]
            assert all(s.info["labels"]["drums.pool"] == name for s in group)
            # The pool goes (its refills with it: this host holds 4), the claimed pair stays.
            await target.client.pools.delete(name)
            deadline = time.monotonic() + 120
            while (await target.client.host())["sessions"]["held"] > 2 and time.monotonic() < deadline:
                await asyncio.sleep(0.5)
            # A fork's copies are on the source's host and tracked like any placed session.
            copies = await group[0].fork(1)
            made += copies
            assert copies[0].host is target and copies[0].id in target.sessions
            assert cluster.spread()[target.name] == 3
            await copies[0].act({"type": "move", "x": 5, "y": 5})
            # Lost with the host: the copy's handle raises SessionLost like the rest, and when the
            # host reports again with the same instance the client destroys what it gave up on.
            cluster._lose_host(target, "test: host declared lost")
            with pytest.raises(SessionLost):
                await copies[0].act({"type": "move", "x": 6, "y": 6})
            assert copies[0].id in cluster.lost and group[0].id in cluster.lost
            await cluster.refresh()
            left = {s.id for s in await target.client.sessions.list()}
            assert not left & {s.id for s in made}, left
            made = []
        finally:
            await asyncio.gather(*(s.destroy() for s in made), return_exceptions=True)
            if any(p["name"] == name for p in await target.client.pools.list()):
                await target.client.pools.delete(name)


def _ready(h, pool: str) -> int:
    from drums.integrations.cluster import _pool_ready

    return _pool_ready(h, pool)
