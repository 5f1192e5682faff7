"""Sync and async clients for the Drums HTTP API.

    from drums import Client
    with Client() as client:                      # DRUMS_URL/DRUMS_TOKEN or the local daemon
        with client.sessions.create(image="default", url="https://example.org") as s:
            png = s.screenshot()
            s.act({"type": "click", "x": 100, "y": 200, "button": "left", "count": 1})
            print(s.exec(["uname", "-a"])["stdout"])
            s.reset()                             # a new attempt: generation + 1
        # the session is destroyed here

A ``Session`` pins its generation: every call states it (``x-drums-generation``),
so a call made after somebody else reset the session fails with
``StaleGeneration`` instead of acting on the wrong attempt. ``reset()`` and
``refresh()`` move the pin.

Request and response bodies are plain dicts at run time; their annotations are
the TypedDicts generated from the API spec into ``drums._models`` (``drums.models``).
"""

from __future__ import annotations

import base64
import json
import os
import uuid
from pathlib import Path
from typing import Any, AsyncIterator, Iterator, Sequence

import httpx

from . import _models as m
from .episodes import AsyncEpisodes, Episodes
from .errors import DrumsError, error_from_response

DEFAULT_TIMEOUT = httpx.Timeout(connect=10.0, read=300.0, write=60.0, pool=60.0)


def _discover(url: str | None, token: str | None) -> tuple[str, str]:
    """Arguments, else DRUMS_URL/DRUMS_TOKEN, else the state dir's daemon.json and token."""
    state = Path(os.environ.get("DRUMS_STATE_DIR") or "/var/lib/drums")
    if url is None:
        url = os.environ.get("DRUMS_URL")
        if url is None and (state / "daemon.json").exists():
            url = json.loads((state / "daemon.json").read_text())["url"]
    if url is None:
        raise DrumsError("no daemon URL: pass url=, set DRUMS_URL, or start 'drums serve'", code="no_daemon")
    if token is None:
        token = os.environ.get("DRUMS_TOKEN")
        if token is None and (state / "token").exists():
            token = (state / "token").read_text().strip()
    if token is None:
        raise DrumsError("no token: pass token= or set DRUMS_TOKEN", code="no_token")
    return url.rstrip("/"), token


def _check(r: httpx.Response) -> httpx.Response:
    if r.status_code >= 400:
        try:
            body = r.json()
        except ValueError:
            body = None
        raise error_from_response(r.status_code, body)
    return r


_MIME = {"png": "image/png", "jpeg": "image/jpeg", "webp": "image/webp", "raw": "application/octet-stream"}


def _accept(screenshot: Any) -> str:
    fmt = screenshot.get("format", "png") if isinstance(screenshot, dict) else "png"
    return f"{_MIME.get(fmt, 'image/png')}, application/json"


def _image_response(r: httpx.Response) -> tuple[m.ActionsResponse, bytes | None]:
    """(response, image bytes) from a binary or a JSON answer of POST /actions."""
    meta = r.headers.get("x-drums-actions")
    if meta is None:
        j = r.json()
        shot = j.get("screenshot")
        if not shot:
            return j, None
        data = base64.b64decode(shot.pop("data"))
        return j, data
    j = json.loads(meta)
    h = r.headers
    mime = h.get("content-type", "")
    shot: dict[str, Any] = {
        "format": next((k for k, v in _MIME.items() if v == mime), "raw"),
        "width": int(h["x-drums-width"]),
        "height": int(h["x-drums-height"]),
        "mimeType": mime,
    }
    if "x-drums-scale-x" in h:
        shot["scaleX"], shot["scaleY"] = float(h["x-drums-scale-x"]), float(h["x-drums-scale-y"])
    j["screenshot"] = shot
    return j, r.content


def _exec_body(cmd: str | Sequence[str], kw: dict[str, Any]) -> m.ExecRequest:
    body: dict[str, Any] = {"shell": cmd} if isinstance(cmd, str) else {"argv": list(cmd)}
    names = {
        "root": "root",
        "cwd": "cwd",
        "env": "env",
        "stdin": "stdin",
        "timeout_ms": "timeoutMs",
        "max_output_bytes": "maxOutputBytes",
    }
    for k, v in kw.items():
        if k not in names:
            raise TypeError(f"exec() got an unexpected keyword argument {k!r}")
        if v is not None:
            body[names[k]] = v
    return body  # type: ignore[return-value]


