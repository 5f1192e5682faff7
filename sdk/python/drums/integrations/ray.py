"""Drums on a Ray cluster (``pip install 'drums[ray]'``).

    import ray
    from drums.ray import DrumsNodes
    ray.init()
    nodes = DrumsNodes.start(drums_bin="/opt/drums/bin/drums")   # one daemon per alive Ray node
    async with nodes.cluster() as cluster:                       # drums.cluster.AsyncClusterClient
        s = await cluster.create(image="default")
    nodes.stop()

Each Ray node gets one :class:`DrumsNode` actor, pinned to it with a hard node
affinity. The actor starts ``drums serve`` with its own state dir, instance
name, port and subnet pool (``DRUMS_SUBNET_POOL``), and supervises it: if the
daemon dies it is started again on the same state dir (which sweeps what the
dead one left) and comes back with a new ``instanceId``, so cluster clients
report the old sessions lost. The daemon gets SIGTERM if the actor's process
dies (``PR_SET_PDEATHSIG``), so no daemon outlives its node.

:func:`join` builds a cluster client over daemons that already run, given URLs.
"""

from __future__ import annotations

import ctypes
import json
import os
import secrets
import shutil
import signal
import subprocess
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from .cluster import AsyncClusterClient, Endpoint

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    # Runs in the child between fork and exec: SIGTERM it when the thread that forked it dies.
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _start_time(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


class _Supervisor:
    """Starts and restarts one ``drums serve``; all its forks happen on its own thread
    (PDEATHSIG is tied to the forking thread, which lives as long as the actor)."""

    def __init__(self, argv: list[str], env: dict[str, str], state_dir: str, restart: bool):
        self.argv, self.env, self.state_dir, self.restart = argv, env, state_dir, restart
        self.proc: subprocess.Popen[bytes] | None = None
        self.url: str | None = None
        self.starts = 0
        self.error: str | None = None
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="drums-supervisor", daemon=True)
        self._thread.start()

    def _spawn(self) -> None:
        record = Path(self.state_dir, "daemon.json")
        record.unlink(missing_ok=True)
        log = open(Path(self.state_dir, "daemon.log"), "ab")
        self.proc = subprocess.Popen(
            self.argv, env=self.env, stdin=subprocess.DEVNULL, stdout=log, stderr=log, preexec_fn=_die_with_parent
        )
        log.close()
        self.starts += 1
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and self.proc.poll() is None:
            if record.exists():
                try:
                    self.url = json.loads(record.read_text())["url"]
                    urllib.request.urlopen(self.url + "/healthz", timeout=5).read()
                    # A restart keeps the URL, so clients see the same host with a new instanceId.
                    self.env["DRUMS_PORT"] = self.url.rsplit(":", 1)[1]
                    self._ready.set()
                    return
                except (OSError, ValueError, KeyError):
                    pass
            time.sleep(0.1)
        self.error = f"drums serve did not come up (exit {self.proc.poll()}); see {self.state_dir}/daemon.log"
        self._ready.set()

    def _run(self) -> None:
        self._spawn()
        while not self._stop.is_set():
            if self.proc is not None and self.proc.poll() is not None and self.restart and not self._stop.is_set():
                self._ready.clear()
                # Clients count a dead daemon's sessions lost (its instanceId changes), so the new
                # daemon must not adopt them: sweep what the dead one left, then serve afresh.
                subprocess.run(
                    [self.argv[0], "sweep"],
                    env=self.env,
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    timeout=120,
                    check=False,
                )
                self._spawn()
            self._stop.wait(0.2)
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # our own child, by its handle
            try:
                self.proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def wait_ready(self, timeout: float) -> None:
        if not self._ready.wait(timeout):
            raise TimeoutError(f"drums serve not ready in {timeout:g} s")
        if self.error:
            raise RuntimeError(self.error)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=120)


