"""``drums.gym_group.GroupVectorEnv``: a gymnasium vector env over a GRPO group of forked copies.

    with client.sessions.create(image="default", url=...) as src:
        ...                                   # bring src to the task's starting state (setup)
        env = GroupVectorEnv(client, src, n=8)
        obs, info = env.reset()               # 8 disk-forked copies of src (src keeps running)
        obs, rew, term, trunc, info = env.step([action_0, ..., action_7])
        env.close()                           # destroys the copies, not src

Every ``reset()`` forks a fresh group from the source (``POST /v1/sessions/{id}/fork``) and
destroys the previous one, so all N rollouts start from the same state. The single-env spaces
and per-step semantics are ``drums.gym.DesktopEnv``'s (observation ``screenshot`` [+ ``a11y``],
action = a canonical action dict, a list of them, or its JSON; reward 0.0). No autoreset: a copy
that terminated stays as it is until the next ``reset()`` (``autoreset_mode`` DISABLED).
``info["sessions"]`` names the copies, ``info["source"]`` the source.
"""

from __future__ import annotations

import concurrent.futures
from typing import Any, Sequence

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array

from ..client import Client, Session
from .gym import DesktopEnv


class GroupVectorEnv(VectorEnv):
    metadata = {"autoreset_mode": AutoresetMode.DISABLED}

    def __init__(
        self,
        client: Client,
        source: Session,
        n: int,
        *,
        a11y: bool = False,
        max_steps: int | None = None,
        mode: str = "disk",
    ):
        if n < 1:
            raise ValueError("n must be at least 1")
        self.client = client
        self.source = source
        self.num_envs = n
        self._mode = mode
        w, h = source.screen
        self.envs = [
            DesktopEnv(client, image=source.info["image"], screen=(w, h), a11y=a11y, max_steps=max_steps)
            for _ in range(n)
        ]
        self.single_observation_space = self.envs[0].observation_space
        self.single_action_space = self.envs[0].action_space
        self.observation_space = batch_space(self.single_observation_space, n)
        self.action_space = batch_space(self.single_action_space, n)
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=n)

    def _batch(self, observations: list[dict[str, Any]]):
        out = create_empty_array(self.single_observation_space, n=self.num_envs, fn=np.zeros)
        return concatenate(self.single_observation_space, observations, out)

    def _drop_copies(self) -> None:
        for e in self.envs:
            if e.session is not None:
                e.session.destroy()
                e.session = None

    def reset(self, *, seed: int | Sequence[int] | None = None, options: dict[str, Any] | None = None):
        self._drop_copies()
        copies = self.source.fork(self.num_envs, mode=self._mode)
        for e, c in zip(self.envs, copies, strict=True):
            e.session = c
            e._steps = 0
        obs = list(self._pool.map(lambda e: e._observe(), self.envs))
        return self._batch(obs), {"source": self.source.id, "sessions": [c.id for c in copies], "fork_mode": self._mode}

    def step(self, actions: Sequence[Any]):
        if len(actions) != self.num_envs:
            raise ValueError(f"expected {self.num_envs} actions, got {len(actions)}")
        results = list(self._pool.map(lambda ea: ea[0].step(ea[1]), zip(self.envs, actions, strict=True)))
        obs = self._batch([r[0] for r in results])
        rewards = np.array([r[1] for r in results], dtype=np.float64)
        terminated = np.array([r[2] for r in results], dtype=np.bool_)
        truncated = np.array([r[3] for r in results], dtype=np.bool_)
        return obs, rewards, terminated, truncated, {"error": [r[4]["error"] for r in results]}

    def close(self, **kwargs: Any) -> None:
        self._drop_copies()
        self._pool.shutdown(wait=True)
