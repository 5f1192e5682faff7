"""A private Drums daemon for the test run (like tests/helpers.ts startDaemon):
its own state dir (DRUMS_STATE_DIR), instance name (DRUMS_INSTANCE), token, and port 0;
the URL is parsed from the daemon's 'serving http://...' line. At the end no session may
be left, and the daemon is stopped with SIGTERM (it sweeps its instance).

Under CI=true a skipped test is a failure (pytest_runtest_makereport below): whatever a test needs (task
data, an app in the image, a tool) must be there, or the run is red. The one kind of skip CI accepts is
``_data.not_here(why)``: a test that cannot run on any host of this kind, saying why."""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from drums import Client

from _data import CI, NOT_HERE

ROOT = Path(__file__).resolve().parents[3]
DRUMS = ROOT / "bin" / "drums"


class Daemon:
    def __init__(self, extra_env: dict[str, str] | None = None, args: list[str] | None = None) -> None:
        self.instance = "p" + secrets.token_hex(2)
        self.state_dir = tempfile.mkdtemp(prefix=f"drums-test-{self.instance}-", dir="/var/tmp")
        self.token = secrets.token_hex(16)
        env = {
            **os.environ,
            "DRUMS_STATE_DIR": self.state_dir,
            "DRUMS_INSTANCE": self.instance,
            "DRUMS_TOKEN": self.token,
            "DRUMS_PORT": "0",
            **(extra_env or {}),
        }
        env.pop("DRUMS_URL", None)
        self.proc = subprocess.Popen(
            [str(DRUMS), "serve", *(args or [])], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.log: list[str] = []
        threading.Thread(target=lambda: self.log.extend(self.proc.stderr), daemon=True).start()  # type: ignore[arg-type]
        deadline = time.monotonic() + 30
        self.url = ""
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()  # type: ignore[union-attr]
            if not line:
                break
            m = re.search(r"serving (http://\S+)", line)
            if m:
                self.url = m.group(1)
                break
        if not self.url:
            self.stop()
            raise RuntimeError("daemon did not start:\n" + "".join(self.log))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()  # our own child, by its handle
                self.proc.wait()
        if self.state_dir.startswith("/var/tmp/drums-test-"):
            shutil.rmtree(self.state_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def daemon():
    d = Daemon()
    # Code that discovers the daemon from the environment (DRUMS_URL/DRUMS_TOKEN) finds this one.
    os.environ["DRUMS_URL"], os.environ["DRUMS_TOKEN"] = d.url, d.token
    try:
        yield d
        with Client(d.url, d.token) as c:
            left = [s.id for s in c.sessions.list()]
        assert left == [], f"sessions left behind: {left}"
    finally:
        d.stop()
    # The instance's network namespaces are gone (the daemon swept on stop).
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"drums-{d.instance}-" not in netns


@pytest.fixture()
def client(daemon):
    with Client(daemon.url, daemon.token) as c:
        yield c


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under CI=true, a skip (pytest.skip, skipif, importorskip, a subtest's skip) is reported as a failure
    with its reason, unless made by ``_data.not_here``."""
    outcome = yield
    rep = outcome.get_result()
    if not CI or not rep.skipped or hasattr(rep, "wasxfail"):
        return
    reason = (rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)).removeprefix("Skipped: ")
    if reason.startswith(NOT_HERE):
        return
    rep.outcome = "failed"
    rep.longrepr = (
        f"CI=true, and this test was skipped: {reason}. Under CI a test that cannot run is a failure; provide what "
        f"it needs, or, if it cannot run on any host of this kind, skip it with _data.not_here(why)."
    )
