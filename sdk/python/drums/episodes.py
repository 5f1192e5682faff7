"""Recorded episodes (docs/episodes.md): ``client.episodes`` and its async twin.

A session created with ``record={...}`` has one episode per generation. ``export`` writes OSWorld's result layout
(``traj.jsonl``, ``step_N_TS.png``, ``initial_state.png``, ``recording.mp4`` when frames were kept and ffmpeg is
installed, ``result.txt`` when a reward is known) and the dataset (``steps.jsonl``, ``trees/``), the same files as
``drums episodes export``. The export is written once, as a generator that asks for what it needs (``_export``);
the sync and async classes only answer its requests.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import subprocess
import tempfile
from typing import TYPE_CHECKING, Any, Generator

from . import _models as m

if TYPE_CHECKING:
    from .client import AsyncClient, Client


def _path(session_id: str, generation: int | None = None, sub: str = "") -> str:
    base = f"/v1/sessions/{session_id}/episodes"
    return base if generation is None else f"{base}/{int(generation)}{sub}"


def _all_params(outcome: str | None, limit: int | None) -> dict[str, Any]:
    return {k: v for k, v in (("outcome", outcome), ("limit", limit)) if v is not None}


def _outcome(reward: float | None, outcome: str | None, details: dict[str, Any] | None) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if reward is not None:
        body["reward"] = reward
    if outcome is not None:
        body["outcome"] = outcome
    if details is not None:
        body["details"] = details
    return body


def _timestamp(ms: float) -> str:
    """OSWorld's action timestamp (``%Y%m%d@%H%M%S%f``), in UTC."""
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).strftime("%Y%m%d@%H%M%S%f")


def _traj_action(step: dict[str, Any]) -> Any:
    if step["source"] == "api":
        return step["agentAction"]
    a = step["agentAction"] or {}
    for k in ("command", "code", "script"):
        if k in a:
            return a[k]
    return a


