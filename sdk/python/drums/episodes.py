"""Recorded episodes (docs/episodes.md): ``client.episodes`` and its async twin.

A session created with ``record={...}`` has one episode per generation. ``export`` writes OSWorld's result layout
(``traj.jsonl``, ``step_N_TS.png``, ``initial_state.png``, ``result.txt`` when a reward is known) and the dataset
(``steps.jsonl``, ``trees/``), the same files as ``drums episodes export``.
"""

from __future__ import annotations

import datetime
import json
import os
from typing import TYPE_CHECKING, Any

from . import _models as m

if TYPE_CHECKING:
    from .client import AsyncClient, Client


def _path(session_id: str, generation: int | None = None, sub: str = "") -> str:
    base = f"/v1/sessions/{session_id}/episodes"
    return base if generation is None else f"{base}/{int(generation)}{sub}"


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


class Episodes:
    """``client.episodes``: a session's recorded episodes, also after the session was destroyed."""

    def __init__(self, client: Client):
        self._c = client

    def list(self, session_id: str) -> list[m.EpisodeSummary]:
        return self._c.request("GET", _path(session_id)).json()["episodes"]

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
        """Writes the episode's OSWorld result layout and dataset into ``out_dir``; returns where its events end."""
        ep = self.get(session_id, generation, steps=True, limit=1)
        texts, fetch = _plan(ep)
        cache = {v: self.file(session_id, generation, v) for v in set(fetch.values())}
        _write(out_dir, texts, {k: cache[v] for k, v in fetch.items()})
        return ep["end"]


class AsyncEpisodes:
    """The async twin of :class:`Episodes`."""

    def __init__(self, client: AsyncClient):
        self._c = client

    async def list(self, session_id: str) -> list[m.EpisodeSummary]:
        return (await self._c.request("GET", _path(session_id))).json()["episodes"]

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
        ep = await self.get(session_id, generation, steps=True, limit=1)
        texts, fetch = _plan(ep)
        cache: dict[str, bytes] = {}
        for v in set(fetch.values()):
            cache[v] = await self.file(session_id, generation, v)
        _write(out_dir, texts, {k: cache[v] for k, v in fetch.items()})
        return ep["end"]
