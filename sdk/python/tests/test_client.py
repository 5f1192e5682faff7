import numpy as np
import pytest

from drums import AsyncClient, Client, errors
from drums.errors import DrumsError


def test_health_and_openapi(client):
    assert client.health()
    assert client.openapi()["openapi"].startswith("3.1.")


def test_host_report(client, daemon):
    r = client.host()
    assert r["instance"] == daemon.instance and r["draining"] is False
    assert r["sessions"]["held"] <= r["sessions"]["max"] and r["capacity"]["sessions"] >= 0
    assert any(i["name"] == "minimal" for i in r["images"])
    assert client.host()["instanceId"] == r["instanceId"]


def test_session_context_manager_exec_screenshot_files_reset(client):
    with client.sessions.create(image="minimal", screen="800x600") as s:
        assert s.state == "ready" and s.generation == 1 and s.screen == (800, 600)
        r = s.exec("echo hi; exit 4")
        assert (r["exitCode"], r["stdout"]) == (4, "hi\n")
        assert s.exec(["id", "-u"])["stdout"].strip() == "1000"
        png = s.screenshot()
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        arr = s.screenshot_array()
        assert arr.dtype == np.uint8 and arr.shape == (600, 800, 3)
        s.files.write("/home/user/note.txt", "drums\n")
        assert s.files.read("/home/user/note.txt") == b"drums\n"
        old = client.sessions.get(s.id)
        token = s.attempt["token"]
        s.reset()
        assert s.generation == 2 and s.attempt["token"] != token
        # The old handle is pinned to generation 1: it may not act on the new attempt.
        with pytest.raises(errors.StaleGeneration) as e:
            old.exec(["true"])
        assert isinstance(e.value, errors.Conflict) and e.value.status == 409
        with pytest.raises(errors.FileNotFound):
            s.files.read("/home/user/note.txt")
        sid = s.id
    # Destroyed on exit.
    with pytest.raises(errors.SessionNotFound):
        client.sessions.get(sid)


def test_actions_move_the_pointer(client):
    with client.sessions.create(image="minimal", screen="640x480") as s:
        r = s.act([{"type": "move", "x": 123, "y": 45}, {"type": "cursor_position"}])
        assert r["generation"] == 1
        assert s.windows()["cursor"] == {"x": 123, "y": 45}
        with pytest.raises(errors.InvalidAction) as e:
            s.act({"type": "teleport"})
        assert e.value.field


def test_typed_validation_errors(client):
    with pytest.raises(errors.InvalidSpec) as e:
        client.sessions.create(image="minimal", memory_mb="lots")
    assert e.value.field == "memoryMb" and e.value.status == 400
    with pytest.raises(errors.ImageNotFound):
        client.sessions.create(image="no-such-image")
    with pytest.raises(errors.Unauthorized):
        Client(client.url, "wrong").sessions.list()
    assert issubclass(errors.ERRORS["session_expired"], errors.Gone)
    assert issubclass(errors.ERRORS["rate_limited"], errors.TooManyRequests)


def test_idempotency_key_returns_the_same_session(client):
    a = client.sessions.create(image="minimal", idempotency_key="py-idem-1")
    try:
        b = client.sessions.create(image="minimal", idempotency_key="py-idem-1")
        assert b.id == a.id
        with pytest.raises(errors.IdempotencyConflict):
            client.sessions.create(image="minimal", screen="800x600", idempotency_key="py-idem-1")
    finally:
        a.destroy()


def test_events_stream_state_and_end(client):
    s = client.sessions.create(image="minimal")
    events = s.events()
    kind, data = next(events)
    assert kind == "state" and data["id"] == s.id and data["generation"] == 1
    s.destroy()
    kinds = [k for k, _ in events]
    assert kinds[-1] == "end"


