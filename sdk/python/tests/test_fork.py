"""session.fork(n) against a real daemon: copies with the source's files and their own identity."""

import pytest

from drums import errors


def test_fork_copies_files_with_fresh_identity(client):
    with client.sessions.create(image="minimal") as src:
        src.files.write("/home/user/state.txt", "step 3\n")
        copies = src.fork(2)
        try:
            assert len(copies) == 2
            ids = {src.id, *(c.id for c in copies)}
            assert len(ids) == 3
            for c in copies:
                assert c.state == "ready" and c.info["labels"]["drums.fork.source"] == src.id
                assert c.files.read("/home/user/state.txt") == b"step 3\n"
                assert c.exec(["hostname"])["stdout"].strip() == c.id
            with pytest.raises(errors.InvalidFork):
                src.fork(0)
        finally:
            for c in copies:
                c.destroy()


def test_memory_fork_carries_processes_and_tmpfs(client):
    with client.sessions.create(image="minimal") as src:
        src.exec(["sh", "-c", "echo in-memory-fs > /tmp/t; nohup sleep 600 >/dev/null 2>&1 & echo $! > /tmp/pid"])
        pid = src.exec(["cat", "/tmp/pid"])["stdout"].strip()
        copies = src.fork(1, mode="memory")
        try:
            (c,) = copies
            assert c.info["labels"]["drums.fork.mode"] == "memory"
            assert c.exec(["cat", "/tmp/t"])["stdout"] == "in-memory-fs\n"
            assert c.exec(["cat", f"/proc/{pid}/comm"])["stdout"] == "sleep\n"
            assert c.exec(["hostname"])["stdout"].strip() == c.id
        finally:
            for c in copies:
                c.destroy()


def test_group_vector_env_forks_a_fresh_group_per_reset(client):
    from drums.gym_group import GroupVectorEnv

    with client.sessions.create(image="minimal", screen="640x480") as src:
        src.files.write("/home/user/start.txt", "same start\n")
        env = GroupVectorEnv(client, src, n=2)
        try:
            obs, info = env.reset()
            assert obs["screenshot"].shape == (2, 480, 640, 3) and obs["screenshot"].dtype.name == "uint8"
            first = info["sessions"]
            assert len(set(first)) == 2 and src.id not in first and info["source"] == src.id
            for e in env.envs:
                assert e.session.files.read("/home/user/start.txt") == b"same start\n"
            obs, rew, term, trunc, info = env.step([{"type": "move", "x": 10, "y": 10}, '{"type": "done"}'])
            assert list(term) == [False, True] and list(rew) == [0.0, 0.0] and info["error"] == [None, None]
            _, info2 = env.reset()
            assert not set(info2["sessions"]) & set(first)
            live = {s.id for s in client.sessions.list()}
            assert not live & set(first) and set(info2["sessions"]) <= live
        finally:
            env.close()
        assert {s.id for s in client.sessions.list()} == {src.id}
