"""drums.agentrl against the real agentrl-worker package: a TaskWorker (its FastAPI app on
loopback) runs a task whose environments are Drums sessions; the test drives it through the
worker's own HTTP API (start_sample, interact), as AgentRL's controller would."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from drums import Client

APP = Path(__file__).with_name("agentrl_app.py")


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_agentrl_worker_hands_out_drums_sessions(daemon):
    port = _free_port()
    env = {**__import__("os").environ, "DRUMS_URL": daemon.url, "DRUMS_TOKEN": daemon.token}
    proc = subprocess.Popen(
        [sys.executable, str(APP), str(port)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    base = f"http://127.0.0.1:{port}/api"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                assert httpx.get(f"{base}/get_indices", timeout=2).json() == [1, 2, 3]
                break
            except httpx.TransportError as err:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise AssertionError(
                        "worker did not start:\n" + (proc.stdout.read() if proc.poll() is not None else "")
                    ) from err
                time.sleep(0.2)
        with httpx.Client(base_url=base, timeout=120) as w:
            r = w.post("/start_sample", json={"index": 3, "session_id": 41})
            assert r.status_code == 200, r.text
            first = r.json()
            assert first["finish"] is False
            text = first["messages"][-1]["content"]
            assert text.startswith("product=21 uid=1000 url=" + daemon.url + "/v1/sessions/s"), text
            sid = text.rsplit("/", 1)[1]
            with Client(daemon.url, daemon.token) as c:
                assert [s.id for s in c.sessions.list()] == [sid]  # the worker's environment is a real Drums session
            r = w.post(
                "/interact",
                json={"session_id": 41, "messages": [{"role": "assistant", "content": "/home/user/answer.txt"}]},
            )
            assert r.status_code == 200, r.text
            done = r.json()["env_out"]
            assert done["finish"] is True and done["status"] == "completed", done
            result = json.loads(done["messages"][-1]["content"])
            # exec, shell, env variables, renew, then reset: the file written before it is gone.
            assert result == {
                "rc": 0,
                "written": "drums",
                "gone_after_reset": True,
                "generation": 2,
                "home": "/home/user",
                "env": sid,
            }, result
            assert (
                w.post("/sample_status", json={"session_id": 41}).status_code == 400
            )  # finished: left the worker's map
        with Client(daemon.url, daemon.token) as c:
            assert c.sessions.list() == []  # end_session gave the session back
    finally:
        proc.terminate()  # our own child, by its handle
        try:
            out, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