def _spec(kw: dict[str, Any]) -> m.SessionSpec:
    names = {
        "memory_mb": "memoryMb",
        "disk_mb": "diskMb",
        "disk_read_mbps": "diskReadMbps",
        "disk_write_mbps": "diskWriteMbps",
        "host_ports": "hostPorts",
        "browser_flags": "browserFlags",
        "browser_sandbox": "browserSandbox",
        "ttl_seconds": "ttlSeconds",
    }
    return {names.get(k, k): v for k, v in kw.items() if v is not None}  # type: ignore[return-value]


def _actions(actions: m.Action | dict[str, Any] | Sequence[m.Action | dict[str, Any]]) -> list[m.Action]:
    return [actions] if isinstance(actions, (dict, str)) else list(actions)  # type: ignore[list-item]


def _shot_params(format: str, query: dict[str, Any]) -> dict[str, Any]:
    return {"format": format, **{k: (str(v).lower() if isinstance(v, bool) else v) for k, v in query.items()}}


def _raw_array(r: httpx.Response):
    """A raw screenshot answer as a numpy uint8 array of shape (height, width, 3)."""
    import numpy as np

    w, h = int(r.headers["x-drums-width"]), int(r.headers["x-drums-height"])
    return np.frombuffer(r.content, dtype=np.uint8).reshape(h, w, 3)


def _files_q(path: str, root: bool, **extra: Any) -> dict[str, Any]:
    q = {"path": path, **{k: v for k, v in extra.items() if v is not None}}
    if root:
        q["root"] = "true"
    return q


class _SessionBase:
    def __init__(self, info: m.Session):
        self._set(info)

    #: For a session claimed from a pool: True if it was ready in the pool, False if made fresh.
    pool_hit: bool | None = None

    def _set(self, info: m.Session) -> None:
        self.info: m.Session = info
        self.id: str = info["id"]
        self.generation: int = info["generation"]
        self.attempt: m.Attempt = info["attempt"]

    @property
    def state(self) -> m.SessionState:
        return self.info["state"]

    @property
    def screen(self) -> tuple[int, int]:
        return self.info["screen"]["width"], self.info["screen"]["height"]

    @property
    def takeover(self) -> m.TakeoverView | None:
        """Who held a take-over ({holder, since}) when the session was last read, or None."""
        return self.info.get("takeover")

    def _h(self) -> dict[str, str]:
        return {"x-drums-generation": str(self.generation)}

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.id} gen {self.generation} {self.info.get('state')}>"


# ----------------------------------------------------------------------------- sync


class Client:
    """Synchronous client. ``Client(url, token)``; both default from the environment."""

    def __init__(
        self, url: str | None = None, token: str | None = None, *, timeout: httpx.Timeout | float = DEFAULT_TIMEOUT
    ):
        self.url, self._token = _discover(url, token)
        self._http = httpx.Client(
            base_url=self.url, headers={"authorization": f"Bearer {self._token}"}, timeout=timeout
        )
        self.sessions = Sessions(self)
        self.pools = Pools(self)
        self.episodes = Episodes(self)

    def request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        try:
            return _check(self._http.request(method, path, **kw))
        except httpx.TransportError as e:
            raise DrumsError(f"cannot reach the daemon at {self.url}: {e}", code="transport_error") from e

    def health(self) -> bool:
        return self.request("GET", "/healthz").json().get("ok") is True

    def openapi(self) -> dict[str, Any]:
        return self.request("GET", "/openapi.json").json()

    def host(self) -> m.HostReport:
        """``GET /v1/host``: sessions held and max, capacity, resources, images, host and instance ids."""
        return self.request("GET", "/v1/host").json()

    def drain(self) -> m.HostReport:
        """``POST /v1/host/drain``: new creates get 503 ``host_draining``; held sessions go on."""
        return self.request("POST", "/v1/host/drain").json()

    def undrain(self) -> m.HostReport:
        """``DELETE /v1/host/drain``: take new sessions again."""
        return self.request("DELETE", "/v1/host/drain").json()

    def join_client_cgroup(self, pid: int | None = None) -> m.ClientCgroupResult:
        """``POST /v1/host/client-cgroup``: move this process (or ``pid``, one of yours) into the daemon
        instance's client CPU cgroup, beside the daemon's and with its weight, so that no session can take
        its CPU; threads and children started later are in it too. Only for a client on the daemon's host
        (over loopback); raises ``ProcessNotOwned`` for a process that is not the caller's."""
        return self.request("POST", "/v1/host/client-cgroup", json={"pid": os.getpid() if pid is None else pid}).json()

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Sessions:
    def __init__(self, client: Client):
        self._c = client

    def create(self, *, idempotency_key: str | None = None, **spec: Any) -> "Session":
        """Creates a session (image, url, screen, memory_mb, disk_mb, disk_read_mbps, disk_write_mbps,
        cpus, pids, egress, host_ports, browser_flags, browser_sandbox, ttl_seconds, labels, userns, record, standbys) and waits until it is ready. Retries with the
        same ``idempotency_key`` return the same session."""
        headers = {"idempotency-key": idempotency_key or uuid.uuid4().hex}
        return Session(self._c, self._c.request("POST", "/v1/sessions", json=_spec(spec), headers=headers).json())

    def list(self) -> list["Session"]:
        return [Session(self._c, s) for s in self._c.request("GET", "/v1/sessions").json()["sessions"]]

    def get(self, session_id: str) -> "Session":
        return Session(self._c, self._c.request("GET", f"/v1/sessions/{session_id}").json())


