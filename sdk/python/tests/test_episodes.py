"""client.episodes (sync and async) against a real daemon: a recorded session's episode, its outcome, its export."""

import asyncio
import json
import os

import pytest

from drums import AsyncClient, errors


def test_episodes_list_get_outcome_export(client, tmp_path):
    with client.sessions.create(image="minimal", record={"frames": 10}) as s:
        assert s.info["recording"] == {"frames": 10, "a11y": False, "generation": 1, "stopped": None}
        s.screenshot()
        s.act([{"type": "click", "x": 10, "y": 10}], screenshot=True)
        s.reset()
        eps = client.episodes.list(s.id)
        assert [(e["generation"], e["closeReason"]) for e in eps] == [(1, "reset"), (2, None)]
        ep = client.episodes.get(s.id, 1, steps=True)
        assert [e["t"] for e in ep["events"] if e["t"] != "frame"] == ["open", "screenshot", "actions", "close"]
        assert ep["steps"][0]["agentAction"] == [{"type": "click", "x": 10, "y": 10}]
        scored = client.episodes.set_outcome(s.id, 1, reward=0.5, outcome="failure")
        assert scored["outcome"]["reward"] == 0.5
        with pytest.raises(errors.DrumsError) as bad:
            client.episodes.set_outcome(s.id, 1)
        assert bad.value.code == "invalid_outcome"
        with pytest.raises(errors.DrumsError) as missing:
            client.episodes.get(s.id, 7)
        assert missing.value.code == "episode_not_found"
        end = client.episodes.export(s.id, 1, str(tmp_path / "sync"))
        assert end["closed"] is True

        async def run():
            async with AsyncClient(client.url, client._token) as ac:
                assert [e["generation"] for e in await ac.episodes.list(s.id)] == [1, 2]
                got = await ac.episodes.get(s.id, 1, steps=True)
                assert got["steps"] == ep["steps"]
                await ac.episodes.export(s.id, 1, str(tmp_path / "async"))

        asyncio.run(run())
        # Every episode of the daemon, by outcome; a live episode is not deleted, a closed one is, and is then 404.
        assert (s.id, 1) in [(e["session"], e["generation"]) for e in client.episodes.list_all(outcome="failure")]
        assert (s.id, 1) not in [(e["session"], e["generation"]) for e in client.episodes.list_all(outcome="success")]
        with pytest.raises(errors.DrumsError) as live:
            client.episodes.delete(s.id, 2)
        assert live.value.code == "episode_open"
        client.episodes.delete(s.id, 1)
        with pytest.raises(errors.DrumsError) as gone:
            client.episodes.export(s.id, 1, str(tmp_path / "gone"))
        assert gone.value.code == "episode_not_found" and gone.value.status == 404
        assert [e["generation"] for e in client.episodes.list(s.id)] == [2]
    for d in ("sync", "async"):
        out = tmp_path / d
        traj = [json.loads(line) for line in (out / "traj.jsonl").read_text().splitlines()]
        assert [t["step_num"] for t in traj] == [1]
        assert os.path.getsize(out / traj[0]["screenshot_file"]) > 100
        assert (out / "result.txt").read_text() == "0.5\n"
        steps = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
        assert steps[0]["action"][0]["type"] == "click" and steps[0]["outcome"] == "failure"
        # recording.mp4, by ffmpeg from the kept frames (setup installs ffmpeg).
        assert (out / "recording.mp4").read_bytes()[4:8] == b"ftyp"
    assert (tmp_path / "sync" / "traj.jsonl").read_text() == (tmp_path / "async" / "traj.jsonl").read_text()
