"""``drums.gym.DesktopEnv``: a gymnasium environment over one Drums session.

Observation (a ``spaces.Dict``):
  ``screenshot``: the screen, ``uint8`` array of shape (height, width, 3) (pointer not drawn);
  ``a11y`` (only with ``a11y=True``): the accessibility tree as OSWorld-style XML text,
  characters outside printable ASCII replaced by ``?`` and cut at ``a11y_max_length``.

Action: one canonical Drums action (the same JSON object ``POST /v1/sessions/{id}/actions``
takes, e.g. ``{"type": "click", "x": 10, "y": 20, "button": "left", "count": 1}``), or a list
of them. The action space is a ``spaces.Text`` of JSON, so an agent may pass either the dict
or its JSON string. An action the API rejects is a no-op step with ``info["error"]`` set (the
error code); a ``{"type": "done"}`` action ends the episode (``terminated``).

``reset()`` opens a new attempt: the first call creates the session, later calls reset it
(fresh upper layer and processes, generation + 1). ``close()`` destroys it. Reward is always
0.0: tasks and their checkers live outside the environment (e.g. the OSWorld adapter).
"""

from __future__ import annotations

import json
import string
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from ..client import Client, Session
from ..errors import DrumsError

CHARSET = string.printable
_ALLOWED = frozenset(CHARSET)


def _printable(text: str, limit: int) -> str:
    return "".join(ch if ch in _ALLOWED else "?" for ch in text[:limit])


class DesktopEnv(gym.Env):
    metadata = {"render_modes": ["rgb_array"]}

    def __init__(
        self,
        client: Client | None = None,
        *,
        url: str | None = None,
        token: str | None = None,
        image: str = "default",
        screen: tuple[int, int] = (1280, 800),
        spec: dict[str, Any] | None = None,
        a11y: bool = False,
        a11y_max_length: int = 1_000_000,
        max_steps: int | None = None,
        render_mode: str | None = None,
    ):
        super().__init__()
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}")
        self.render_mode = render_mode
        self._own_client = client is None
        self.client = client or Client(url, token)
        self._spec = {"image": image, "screen": f"{screen[0]}x{screen[1]}", **(spec or {})}
        self._a11y = a11y
        self._a11y_max = a11y_max_length
        self._max_steps = max_steps
        width, height = screen
        obs: dict[str, spaces.Space] = {"screenshot": spaces.Box(0, 255, shape=(height, width, 3), dtype=np.uint8)}
        if a11y:
            obs["a11y"] = spaces.Text(max_length=a11y_max_length, min_length=0, charset=CHARSET)
        self.observation_space = spaces.Dict(obs)
        self.action_space = spaces.Text(max_length=10_000, min_length=0, charset=CHARSET)
        self.session: Session | None = None
        self._steps = 0
        self._last: np.ndarray | None = None

    # -- helpers

    def _observe(self) -> dict[str, Any]:
        assert self.session is not None
        shot = self.session.screenshot_array(cursor=False)
        self._last = shot
        obs: dict[str, Any] = {"screenshot": shot}
        if self._a11y:
            try:
                text = self.session.a11y("xml")
            except DrumsError:
                text = ""
            obs["a11y"] = _printable(str(text), self._a11y_max)
        return obs

    @staticmethod
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

    # -- gymnasium API

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        if self.session is None:
            self.session = self.client.sessions.create(**self._spec)
        else:
            self.session.reset()
        self._steps = 0
        return self._observe(), {"session": self.session.id, "generation": self.session.generation}

    def step(self, action: Any):
        if self.session is None:
            raise RuntimeError("call reset() before step()")
        self._steps += 1
        actions = self._parse(action)
        info: dict[str, Any] = {"error": None}
        terminated = False
        if actions is None:
            info["error"] = "invalid_action"
        else:
            try:
                self.session.act(actions)
                terminated = any(a.get("type") == "done" for a in actions)
            except DrumsError as e:
                if e.status >= 500 or e.code in (
                    "stale_generation",
                    "session_not_found",
                    "session_expired",
                    "unauthorized",
                ):
                    raise
                info["error"] = e.code
        truncated = self._max_steps is not None and self._steps >= self._max_steps and not terminated
        return self._observe(), 0.0, terminated, truncated, info

    def render(self):
        if self.render_mode == "rgb_array":
            return self._last
        return None

    def close(self):
        if self.session is not None:
            self.session.destroy()
            self.session = None
        if self._own_client:
            self.client.close()
        super().close()