def _claim(pool: str, on_empty: str, labels: dict[str, str] | None, ttl_seconds: int | None) -> m.PoolClaim:
    body: dict[str, Any] = {"pool": pool, "onEmpty": on_empty}
    if labels:
        body["labels"] = labels
    if ttl_seconds is not None:
        body["ttlSeconds"] = ttl_seconds
    return body  # type: ignore[return-value]


class Pools:
    """Warm pools: ``client.pools.put("web", size=8, url=...)``, then ``client.pools.claim("web")``.

    A claim returns a ready session in milliseconds while the pool has one; an
    empty pool makes a fresh one (``on_empty="create"``, the default) or raises
    ``PoolEmpty`` (``on_empty="fail"``). ``session.release()`` gives it back."""

    def __init__(self, client: Client):
        self._c = client

    def list(self) -> list[m.Pool]:
        return self._c.request("GET", "/v1/pools").json()["pools"]

    def get(self, name: str) -> m.Pool:
        return self._c.request("GET", f"/v1/pools/{name}").json()

    def put(self, name: str, *, size: int, **template: Any) -> m.Pool:
        """Creates or changes a pool; ``template`` takes the fields of ``sessions.create``."""
        return self._c.request("PUT", f"/v1/pools/{name}", json={"size": size, "template": _spec(template)}).json()

    def delete(self, name: str) -> None:
        self._c.request("DELETE", f"/v1/pools/{name}")

    def claim(
        self,
        name: str,
        *,
        on_empty: str = "create",
        labels: dict[str, str] | None = None,
        ttl_seconds: int | None = None,
    ) -> "Session":
        r = self._c.request(
            "POST",
            "/v1/sessions",
            json=_claim(name, on_empty, labels, ttl_seconds),
            headers={"idempotency-key": uuid.uuid4().hex},
        )
        s = Session(self._c, r.json())
        s.pool_hit = r.headers.get("x-drums-pool", "").endswith("; hit")
        return s


class Files:
    """Files inside a session (as the desktop user unless ``root=True``)."""

    def __init__(self, s: "Session"):
        self._s = s

    def read(self, path: str, *, root: bool = False) -> bytes:
        return self._s._req("GET", "/files", params=_files_q(path, root)).content

    def write(self, path: str, data: bytes | str, *, mode: str | None = None, root: bool = False) -> m.FileWritten:
        body = data.encode() if isinstance(data, str) else data
        return self._s._req(
            "PUT",
            "/files",
            params=_files_q(path, root, mode=mode),
            content=body,
            headers={"content-type": "application/octet-stream"},
        ).json()

    def delete(self, path: str, *, recursive: bool = False, root: bool = False) -> None:
        self._s._req("DELETE", "/files", params=_files_q(path, root, recursive="true" if recursive else None))

    def list(self, path: str, *, root: bool = False) -> m.FileList:
        return self._s._req("GET", "/files/list", params=_files_q(path, root)).json()

    def stat(self, path: str, *, root: bool = False) -> m.FileStatResult:
        return self._s._req("GET", "/files/stat", params=_files_q(path, root)).json()