@ray.remote(num_cpus=0, max_restarts=0)
class DrumsNode:
    """One Drums daemon on this actor's Ray node."""

    def __init__(
        self,
        drums_bin: str,
        *,
        instance: str | None = None,
        state_dir: str | None = None,
        subnet_pool: str | None = None,
        listen: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        env: dict[str, str] | None = None,
        restart: bool = True,
    ):
        self.instance = instance or "r" + secrets.token_hex(2)
        self.state_dir = state_dir or f"/var/tmp/drums-ray-{self.instance}"
        self._own_dir = state_dir is None
        os.makedirs(self.state_dir, mode=0o700, exist_ok=True)
        self.token = token or secrets.token_hex(16)
        e = {
            **os.environ,
            **(env or {}),
            "DRUMS_STATE_DIR": self.state_dir,
            "DRUMS_INSTANCE": self.instance,
            "DRUMS_TOKEN": self.token,
            "DRUMS_PORT": str(port),
            "DRUMS_LISTEN": listen,
        }
        if subnet_pool:
            e["DRUMS_SUBNET_POOL"] = subnet_pool
        e.pop("DRUMS_URL", None)
        argv = [drums_bin, "serve"] + ([] if listen in ("127.0.0.1", "::1", "localhost") else ["--allow-remote"])
        self.node_id = ray.get_runtime_context().get_node_id()
        self._sup = _Supervisor(argv, e, self.state_dir, restart)
        self._sup.wait_ready(150)

    def endpoint(self, timeout: float = 150) -> dict[str, Any]:
        """The daemon's URL and token (waits while it restarts)."""
        self._sup.wait_ready(timeout)
        return {
            "url": self._sup.url,
            "token": self.token,
            "name": f"node-{self.node_id[:8]}",
            "instance": self.instance,
            "state_dir": self.state_dir,
            "node_id": self.node_id,
            "starts": self._sup.starts,
        }

    def kill_daemon(self) -> int:
        """SIGKILLs the daemon's Node process (failure injection): found from its record, checked by start time, signalled through a pidfd."""
        rec = json.loads(Path(self.state_dir, "daemon.json").read_text())
        pid = int(rec["pid"])
        fd = os.pidfd_open(pid)
        try:
            if _start_time(pid) != str(rec["startTime"]):
                raise RuntimeError(f"pid {pid} is no longer the daemon")
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        finally:
            os.close(fd)
        return pid

    def stop(self) -> None:
        """SIGTERM the daemon (it destroys its sessions and sweeps), and remove a state dir this actor made."""
        self._sup.stop()
        if self._own_dir:
            shutil.rmtree(self.state_dir, ignore_errors=True)


@dataclass
class DrumsNodes:
    """The DrumsNode actors of a Ray cluster, one per node."""

    actors: list[Any]
    endpoints: list[Endpoint]
    infos: list[dict[str, Any]]

    @classmethod
    def start(
        cls,
        drums_bin: str,
        *,
        node_ids: Sequence[str] | None = None,
        subnet_pool: Callable[[int], str] | None = None,
        listen: str | Callable[[dict[str, Any]], str] = "127.0.0.1",
        env: dict[str, str] | None = None,
        restart: bool = True,
    ) -> "DrumsNodes":
        """One DrumsNode on each alive Ray node (or on ``node_ids``), pinned there. ``subnet_pool(i)``
        gives node i its DRUMS_SUBNET_POOL (needed when several nodes share a machine)."""
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        if node_ids is not None:
            nodes = [n for n in nodes if n["NodeID"] in set(node_ids)]
        actors = []
        for i, n in enumerate(nodes):
            addr = listen(n) if callable(listen) else listen
            actors.append(
                DrumsNode.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote(
                    drums_bin,
                    subnet_pool=subnet_pool(i) if subnet_pool else None,
                    listen=addr,
                    env=env,
                    restart=restart,
                )
            )
        infos = ray.get([a.endpoint.remote() for a in actors])
        return cls(actors, [Endpoint(i["url"], i["token"], i["name"]) for i in infos], infos)

    def cluster(self, **kw: Any) -> AsyncClusterClient:
        """An async cluster client over these nodes' daemons (``async with``)."""
        return AsyncClusterClient(self.endpoints, **kw)

    def stop(self) -> None:
        ray.get([a.stop.remote() for a in self.actors])
        for a in self.actors:
            ray.kill(a)


def join(urls: Sequence[str], token: str | Sequence[str], **kw: Any) -> AsyncClusterClient:
    """A cluster client over daemons that already run (one token for all, or one per URL)."""
    tokens = [token] * len(urls) if isinstance(token, str) else list(token)
    if len(tokens) != len(urls):
        raise ValueError("give one token, or one per URL")
    return AsyncClusterClient([Endpoint(u, t) for u, t in zip(urls, tokens, strict=True)], **kw)
