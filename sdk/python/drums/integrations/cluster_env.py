"""``drums.cluster_env.ClusterVectorEnv``: a gymnasium vector env whose sub-envs are
Drums sessions spread over a cluster, driven by the async cluster client.

Each sub-env is one session placed by :class:`drums.cluster.AsyncClusterClient`;
``step`` runs every sub-env's action and screenshot concurrently on one event
loop (in a background thread, so the vector env itself is synchronous like any
gymnasium env). Observation: ``{"screenshot": uint8 (num_envs, H, W, 3)}``;
action: per sub-env one canonical action dict, a list of them, or its JSON.

A sub-env whose host dies or restarts ends its episode with ``truncated`` and
``infos["error"] == "session_lost"`` (zeros as its last observation); with
gymnasium's next-step autoreset, its next ``step`` places a new session on a
live host and returns that one's first observation. ``infos["host"]`` names
each sub-env's host.
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any, Callable, Sequence

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv

from .cluster import AsyncClusterClient, ClusterSession, SessionLost
from ..errors import DrumsError
from .gym import CHARSET


class ClusterVectorEnv(VectorEnv):
    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(
        self,
        cluster: AsyncClusterClient | Callable[[], AsyncClusterClient],
        num_envs: int,
        *,
        image: str = "minimal",
        screen: tuple[int, int] = (320, 240),
        spec: dict[str, Any] | None = None,
        max_steps: int | None = None,
    ):
        self.num_envs = num_envs
        self._spec = {"image": image, "screen": f"{screen[0]}x{screen[1]}", **(spec or {})}
        self._w, self._h = screen
        self._max_steps = max_steps
        self.single_observation_space = spaces.Dict({"screenshot": spaces.Box(0, 255, (self._h, self._w, 3), np.uint8)})
        self.single_action_space = spaces.Text(max_length=10_000, min_length=0, charset=CHARSET)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="drums-cluster-env", daemon=True)
        self._thread.start()
        self.cluster: AsyncClusterClient = self._run(self._open(cluster))
        self.sessions: list[ClusterSession | None] = [None] * num_envs
        self._steps = [0] * num_envs
        self._needs_reset = [False] * num_envs
        #: How many sub-env episodes ended because their session was lost.
        self.lost_episodes = 0

    async def _open(self, cluster: Any) -> AsyncClusterClient:
        c = cluster() if callable(cluster) else cluster
        return await c.start()

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    # -- one sub-env

    async def _observe(self, s: ClusterSession) -> np.ndarray:
        raw = await s.screenshot("raw", cursor=False)
        return np.frombuffer(raw, dtype=np.uint8).reshape(self._h, self._w, 3)

    async def _reset_one(self, i: int) -> tuple[np.ndarray, dict[str, Any]]:
        s = self.sessions[i]
        if s is not None:
            try:
                await s.reset()
            except SessionLost:
                s = None
        if s is None:
            s = await self.cluster.create(**self._spec)
            self.sessions[i] = s
        self._steps[i] = 0
        self._needs_reset[i] = False
        return await self._observe(s), {"session": s.id, "host": s.host.name, "error": None}

    async def _step_one(self, i: int, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self._needs_reset[i] or self.sessions[i] is None:
            obs, info = await self._reset_one(i)
            return obs, 0.0, False, False, info
        s = self.sessions[i]
        assert s is not None
        self._steps[i] += 1
        info: dict[str, Any] = {"session": s.id, "host": s.host.name, "error": None}
        acts = _parse(action)
        terminated = False
        try:
            if acts is None:
                info["error"] = "invalid_action"
            else:
                try:
                    await s.act(acts)
                    terminated = any(a.get("type") == "done" for a in acts)
                except DrumsError as e:
                    if isinstance(e, SessionLost) or e.status >= 500 or e.status == 0:
                        raise
                    info["error"] = e.code
            obs = await self._observe(s)
        except SessionLost:
            self.sessions[i] = None
            self._needs_reset[i] = True
            self.lost_episodes += 1
            info["error"] = "session_lost"
            return np.zeros((self._h, self._w, 3), np.uint8), 0.0, False, True, info
        truncated = self._max_steps is not None and self._steps[i] >= self._max_steps and not terminated
        self._needs_reset[i] = terminated or truncated
        return obs, 0.0, terminated, truncated, info

    # -- gymnasium VectorEnv API

    def reset(self, *, seed: int | Sequence[int] | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        results = self._run(_gather(*(self._reset_one(i) for i in range(self.num_envs))))
        return {"screenshot": np.stack([r[0] for r in results])}, _batch_infos([r[1] for r in results])

    def step(self, actions: Sequence[Any]):
        if len(actions) != self.num_envs:
            raise ValueError(f"expected {self.num_envs} actions, got {len(actions)}")
        results = self._run(_gather(*(self._step_one(i, a) for i, a in enumerate(actions))))
        obs = {"screenshot": np.stack([r[0] for r in results])}
        return (
            obs,
            np.array([r[1] for r in results], np.float64),
            np.array([r[2] for r in results]),
            np.array([r[3] for r in results]),
            _batch_infos([r[4] for r in results]),
        )

    def close_extras(self, **kwargs: Any) -> None:
        async def _close() -> None:
            await asyncio.gather(*(s.destroy() for s in self.sessions if s is not None), return_exceptions=True)
            await self.cluster.aclose()

        try:
            self._run(_close())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
            self.sessions = [None] * self.num_envs


async def _gather(*aws: Any) -> list[Any]:
    return list(await asyncio.gather(*aws))


def _parse(action: Any) -> list[dict[str, Any]] | None:
    if isinstance(action, (bytes, str)):
        try:
            action = json.loads(action)
        except ValueError:
            return None
    if isinstance(action, dict):
        return [action]
    if isinstance(action, list) and action and all(isinstance(a, dict) for a in action):
        return action
    return None


def _batch_infos(infos: list[dict[str, Any]]) -> dict[str, Any]:
    keys = {k for i in infos for k in i}
    return {k: np.array([i.get(k) for i in infos], dtype=object) for k in keys}