class Session(_SessionBase):
    """One session. A context manager: ``with client.sessions.create() as s: ...`` destroys it on exit."""

    def __init__(self, client: Client, info: m.Session):
        super().__init__(info)
        self._c = client
        self.files = Files(self)

    def _req(self, method: str, sub: str, **kw: Any) -> httpx.Response:
        headers = {**self._h(), **kw.pop("headers", {})}
        return self._c.request(method, f"/v1/sessions/{self.id}{sub}", headers=headers, **kw)

    def refresh(self) -> "Session":
        """Re-reads the session (and moves the generation pin to the current one)."""
        self._set(self._c.request("GET", f"/v1/sessions/{self.id}").json())
        return self

    def screenshot(self, format: str = "png", **query: Any) -> bytes:
        """The screen as png, jpeg, webp or raw (packed RGB). Extra query: quality, scale, region, cursor."""
        return self._req("GET", "/screenshot", params=_shot_params(format, query)).content

    def screenshot_array(self, cursor: bool = True):
        """The screen as a numpy uint8 array of shape (height, width, 3)."""
        return _raw_array(self._req("GET", "/screenshot", params=_shot_params("raw", {"cursor": cursor})))

    def act(
        self,
        actions: m.Action | dict[str, Any] | Sequence[m.Action | dict[str, Any]],
        *,
        screenshot: m.ScreenshotOptions | bool | None = None,
        scale: m.Size | None = None,
    ) -> m.ActionsResponse:
        """Runs one canonical action or a batch; optionally returns a screenshot taken after it."""
        body: m.ActionsRequest = {"actions": _actions(actions), "generation": self.generation}
        if screenshot is not None:
            body["screenshot"] = screenshot
        if scale is not None:
            body["scale"] = scale
        return self._req("POST", "/actions", json=body).json()

    def act_image(
        self,
        actions: m.Action | dict[str, Any] | Sequence[m.Action | dict[str, Any]],
        *,
        screenshot: m.ScreenshotOptions | bool = True,
        scale: m.Size | None = None,
    ) -> tuple[m.ActionsResponse, bytes | None]:
        """Like act, with the screenshot as bytes (no base64): returns (response, image).

        Asks for the binary response (image body, JSON in the x-drums-actions header); a JSON
        answer (an older daemon, or results too big for a header) is decoded the same way.
        ``response["screenshot"]`` keeps the geometry (format, width, height, mimeType, scaleX/Y).
        """
        body: m.ActionsRequest = {"actions": _actions(actions), "generation": self.generation, "screenshot": screenshot}
        if scale is not None:
            body["scale"] = scale
        return _image_response(self._req("POST", "/actions", json=body, headers={"accept": _accept(screenshot)}))

    def exec(self, cmd: str | Sequence[str], **kw: Any) -> m.ExecResult:
        """Runs a command (argv list, or a shell string) in the session: {exitCode, stdout, stderr, ...}."""
        return self._req("POST", "/exec", json=_exec_body(cmd, kw)).json()

    def a11y(self, format: str = "xml") -> str | m.A11yTree:
        """The accessibility tree: OSWorld-style XML text, or the JSON tree."""
        r = self._req("GET", "/a11y", params={"format": format})
        return r.text if format == "xml" else r.json()

    def windows(self) -> m.WindowsView:
        """The session's windows and the pointer: {windows, cursor, ...}."""
        return self._req("GET", "/windows").json()

    def reset(self) -> "Session":
        """A fresh desktop and a new attempt (generation + 1)."""
        body: m.ResetRequest = {"generation": self.generation}
        self._set(self._req("POST", "/reset", json=body).json())
        return self

    def events(self, fps: float = 0) -> Iterator[tuple[str, dict[str, Any]]]:
        """Server-sent events: ("state", session), ("frame", {...}), ("end", {reason})."""
        with self._c._http.stream(
            "GET", f"/v1/sessions/{self.id}/events", params={"fps": fps}, timeout=httpx.Timeout(10.0, read=None)
        ) as r:
            _check_stream(r)
            yield from _sse(r.iter_lines())

    def release(self, mode: str = "reset") -> m.ReleaseResult:
        """Gives a session claimed from a pool back: ``reset`` into its pool, or ``destroy``."""
        return self._req("POST", "/release", json={"mode": mode}).json()

    def take_over(self, holder: str | None = None) -> dict[str, Any]:
        """Takes the session's input over: {id, holder, since, generation}. Agent input then gets
        409 ``session_taken_over`` until released; a second take-over 409 ``takeover_held``."""
        return self._req("POST", "/takeover", json={} if holder is None else {"holder": holder}).json()

    def release_takeover(self, takeover_id: str | None = None) -> None:
        """Ends the take-over (with ``takeover_id``, only if it is the one held)."""
        self._req("DELETE", "/takeover", params={} if takeover_id is None else {"takeover": takeover_id})

    def fork(self, n: int = 1, *, mode: str = "disk") -> list["Session"]:
        """``n`` copies of this session, each a new ``Session`` (destroy them yourself, or use them
        as context managers). ``mode="disk"``: files copied, apps restarted; ``mode="memory"``: the
        running session checkpointed and restored into each copy (processes, windows, memory), or
        ``Conflict`` with code ``memory_fork_refused`` where CRIU can't dump it (docs/pools.md)."""
        r = self._req("POST", "/fork", json={"count": n, "mode": mode}).json()
        return [Session(self._c, info) for info in r["copies"]]

    def destroy(self) -> None:
        try:
            self._c.request("DELETE", f"/v1/sessions/{self.id}")
        except DrumsError as e:
            if e.code not in ("session_not_found", "session_expired"):
                raise

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.destroy()


