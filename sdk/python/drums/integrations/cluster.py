"""Many Drums hosts as one: an async cluster client with client-side placement.

    from drums.cluster import AsyncClusterClient, Endpoint
    async with AsyncClusterClient([Endpoint(url, token), ...]) as cluster:
        s = await cluster.create(image="minimal")            # placed by power of two choices
        group = await cluster.create_group(8, image="minimal")  # a GRPO group: all on one host
        await s.act({...}); await s.destroy()

Hosts come from a list of endpoints: given, from Ray (``drums.ray``) or from
Kubernetes EndpointSlices (``drums.k8s``). The client reads each host's own
``GET /v1/host`` every ``refresh_s`` and places each create on the freer of two
random usable hosts, counting its own in-flight placements (``drums.placement``).

- A refusal (429 ``pool_exhausted``/``rate_limited``/..., 503 ``host_draining``/...)
  moves the request to the next host; nothing is written anywhere but the host.
- A host that does not answer, answers with another ``instanceId`` (it restarted:
  its sessions are gone) or sends a malformed report is skipped and listed in
  :attr:`AsyncClusterClient.problems`; the cluster carries on with the others.
- Sessions on a host that restarted, or that stayed unreachable for ``dead_after_s``,
  are lost: every later call on them raises :class:`SessionLost` (code ``session_lost``),
  and :attr:`AsyncClusterClient.lost` says which and why.
- With no capacity anywhere, a create waits up to ``wait_s`` for some, then raises
  :class:`NoCapacity` (code ``no_capacity``) naming each host's reason.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Iterable, Sequence

import httpx

from ..client import AsyncClient, AsyncSession
from ..errors import DrumsError
from .placement import HostLoad, Placer


class SessionLost(DrumsError):
    """The session's host died or restarted; the session is gone."""

    code = "session_lost"
    status = 0


class NoCapacity(DrumsError):
    """No host could take the request within the wait."""

    code = "no_capacity"
    status = 0


#: Statuses a host answers when it cannot take a session now: try the next host.
REFUSALS = (429, 503)


@dataclass(frozen=True)
class Endpoint:
    url: str
    token: str
    name: str | None = None


@dataclass(eq=False)
class Host:
    endpoint: Endpoint
    client: AsyncClient
    load: HostLoad
    host_id: str | None = None
    instance_id: str | None = None
    draining: bool = False
    report: dict[str, Any] | None = None
    #: Monotonic time of the last good report, and of the first failure since.
    seen_at: float = 0.0
    failing_since: float | None = None
    #: Answer times of placements since the last report started (the report does not count them).
    placed_at: list[float] = field(default_factory=list)
    #: Sessions this client placed there (id -> handle).
    sessions: dict[str, "ClusterSession"] = field(default_factory=dict)
    #: Sessions declared lost while the host was unreachable; destroyed if it comes back unrestarted.
    orphans: list[AsyncSession] = field(default_factory=list)
    #: Left discovery: no new work, kept while it holds sessions.
    retired: bool = False

    @property
    def name(self) -> str:
        return self.endpoint.name or self.host_id or self.endpoint.url


def validate_report(r: Any) -> dict[str, Any]:
    """The fields placement reads, checked; ValueError names the first bad one."""
    if not isinstance(r, dict):
        raise ValueError("report is not a JSON object")
    for k in ("hostId", "instanceId"):
        if not isinstance(r.get(k), str) or not r[k]:
            raise ValueError(f"{k}: must be a non-empty string")
    if not isinstance(r.get("draining"), bool):
        raise ValueError("draining: must be a boolean")
    cap = r.get("capacity")
    if (
        not isinstance(cap, dict)
        or not isinstance(cap.get("sessions"), int)
        or isinstance(cap.get("sessions"), bool)
        or cap["sessions"] < 0
    ):
        raise ValueError("capacity.sessions: must be a non-negative integer")
    sess = r.get("sessions")
    if not isinstance(sess, dict) or not all(isinstance(sess.get(k), int) for k in ("held", "max")):
        raise ValueError("sessions.held/max: must be integers")
    return r