def _plan(ep: dict[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """What an export writes: {file: text} and {file: episode file name to fetch}."""
    session, generation = ep["episode"]["session"], ep["episode"]["generation"]
    outcome = ep["episode"].get("outcome") or {}
    reward = outcome.get("reward")
    steps = ep.get("steps") or []
    texts: dict[str, str] = {}
    fetch: dict[str, str] = {}
    if ep.get("initialFrame"):
        fetch["initial_state." + ep["initialFrame"].rsplit(".", 1)[1]] = ep["initialFrame"]
    traj, dataset = [], []
    for s in steps:
        ts = _timestamp(s["at"])
        image = f"step_{s['step']}_{ts}.{s['frame'].rsplit('.', 1)[1]}" if s.get("frame") else None
        if image:
            fetch[image] = s["frame"]
        tree = f"trees/step_{s['step']}.{s['tree'].rsplit('.', 1)[1]}" if s.get("tree") else None
        if tree:
            fetch[tree] = s["tree"]
        done = s["step"] == len(steps) and ep["episode"]["closedAt"] is not None
        traj.append(
            {
                "step_num": s["step"],
                "action_timestamp": ts,
                "action": _traj_action(s),
                "response": None,
                "reward": 0,
                "done": done,
                "info": {},
                "screenshot_file": image,
            }
        )
        dataset.append(
            {
                "episode": f"{session}/{generation}",
                "session": session,
                "generation": generation,
                "step": s["step"],
                "at": s["at"],
                "source": s["source"],
                "image": image,
                "action": s["action"],
                "agent_action": s["agentAction"],
                "results": s.get("results"),
                "tree": tree,
                "reward": reward,
                "outcome": outcome.get("outcome"),
            }
        )
    texts["traj.jsonl"] = "".join(json.dumps(t) + "\n" for t in traj)
    texts["steps.jsonl"] = "".join(json.dumps(t) + "\n" for t in dataset)
    if reward is not None:
        texts["result.txt"] = f"{float(reward)}\n"
    texts["episode.json"] = json.dumps({"episode": ep["episode"], "end": ep["end"]}, indent=2) + "\n"
    return texts, fetch


def _write(out_dir: str, texts: dict[str, str], blobs: dict[str, bytes]) -> None:
    for name, text in texts.items():
        p = os.path.join(out_dir, name)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w", encoding="utf-8") as f:
            f.write(text)
    for name, data in blobs.items():
        p = os.path.join(out_dir, name)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(data)


#: The longest one frame is shown in recording.mp4 (an idle screen is not minutes of the same picture).
_MAX_FRAME_S = 5.0


def _ffconcat(timeline: list[dict[str, Any]], names: dict[str, str]) -> str:
    """ffmpeg's concat list: each kept image shown until the next one (the episode's own time, capped)."""
    lines = ["ffconcat version 1.0"]
    for i, f in enumerate(timeline):
        nxt = timeline[i + 1] if i + 1 < len(timeline) else None
        dur = min(_MAX_FRAME_S, max(0.001, (nxt["at"] - f["at"]) / 1000)) if nxt else 1.0
        lines += [f"file {names[f['file']]}", f"duration {dur:.3f}"]
    lines.append(f"file {names[timeline[-1]['file']]}")  # the last duration counts only with the file named again
    return "\n".join(lines) + "\n"


def _encode(timeline: list[dict[str, Any]], blobs: dict[str, bytes], out: str) -> bool:
    """recording.mp4 from the kept images by ffmpeg (H.264), as ``drums episodes export``; False without ffmpeg."""
    ffmpeg = shutil.which("ffmpeg")
    if not timeline or not ffmpeg:
        return False
    with tempfile.TemporaryDirectory(prefix="drums-mp4-") as work:
        names: dict[str, str] = {}
        for f in timeline:
            if f["file"] not in names:
                names[f["file"]] = f"f{len(names)}.{f['file'].rsplit('.', 1)[1]}"
                with open(os.path.join(work, names[f["file"]]), "wb") as fh:
                    fh.write(blobs[f["file"]])
        with open(os.path.join(work, "list.ffconcat"), "w") as fh:
            fh.write(_ffconcat(timeline, names))
        first = next((f for f in timeline if f.get("width") and f.get("height")), None)
        if first:
            w, h = max(2, first["width"] // 2 * 2), max(2, first["height"] // 2 * 2)
            vf = f"scale={w}:{h}:force_original_aspect_ratio=decrease,pad={w}:{h}:(ow-iw)/2:(oh-ih)/2"
        else:
            vf = "scale=trunc(iw/2)*2:trunc(ih/2)*2"
        subprocess.run(
            [ffmpeg, "-hide_banner", "-loglevel", "error", "-y", "-f", "concat", "-i", os.path.join(work, "list.ffconcat"),
             "-vf", vf + ",format=yuv420p", "-fps_mode", "vfr", "-c:v", "libx264", "-preset", "veryfast", "-crf", "28",
             "-movflags", "+faststart", out],
            check=True, capture_output=True, timeout=600,
        )  # fmt: skip
    return True


#: What the export generator asks its driver for: ("get", params) -> the episode; ("file", name) -> its bytes;
#: ("run", fn, args) -> fn(*args) (the sync driver calls it, the async one in a thread: file writes, ffmpeg).
_Request = tuple


def _export(out_dir: str) -> Generator[_Request, Any, m.EpisodeEnd]:
    ep = yield ("get", {"steps": True, "limit": 1})
    texts, fetch = _plan(ep)
    timeline = ep.get("timeline") or []
    blobs: dict[str, bytes] = {}
    for name in sorted(set(fetch.values()) | {f["file"] for f in timeline}):
        blobs[name] = yield ("file", name)
    yield ("run", _write, (out_dir, texts, {k: blobs[v] for k, v in fetch.items()}))
    yield ("run", _encode, (timeline, blobs, os.path.join(out_dir, "recording.mp4")))
    return ep["end"]


class Episodes:
    """``client.episodes``: a session's recorded episodes, also after the session was destroyed."""

    def __init__(self, client: Client):
        self._c = client

    def list(self, session_id: str) -> list[m.EpisodeSummary]:
        return self._c.request("GET", _path(session_id)).json()["episodes"]

    def list_all(self, outcome: str | None = None, limit: int | None = None) -> list[m.EpisodeSummary]:
        """Every episode of the daemon, newest first; ``outcome``: failure, success, unscored, or a word."""
        return self._c.request("GET", "/v1/episodes", params=_all_params(outcome, limit)).json()["episodes"]

    def delete(self, session_id: str, generation: int) -> None:
        """Deletes a closed episode (409 ``episode_open`` while it records)."""
        self._c.request("DELETE", _path(session_id, generation))

    def get(
        self, session_id: str, generation: int, *, steps: bool = False, start: int = 0, limit: int | None = None
    ) -> m.Episode:
        params: dict[str, Any] = {"from": start}
        if steps:
            params["steps"] = "1"
        if limit is not None:
            params["limit"] = limit
        return self._c.request("GET", _path(session_id, generation), params=params).json()

    def file(self, session_id: str, generation: int, name: str) -> bytes:
        return self._c.request("GET", _path(session_id, generation, f"/files/{name}")).content

    def set_outcome(
        self,
        session_id: str,
        generation: int,
        *,
        reward: float | None = None,
        outcome: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> m.EpisodeSummary:
        body = _outcome(reward, outcome, details)
        return self._c.request("POST", _path(session_id, generation, "/outcome"), json=body).json()

    def export(self, session_id: str, generation: int, out_dir: str) -> m.EpisodeEnd:
        """Writes the episode's OSWorld result layout (with recording.mp4) and dataset into ``out_dir``; returns
        where its events end (``closed``, ``lines``, ``partialBytes``: a half-written episode ends there)."""
        gen = _export(out_dir)
        req = next(gen)
        while True:
            if req[0] == "get":
                got: Any = self.get(session_id, generation, **req[1])
            elif req[0] == "file":
                got = self.file(session_id, generation, req[1])
            else:
                got = req[1](*req[2])
            try:
                req = gen.send(got)
            except StopIteration as done:
                return done.value


class AsyncEpisodes:
    """The async twin of :class:`Episodes`."""

    def __init__(self, client: AsyncClient):
        self._c = client

    async def list(self, session_id: str) -> list[m.EpisodeSummary]:
        return (await self._c.request("GET", _path(session_id))).json()["episodes"]

    async def list_all(self, outcome: str | None = None, limit: int | None = None) -> list[m.EpisodeSummary]:
        return (await self._c.request("GET", "/v1/episodes", params=_all_params(outcome, limit))).json()["episodes"]

    async def delete(self, session_id: str, generation: int) -> None:
        await self._c.request("DELETE", _path(session_id, generation))

    async def get(
        self, session_id: str, generation: int, *, steps: bool = False, start: int = 0, limit: int | None = None
    ) -> m.Episode:
        params: dict[str, Any] = {"from": start}
        if steps:
            params["steps"] = "1"
        if limit is not None:
            params["limit"] = limit
        return (await self._c.request("GET", _path(session_id, generation), params=params)).json()

    async def file(self, session_id: str, generation: int, name: str) -> bytes:
        return (await self._c.request("GET", _path(session_id, generation, f"/files/{name}"))).content

    async def set_outcome(
        self,
        session_id: str,
        generation: int,
        *,
        reward: float | None = None,
        outcome: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> m.EpisodeSummary:
        body = _outcome(reward, outcome, details)
        return (await self._c.request("POST", _path(session_id, generation, "/outcome"), json=body)).json()

    async def export(self, session_id: str, generation: int, out_dir: str) -> m.EpisodeEnd:
        """As :meth:`Episodes.export`; files and ffmpeg run in a worker thread, off the event loop."""
        import asyncio

        gen = _export(out_dir)
        req = next(gen)
        while True:
            if req[0] == "get":
                got: Any = await self.get(session_id, generation, **req[1])
            elif req[0] == "file":
                got = await self.file(session_id, generation, req[1])
            else:
                got = await asyncio.to_thread(req[1], *req[2])
            try:
                req = gen.send(got)
            except StopIteration as done:
                return done.value
