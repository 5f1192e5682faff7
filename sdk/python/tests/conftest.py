"""A private Drums daemon for the test run (like tests/helpers.ts startDaemon):
its own state dir (DRUMS_STATE_DIR), instance name (DRUMS_INSTANCE), token, and port 0;
the URL is parsed from the daemon's 'serving http://...' line. At the end no session may
be left, and the daemon is stopped with SIGTERM (it sweeps its instance); then no host object
of its instance may be left either (``residue``: netns, veths, nft table, mounts, cgroups), named
by its instance, so another run's daemon on this host never makes this one fail.

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
        # What the stopped daemon left (the fixture asserts it is nothing). A state dir with a mount left in it is
        # not removed: rmtree would descend into the mounted tree.
        self.residue = residue(self.instance, self.state_dir)
        if self.state_dir.startswith("/var/tmp/drums-test-") and not self.residue["mounts"]:
            shutil.rmtree(self.state_dir, ignore_errors=True)


def _lines(argv: list[str]) -> list[str]:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=60).stdout.splitlines()
    except (OSError, subprocess.TimeoutExpired):
        return []


def residue(instance: str, state_dir: str) -> dict[str, list[str]]:
    """Every host object a stopped daemon of ``instance`` could have left, by the names the daemon gives them
    (tests/helpers.ts ``residue`` checks the same for the TypeScript tests): network namespaces
    ``drums-<inst>-*``, veths ``dr<inst>h*``, the nft table ``drums_<inst>``, mounts under its state dir, and
    cgroups ``drums-<inst>`` (its top: sessions, daemon, client below it) and the older ``drums-<inst>-daemon`` /
    ``-client`` in every v1 controller's hierarchy and in the v2 tree (src/host/cgroup-fs.ts ``cgroupBases``;
    a hybrid host's ``unified`` is one of the listed entries). All lists empty means clean."""
    netns = [ln.split(" ")[0] for ln in _lines(["ip", "netns", "list"]) if ln.startswith(f"drums-{instance}-")]
    links = []
    for ln in _lines(["ip", "-o", "link", "show"]):
        parts = ln.split(": ")
        if len(parts) > 1 and parts[1].split("@")[0].startswith(f"dr{instance}h"):
            links.append(parts[1].split("@")[0])
    tables = [ln for ln in _lines(["nft", "list", "tables"]) if ln.split(" ")[-1] == f"drums_{instance}"]
    with open("/proc/self/mountinfo") as f:
        mounts = [ln.split(" ")[4] for ln in f if len(ln.split(" ")) > 4]
    mounts = [m for m in mounts if m == state_dir or m.startswith(state_dir.rstrip("/") + "/")]
    root = "/sys/fs/cgroup"
    bases, seen = [root], set()
    if os.path.isdir(root):
        bases += [os.path.join(root, c) for c in sorted(os.listdir(root)) if os.path.isdir(os.path.join(root, c))]
    cgroups = []
    for base in bases:
        real = os.path.realpath(base)  # cpu and cpuacct may be links to one "cpu,cpuacct" hierarchy
        if real in seen:
            continue
        seen.add(real)
        for name in (f"drums-{instance}", f"drums-{instance}-daemon", f"drums-{instance}-client"):
            if os.path.isdir(os.path.join(base, name)):
                cgroups.append(os.path.join(base, name))
    return {"netns": netns, "links": links, "tables": tables, "mounts": mounts, "cgroups": cgroups}


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
    # Nothing of the instance is left on the host (the daemon swept on stop): namespaces, veths, nft table,
    # mounts, cgroups.
    left = {k: v for k, v in d.residue.items() if v}
    assert not left, f"daemon instance {d.instance} left host objects behind: {left}"


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