async def test_async_client(daemon):
    async with AsyncClient(daemon.url, daemon.token) as c:
        assert await c.health()
        assert (await c.openapi())["openapi"].startswith("3.1.")
        async with await c.sessions.create(image="minimal", screen="640x480") as s:
            assert (await s.exec(["echo", "async"]))["stdout"] == "async\n"
            # What the async twin lacked before the parity test (tests/test_parity.py).
            arr = await s.screenshot_array()
            assert arr.dtype == np.uint8 and arr.shape == (480, 640, 3)
            await s.act({"type": "move", "x": 12, "y": 34}, scale={"width": 320, "height": 240})
            assert (await s.windows())["cursor"] == {"x": 24, "y": 68}
            await s.files.write("/home/user/a.txt", "drums")
            st = await s.files.stat("/home/user/a.txt")
            assert st["type"] == "file" and st["size"] == 5
            await s.reset()
            assert s.generation == 2
            got = [k async for k, _ in _first(s.events(), 1)]
            assert got == ["state"]
        with pytest.raises(DrumsError) as e:
            await c.sessions.get(s.id)
        assert e.value.code == "session_not_found"


async def _first(agen, n):
    i = 0
    async for item in agen:
        yield item
        i += 1
        if i >= n:
            await agen.aclose()
            return


def test_act_image_binary_response_matches_json(client):
    with client.sessions.create(image="minimal", screen="640x480") as s:
        s.act({"type": "move", "x": 10, "y": 10})
        resp, png = s.act_image({"type": "move", "x": 50, "y": 60})
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        assert resp["generation"] == 1 and resp["results"][0]["type"] == "move"
        assert resp["screenshot"]["width"] == 640 and resp["screenshot"]["mimeType"] == "image/png"
        # Same screen, same cursor: the JSON answer carries the same bytes (the frame cache).
        j = s.act({"type": "move", "x": 50, "y": 60}, screenshot=True)
        import base64

        assert base64.b64decode(j["screenshot"]["data"]) == png
        resp2, jpg = s.act_image(
            {"type": "move", "x": 51, "y": 60},
            screenshot={"format": "jpeg", "quality": 70, "scale": {"width": 320, "height": 240}},
        )
        assert jpg[:2] == b"\xff\xd8" and resp2["screenshot"]["width"] == 320 and resp2["screenshot"]["scaleX"] == 2.0


def test_take_over_shows_in_the_session_view_and_blocks_agent_input(client):
    with client.sessions.create(image="minimal", screen="640x480") as s:
        assert s.takeover is None
        t = s.take_over("py-test")
        assert t["holder"] == "py-test" and t["id"]
        s.refresh()
        assert s.takeover == {"holder": "py-test", "since": t["since"]}
        listed = [x for x in client.sessions.list() if x.id == s.id]
        assert listed and listed[0].takeover == s.takeover
        with pytest.raises(DrumsError) as e:
            s.act({"type": "move", "x": 5, "y": 5})
        assert e.value.code == "session_taken_over" and e.value.status == 409
        with pytest.raises(DrumsError) as e:
            s.take_over("someone-else")
        assert e.value.code == "takeover_held"
        with pytest.raises(DrumsError) as e:
            s.release_takeover("not-the-id")
        assert e.value.code == "takeover_held"
        s.release_takeover(t["id"])
        assert s.refresh().takeover is None
        s.act({"type": "move", "x": 5, "y": 5})


def test_join_client_cgroup(client, daemon):
    # A process of ours joins the instance's client CPU cgroup; a pid that names no process is refused.
    import subprocess

    def cpu_cgroup(pid: int) -> str:
        lines = open(f"/proc/{pid}/cgroup").read().splitlines()
        v1 = [ln for ln in lines if "cpu" in ln.split(":")[1].split(",")]
        return (v1 or [ln for ln in lines if ln.startswith("0::")])[0].split(":", 2)[2]

    child = subprocess.Popen(["sleep", "120"])
    try:
        r = client.join_client_cgroup(child.pid)
        assert r == {"pid": child.pid, "cgroup": f"drums-{daemon.instance}/client"}
        assert cpu_cgroup(child.pid) == f"/drums-{daemon.instance}/client"
    finally:
        child.kill()  # ours, by handle; reaped so the cgroup can go with the instance
        child.wait()
    # Above pid_max no process can be (a reaped child's pid could be reused, and root may move any).
    with pytest.raises(errors.ProcessNotFound):
        client.join_client_cgroup(int(open("/proc/sys/kernel/pid_max").read()) + 1)
