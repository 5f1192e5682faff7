import json

import numpy as np
from gymnasium.utils.env_checker import check_env

from drums import Client
from drums.gym import DesktopEnv


def test_desktop_env_passes_check_env(daemon):
    env = DesktopEnv(Client(daemon.url, daemon.token), image="minimal", screen=(640, 480), a11y=True)
    try:
        check_env(env, skip_render_check=True)
    finally:
        env.close()


def test_desktop_env_episode(daemon):
    env = DesktopEnv(
        url=daemon.url, token=daemon.token, image="minimal", screen=(640, 480), max_steps=3, render_mode="rgb_array"
    )
    try:
        obs, info = env.reset(seed=0)
        assert obs["screenshot"].shape == (480, 640, 3) and obs["screenshot"].dtype == np.uint8
        assert info["generation"] == 1
        obs, reward, terminated, truncated, info = env.step({"type": "move", "x": 10, "y": 10})
        assert (reward, terminated, truncated, info["error"]) == (0.0, False, False, None)
        obs, _, terminated, _, info = env.step("not json")
        assert info["error"] == "invalid_action" and not terminated
        obs, _, terminated, truncated, info = env.step(json.dumps({"type": "done", "status": "done"}))
        assert terminated and not truncated
        assert env.render().shape == (480, 640, 3)
        _, info = env.reset()
        assert info["generation"] == 2  # reset opened a new attempt
    finally:
        env.close()
    assert env.session is None