class ClusterSession:
    """A session placed by the cluster: an :class:`AsyncSession` that knows its host.
    Calls after its host was found dead or restarted raise :class:`SessionLost`."""

    def __init__(self, cluster: "AsyncClusterClient", host: Host, s: AsyncSession):
        self._cluster = cluster
        self.host = host
        self.session = s
        self.id = s.id

    @property
    def generation(self) -> int:
        return self.session.generation

    @property
    def info(self) -> dict[str, Any]:
        return self.session.info  # type: ignore[return-value]

    @property
    def screen(self) -> tuple[int, int]:
        return self.session.screen

    async def _call(self, fn: Callable[[], Awaitable[Any]]) -> Any:
        self._cluster._raise_if_lost(self)
        try:
            return await fn()
        except DrumsError as e:
            if e.code != "transport_error" and e.code != "session_not_found":
                raise
            # Is the host gone (or restarted, so the id is unknown there)? Then the session is lost.
            await self._cluster._confirm(self.host)
            self._cluster._raise_if_lost(self)
            raise

    async def act(self, actions: Any, **kw: Any) -> Any:
        return await self._call(lambda: self.session.act(actions, **kw))

    async def screenshot(self, format: str = "png", **q: Any) -> bytes:
        return await self._call(lambda: self.session.screenshot(format, **q))

    async def exec(self, cmd: Any, **kw: Any) -> Any:
        return await self._call(lambda: self.session.exec(cmd, **kw))

    async def a11y(self, format: str = "xml") -> Any:
        return await self._call(lambda: self.session.a11y(format))

    async def reset(self) -> "ClusterSession":
        await self._call(self.session.reset)
        return self

    async def refresh(self) -> "ClusterSession":
        await self._call(self.session.refresh)
        return self

    async def release(self) -> None:
        """Gives a pool session back (``POST /release`` where the host has pools), else destroys it."""
        try:
            await self._call(lambda: self.session._req("POST", "/release"))
            self._cluster._forget(self)
        except DrumsError as e:
            # Not from a pool (or a host without pools): the session is simply destroyed.
            if e.code in ("session_not_pooled", "not_found", "method_not_allowed"):
                await self.destroy()
            else:
                raise

    async def fork(self, n: int = 1, *, mode: str = "disk") -> list["ClusterSession"]:
        """``n`` copies of this session, on its host (a fork is host-local), tracked like any session
        the cluster placed: counted in that host's placements until its next report, listed in
        :attr:`AsyncClusterClient.spread`, and lost with the host (:class:`SessionLost`)."""
        return await self._cluster._fork(self, n, mode)

    async def destroy(self) -> None:
        if self.id in self._cluster.lost:
            return
        try:
            await self._call(self.session.destroy)
        finally:
            self._cluster._forget(self)

    async def __aenter__(self) -> "ClusterSession":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.destroy()

    def __repr__(self) -> str:
        return f"<ClusterSession {self.id} on {self.host.name}>"