def _check_stream(r: httpx.Response) -> None:
    if r.status_code >= 400:
        r.read()
        _check(r)


def _parse_event(lines: list[str]) -> tuple[str, dict[str, Any]] | None:
    event, data = "message", []
    for line in lines:
        if line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip())
    if not data:
        return None
    return event, json.loads("\n".join(data))


class _SseLines:
    """Server-sent events, one line at a time (shared by the sync and async loops)."""

    def __init__(self) -> None:
        self.buf: list[str] = []

    def feed(self, line: str) -> tuple[str, dict[str, Any]] | None:
        if line == "":
            ev, self.buf = _parse_event(self.buf), []
            return ev
        if not line.startswith(":"):
            self.buf.append(line)
        return None


def _sse(lines: Iterator[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    sse = _SseLines()
    for line in lines:
        ev = sse.feed(line)
        if ev:
            yield ev
            if ev[0] == "end":
                return


# ----------------------------------------------------------------------------- async


class AsyncClient:
    """Asynchronous client with the same shape: ``await client.sessions.create(...)``."""

    def __init__(
        self, url: str | None = None, token: str | None = None, *, timeout: httpx.Timeout | float = DEFAULT_TIMEOUT
    ):
        self.url, self._token = _discover(url, token)
        self._http = httpx.AsyncClient(
            base_url=self.url, headers={"authorization": f"Bearer {self._token}"}, timeout=timeout
        )
        self.sessions = AsyncSessions(self)
        self.pools = AsyncPools(self)
        self.episodes = AsyncEpisodes(self)

    async def request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        try:
            return _check(await self._http.request(method, path, **kw))
        except httpx.TransportError as e:
            raise DrumsError(f"cannot reach the daemon at {self.url}: {e}", code="transport_error") from e

    async def health(self) -> bool:
        return (await self.request("GET", "/healthz")).json().get("ok") is True

    async def openapi(self) -> dict[str, Any]:
        return (await self.request("GET", "/openapi.json")).json()

    async def host(self) -> m.HostReport:
        """``GET /v1/host``: sessions held and max, capacity, resources, images, host and instance ids."""
        return (await self.request("GET", "/v1/host")).json()

    async def drain(self) -> m.HostReport:
        """``POST /v1/host/drain``: new creates get 503 ``host_draining``; held sessions go on."""
        return (await self.request("POST", "/v1/host/drain")).json()

    async def undrain(self) -> m.HostReport:
        """``DELETE /v1/host/drain``: take new sessions again."""
        return (await self.request("DELETE", "/v1/host/drain")).json()

    async def join_client_cgroup(self, pid: int | None = None) -> m.ClientCgroupResult:
        """``POST /v1/host/client-cgroup``: as :meth:`Client.join_client_cgroup`."""
        return (
            await self.request("POST", "/v1/host/client-cgroup", json={"pid": os.getpid() if pid is None else pid})
        ).json()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


class AsyncSessions:
    def __init__(self, client: AsyncClient):
        self._c = client

    async def create(self, *, idempotency_key: str | None = None, **spec: Any) -> "AsyncSession":
        """As ``Sessions.create``: creates a session and waits until it is ready."""
        headers = {"idempotency-key": idempotency_key or uuid.uuid4().hex}
        return AsyncSession(
            self._c, (await self._c.request("POST", "/v1/sessions", json=_spec(spec), headers=headers)).json()
        )

    async def list(self) -> list["AsyncSession"]:
        return [AsyncSession(self._c, s) for s in (await self._c.request("GET", "/v1/sessions")).json()["sessions"]]

    async def get(self, session_id: str) -> "AsyncSession":
        return AsyncSession(self._c, (await self._c.request("GET", f"/v1/sessions/{session_id}")).json())


class AsyncPools:
    """``await client.pools.claim("web")``; the same shape as ``Pools``."""

    def __init__(self, client: AsyncClient):
        self._c = client

    async def list(self) -> list[m.Pool]:
        return (await self._c.request("GET", "/v1/pools")).json()["pools"]

    async def get(self, name: str) -> m.Pool:
        return (await self._c.request("GET", f"/v1/pools/{name}")).json()

    async def put(self, name: str, *, size: int, **template: Any) -> m.Pool:
        return (
            await self._c.request("PUT", f"/v1/pools/{name}", json={"size": size, "template": _spec(template)})
        ).json()

    async def delete(self, name: str) -> None:
        await self._c.request("DELETE", f"/v1/pools/{name}")

    async def claim(
        self,
        name: str,
        *,
        on_empty: str = "create",
        labels: dict[str, str] | None = None,
        ttl_seconds: int | None = None,
    ) -> "AsyncSession":
        r = await self._c.request(
            "POST",
            "/v1/sessions",
            json=_claim(name, on_empty, labels, ttl_seconds),
            headers={"idempotency-key": uuid.uuid4().hex},
        )
        s = AsyncSession(self._c, r.json())
        s.pool_hit = r.headers.get("x-drums-pool", "").endswith("; hit")
        return s


class AsyncFiles:
    """Files inside a session, as ``Files``."""

    def __init__(self, s: "AsyncSession"):
        self._s = s

    async def read(self, path: str, *, root: bool = False) -> bytes:
        return (await self._s._req("GET", "/files", params=_files_q(path, root))).content

    async def write(
        self, path: str, data: bytes | str, *, mode: str | None = None, root: bool = False
    ) -> m.FileWritten:
        body = data.encode() if isinstance(data, str) else data
        return (
            await self._s._req(
                "PUT",
                "/files",
                params=_files_q(path, root, mode=mode),
                content=body,
                headers={"content-type": "application/octet-stream"},
            )
        ).json()

    async def delete(self, path: str, *, recursive: bool = False, root: bool = False) -> None:
        await self._s._req("DELETE", "/files", params=_files_q(path, root, recursive="true" if recursive else None))

    async def list(self, path: str, *, root: bool = False) -> m.FileList:
        return (await self._s._req("GET", "/files/list", params=_files_q(path, root))).json()

    async def stat(self, path: str, *, root: bool = False) -> m.FileStatResult:
        return (await self._s._req("GET", "/files/stat", params=_files_q(path, root))).json()


class AsyncSession(_SessionBase):
    """``async with await client.sessions.create() as s: ...`` destroys it on exit."""

    def __init__(self, client: AsyncClient, info: m.Session):
        super().__init__(info)
        self._c = client
        self.files = AsyncFiles(self)

    async def _req(self, method: str, sub: str, **kw: Any) -> httpx.Response:
        headers = {**self._h(), **kw.pop("headers", {})}
        return await self._c.request(method, f"/v1/sessions/{self.id}{sub}", headers=headers, **kw)

    async def refresh(self) -> "AsyncSession":
        self._set((await self._c.request("GET", f"/v1/sessions/{self.id}")).json())
        return self

    async def screenshot(self, format: str = "png", **query: Any) -> bytes:
        """The screen as png, jpeg, webp or raw (packed RGB). Extra query: quality, scale, region, cursor."""
        return (await self._req("GET", "/screenshot", params=_shot_params(format, query))).content

    async def screenshot_array(self, cursor: bool = True):
        """The screen as a numpy uint8 array of shape (height, width, 3)."""
        return _raw_array(await self._req("GET", "/screenshot", params=_shot_params("raw", {"cursor": cursor})))

    async def act(
        self,
        actions: m.Action | dict[str, Any] | Sequence[m.Action | dict[str, Any]],
        *,
        screenshot: m.ScreenshotOptions | bool | None = None,
        scale: m.Size | None = None,
    ) -> m.ActionsResponse:
        """Runs one canonical action or a batch; optionally returns a screenshot taken after it."""
        body: m.ActionsRequest = {"actions": _actions(actions), "generation": self.generation}
        if screenshot is not None:
            body["screenshot"] = screenshot
        if scale is not None:
            body["scale"] = scale
        return (await self._req("POST", "/actions", json=body)).json()

    async def act_image(
        self,
        actions: m.Action | dict[str, Any] | Sequence[m.Action | dict[str, Any]],
        *,
        screenshot: m.ScreenshotOptions | bool = True,
        scale: m.Size | None = None,
    ) -> tuple[m.ActionsResponse, bytes | None]:
        """Like act, with the screenshot as bytes: returns (response, image). See Session.act_image."""
        body: m.ActionsRequest = {"actions": _actions(actions), "generation": self.generation, "screenshot": screenshot}
        if scale is not None:
            body["scale"] = scale
        return _image_response(await self._req("POST", "/actions", json=body, headers={"accept": _accept(screenshot)}))

    async def exec(self, cmd: str | Sequence[str], **kw: Any) -> m.ExecResult:
        return (await self._req("POST", "/exec", json=_exec_body(cmd, kw))).json()

    async def a11y(self, format: str = "xml") -> str | m.A11yTree:
        """The accessibility tree: OSWorld-style XML text, or the JSON tree."""
        r = await self._req("GET", "/a11y", params={"format": format})
        return r.text if format == "xml" else r.json()

    async def windows(self) -> m.WindowsView:
        """The session's windows and the pointer: {windows, cursor, ...}."""
        return (await self._req("GET", "/windows")).json()

    async def reset(self) -> "AsyncSession":
        body: m.ResetRequest = {"generation": self.generation}
        self._set((await self._req("POST", "/reset", json=body)).json())
        return self

    async def events(self, fps: float = 0) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """Server-sent events: ("state", session), ("frame", {...}), ("end", {reason})."""
        async with self._c._http.stream(
            "GET", f"/v1/sessions/{self.id}/events", params={"fps": fps}, timeout=httpx.Timeout(10.0, read=None)
        ) as r:
            if r.status_code >= 400:
                await r.aread()
                _check(r)
            sse = _SseLines()
            async for line in r.aiter_lines():
                ev = sse.feed(line)
                if ev:
                    yield ev
                    if ev[0] == "end":
                        return

    async def release(self, mode: str = "reset") -> m.ReleaseResult:
        return (await self._req("POST", "/release", json={"mode": mode})).json()

    async def take_over(self, holder: str | None = None) -> dict[str, Any]:
        return (await self._req("POST", "/takeover", json={} if holder is None else {"holder": holder})).json()

    async def release_takeover(self, takeover_id: str | None = None) -> None:
        await self._req("DELETE", "/takeover", params={} if takeover_id is None else {"takeover": takeover_id})

    async def fork(self, n: int = 1, *, mode: str = "disk") -> list["AsyncSession"]:
        """As ``Session.fork``: ``mode`` is ``"disk"`` or ``"memory"``."""
        r = (await self._req("POST", "/fork", json={"count": n, "mode": mode})).json()
        return [AsyncSession(self._c, info) for info in r["copies"]]

    async def destroy(self) -> None:
        try:
            await self._c.request("DELETE", f"/v1/sessions/{self.id}")
        except DrumsError as e:
            if e.code not in ("session_not_found", "session_expired"):
                raise

    async def __aenter__(self) -> "AsyncSession":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.destroy()