class AsyncClusterClient:
    def __init__(
        self,
        endpoints: Iterable[Endpoint] = (),
        *,
        refresh_s: float = 1.0,
        wait_s: float = 30.0,
        dead_after_s: float = 3.0,
        report_timeout_s: float = 5.0,
        rng: random.Random | None = None,
        timeout: httpx.Timeout | float | None = None,
        discovery: Any = None,
        discovery_s: float = 5.0,
    ):
        self.refresh_s = refresh_s
        self.wait_s = wait_s
        self.dead_after_s = dead_after_s
        self.report_timeout_s = report_timeout_s
        self._timeout = timeout
        self.placer = Placer(rng)
        self.hosts: list[Host] = []
        #: session id -> why it was lost (host died / restarted).
        self.lost: dict[str, str] = {}
        #: host name -> the latest problem with it (unreachable, restarted, malformed report, ...).
        self.problems: dict[str, str] = {}
        #: (monotonic time, host name, event) for lost hosts and rejoins, in order.
        self.events: list[tuple[float, str, str]] = []
        self._task: asyncio.Task[None] | None = None
        #: Something with ``async endpoints() -> list[Endpoint]`` (e.g. drums.k8s.EndpointSliceDiscovery).
        self.discovery = discovery
        self.discovery_s = discovery_s
        self._discovered_at = float("-inf")
        for ep in endpoints:
            self.add(ep)

    # -- membership

    def add(self, ep: Endpoint) -> Host:
        """Adds a host (by URL; adding one again is a no-op). It takes work after its first good report."""
        for h in self.hosts:
            if h.endpoint.url == ep.url:
                return h
        kw = {"timeout": self._timeout} if self._timeout is not None else {}
        h = Host(ep, AsyncClient(ep.url, ep.token, **kw), HostLoad(ep.name or ep.url))
        self.hosts.append(h)
        return h

    async def set_endpoints(self, eps: Sequence[Endpoint]) -> None:
        """Makes ``eps`` the hosts that take new work (discovery calls this). A host that left the
        list (not ready, draining, deleted) takes no new work; its sessions stay usable while it
        answers, and it is dropped once it holds none of ours."""
        urls = {e.url for e in eps}
        for h in list(self.hosts):
            h.retired = h.endpoint.url not in urls
            if h.retired:
                h.load.usable, h.load.problem = False, "left discovery"
                if not h.sessions:
                    self.hosts.remove(h)
                    await h.client.aclose()
        for e in eps:
            self.add(e).retired = False

    # -- reports

    async def discover(self) -> None:
        """Asks the discovery for the host list now; on failure keeps the last one (and reports it)."""
        self._discovered_at = time.monotonic()
        try:
            eps = await self.discovery.endpoints()
        except Exception as e:  # noqa: BLE001 - any discovery failure keeps the last good list
            self.problems["discovery"] = (
                f"discovery failed, keeping {sum(not h.retired for h in self.hosts)} known hosts: {e}"
            )
            return
        self.problems.pop("discovery", None)
        await self.set_endpoints(eps)

    async def refresh(self) -> None:
        """Reads every host's report now (concurrently); first the discovery, when it is due."""
        if self.discovery is not None and time.monotonic() - self._discovered_at >= self.discovery_s:
            await self.discover()
        await asyncio.gather(*(self._report(h) for h in list(self.hosts)))

    async def _report(self, h: Host) -> bool:
        started = time.monotonic()
        try:
            r = await asyncio.wait_for(h.client.host(), self.report_timeout_s)
            validate_report(r)
        except (DrumsError, asyncio.TimeoutError, ValueError) as e:
            self._failed(h, e)
            return False
        if h.instance_id is not None and r["instanceId"] != h.instance_id:
            # Restarted: whatever we placed there is gone. The new instance may take work.
            self._lose_host(h, f"host {h.name} restarted (instance {h.instance_id} -> {r['instanceId']})")
            self.problems[h.name] = "restarted; its sessions were lost"
            h.orphans.clear()
        elif h.orphans:
            # Back with the same instance after we declared its sessions lost: destroy them there.
            orphans, h.orphans = h.orphans, []
            await asyncio.gather(*(o.destroy() for o in orphans), return_exceptions=True)
        if h.failing_since is not None:
            self.events.append((time.monotonic(), h.name, "rejoined"))
        h.host_id, h.instance_id, h.report = r["hostId"], r["instanceId"], r
        h.draining = r["draining"]
        h.seen_at, h.failing_since = time.monotonic(), None
        h.placed_at = [t for t in h.placed_at if t >= started]
        h.load.placed = len(h.placed_at)
        h.load.capacity = r["capacity"]["sessions"]
        h.load.usable = not h.draining and not h.retired
        h.load.problem = "draining" if h.draining else "left discovery" if h.retired else None
        if not h.draining and self.problems.get(h.name, "").startswith(("unreachable", "malformed", "error")):
            self.problems.pop(h.name, None)
        return True

    def _failed(self, h: Host, e: BaseException) -> None:
        now = time.monotonic()
        if isinstance(e, ValueError):
            why = f"malformed report: {e}"
        elif isinstance(e, asyncio.TimeoutError) or getattr(e, "code", None) == "transport_error":
            why = f"unreachable: {e or 'no answer in time'}"
        else:
            why = f"error: {e}"
        h.load.usable, h.load.problem = False, why
        self.problems[h.name] = why
        if h.failing_since is None:
            h.failing_since = now
        if now - h.failing_since >= self.dead_after_s and h.sessions:
            self._lose_host(h, f"host {h.name} unreachable for {self.dead_after_s:g} s: {why}")

    def _lose_host(self, h: Host, why: str) -> None:
        if h.sessions:
            self.events.append((time.monotonic(), h.name, f"lost {len(h.sessions)} sessions: {why}"))
        for sid, cs in h.sessions.items():
            self.lost[sid] = why
            h.orphans.append(cs.session)
        h.sessions.clear()
        h.load.usable = False

    async def _confirm(self, h: Host) -> None:
        """After a failed call: probe the host until it answers or ``dead_after_s`` passes."""
        deadline = time.monotonic() + self.dead_after_s
        while True:
            if await self._report(h):
                return
            if h.failing_since is not None and time.monotonic() - h.failing_since >= self.dead_after_s:
                if h.sessions:
                    self._lose_host(h, f"host {h.name} unreachable for {self.dead_after_s:g} s: {h.load.problem}")
                return
            await asyncio.sleep(min(0.25, max(0.0, deadline - time.monotonic())))

    def _raise_if_lost(self, s: ClusterSession) -> None:
        why = self.lost.get(s.id)
        if why is not None:
            raise SessionLost(
                f"session {s.id} is lost: {why}", details={"session": s.id, "host": s.host.name, "reason": why}
            )

    def _forget(self, s: ClusterSession) -> None:
        s.host.sessions.pop(s.id, None)

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.refresh_s)
            try:
                await self.refresh()
            except Exception:  # a bug in one round must not stop the refreshes
                pass

    async def start(self) -> "AsyncClusterClient":
        await self.refresh()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop())
        return self

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        for h in self.hosts:
            await h.client.aclose()
        if self.discovery is not None and hasattr(self.discovery, "aclose"):
            await self.discovery.aclose()

    async def __aenter__(self) -> "AsyncClusterClient":
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    # -- placement

    def _why_none(self, need: int, tried: dict[str, str]) -> str:
        parts = []
        for h in self.hosts:
            if h.load.key in tried:
                parts.append(f"{h.name}: refused ({tried[h.load.key]})")
            elif not h.load.usable:
                parts.append(f"{h.name}: {h.load.problem}")
            else:
                parts.append(f"{h.name}: room for {max(0, h.load.free)} (need {need})")
        return "; ".join(parts) or "no hosts"

    async def _place(
        self, need: int, make: Callable[[Host], Awaitable[list[AsyncSession]]], pool: str | None = None
    ) -> tuple[Host, list[AsyncSession]]:
        deadline = time.monotonic() + self.wait_s
        tried: dict[str, str] = {}
        while True:
            h = self._choose(need, set(tried), pool)
            if h is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise NoCapacity(
                        f"no host could take {need} session(s) within {self.wait_s:g} s: {self._why_none(need, tried)}",
                        details={"hosts": self._why_none(need, tried), "need": need},
                    )
                await asyncio.sleep(min(self.refresh_s, left))
                await self.refresh()
                tried.clear()  # fresh reports: refusals may be over
                continue
            h.load.inflight += need
            try:
                made = await make(h)
            except DrumsError as e:
                if e.status in REFUSALS:
                    h.load.capacity = 0  # until its next report says otherwise
                    tried[h.load.key] = e.code
                    continue
                if e.code == "transport_error":
                    self._failed(h, e)
                    tried[h.load.key] = e.code
                    continue
                raise
            finally:
                h.load.inflight -= need
            now = time.monotonic()
            h.placed_at.extend([now] * need)
            h.load.placed = len(h.placed_at)
            return h, made

    def _choose(self, need: int, exclude: set[str], pool: str | None = None) -> Host | None:
        by_key = {id(h.load): h for h in self.hosts}
        if pool is not None:
            # A claim goes to a host whose report shows that pool with enough ready sessions (power
            # of two choices among those); with none, to any host (its pool makes fresh ones or refuses).
            ready = [h.load for h in self.hosts if _pool_ready(h, pool) >= need]
            load = self.placer.choose(ready, need, exclude) if ready else None
            if load is not None:
                return by_key[id(load)]
        load = self.placer.choose([h.load for h in self.hosts], need, exclude)
        return by_key[id(load)] if load is not None else None

    def _adopt(self, h: Host, made: list[AsyncSession]) -> list[ClusterSession]:
        out = [ClusterSession(self, h, s) for s in made]
        for cs in out:
            h.sessions[cs.id] = cs
        return out

    async def create(self, **spec: Any) -> ClusterSession:
        """Places one session (same arguments as ``AsyncClient.sessions.create``; a pool claim is ``pool=NAME``,
        placed on a host whose report shows that pool with a ready session when there is one)."""
        h, made = await self._place(1, lambda h: _one(h, spec), spec.get("pool"))
        return self._adopt(h, made)[0]

    async def claim(self, pool: str, **spec: Any) -> ClusterSession:
        """A session from a warm pool (``POST /v1/sessions`` with ``pool``), placed like a create."""
        return await self.create(pool=pool, **spec)

    async def create_group(self, n: int, **spec: Any) -> list[ClusterSession]:
        """``n`` sessions on one host (a GRPO group: forks are host-local). All or none. With
        ``pool=NAME`` the ``n`` are claims from that pool (e.g. a pool of set-up tasks, docs/pools.md),
        on a host whose report shows ``n`` ready in it when there is one."""
        h, made = await self._place(n, lambda h: _group(h, n, spec), spec.get("pool"))
        return self._adopt(h, made)

    async def _fork(self, src: ClusterSession, n: int, mode: str) -> list[ClusterSession]:
        h = src.host
        h.load.inflight += n
        try:
            copies = await src._call(lambda: src.session.fork(n, mode=mode))
        finally:
            h.load.inflight -= n
        if src.id in self.lost:  # the host was lost while the fork ran: its copies are lost with it
            for c in copies:
                self.lost[c.id] = self.lost[src.id]
            self._raise_if_lost(src)
        now = time.monotonic()
        h.placed_at.extend([now] * n)
        h.load.placed = len(h.placed_at)
        return self._adopt(h, copies)

    def spread(self) -> dict[str, int]:
        """Sessions this client holds, per host."""
        return {h.name: len(h.sessions) for h in self.hosts}


def _pool_ready(h: Host, pool: str) -> int:
    """Ready sessions of ``pool`` in the host's last report (0 when it has no such pool)."""
    for p in (h.report or {}).get("pools") or []:
        if isinstance(p, dict) and p.get("name") == pool and isinstance(p.get("ready"), int):
            return p["ready"]
    return 0


async def _one(h: Host, spec: dict[str, Any]) -> list[AsyncSession]:
    return [await h.client.sessions.create(**spec)]


async def _group(h: Host, n: int, spec: dict[str, Any]) -> list[AsyncSession]:
    results = await asyncio.gather(*(h.client.sessions.create(**spec) for _ in range(n)), return_exceptions=True)
    made = [r for r in results if isinstance(r, AsyncSession)]
    errs = [r for r in results if not isinstance(r, AsyncSession)]
    if errs:
        await asyncio.gather(*(s.destroy() for s in made), return_exceptions=True)
        e = errs[0]
        raise e if isinstance(e, BaseException) else RuntimeError(str(e))
    return made
