"""Fuzzing of the OSWorld guest routes that take paths (/file, /setup/upload, /list_directory)
against the real daemon, with Hypothesis: traversal (.., /proc/self/root, ~, $VARS, //),
symlinks planted inside the session that point at host-looking paths, NUL bytes, overlong
and non-UTF-8 paths, malformed bodies and a body over the limit.

Checks: never a 5xx (the upstream contract's 500 for a failed read or write is kept only
for real I/O failures; a bad path is 400, a refused one 403, a missing one 404); nothing
outside the session is touched (a canary file on the host keeps its content and mtime, and
no path a fuzzed upload names changes on the host, and uploads, reads and listings through the
planted links reach the session's copy); the session still works at the end.
Bounded by DRUMS_FUZZ_EXAMPLES (default 30 per route) and DRUMS_FUZZ_GUEST_BUDGET_S (60 s per route).
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import time

import pytest
import requests
from hypothesis import HealthCheck, given, settings, strategies as st

from drums import Client

EXAMPLES = int(os.environ.get("DRUMS_FUZZ_EXAMPLES", "30"))
BUDGET_S = float(os.environ.get("DRUMS_FUZZ_GUEST_BUDGET_S", "60"))
_started: dict[str, float] = {}

# Host-side canary: a session that could reach host paths would find it by its name.
_canary_dir = tempfile.mkdtemp(prefix="drums-fuzz-canary-", dir="/var/tmp")
CANARY = os.path.join(_canary_dir, "canary.txt")
with open(CANARY, "w") as f:
    f.write("host canary\n")
_canary_stat = os.stat(CANARY)

TRAVERSALS = [
    "../../../../etc/shadow",
    "/etc/shadow",
    "/proc/self/root/etc/passwd",
    "/proc/1/root/etc/hostname",
    "~/../../../../" + CANARY.lstrip("/"),
    CANARY,
    "/proc/self/cwd/../../" + CANARY.lstrip("/"),
    "$HOME/../../../" + CANARY.lstrip("/"),
    "//" + CANARY,
    "/home/user/link-host/canary.txt",
    "/home/user/link-root",
    "/home/user/link-loop",
    "/sys/fs/cgroup/../../..",
    "/dev/mem",
    "/proc/kcore",
    "~root/.bashrc",
    "${HOME}x",
    "/tmp/.X11-unix/X0",
    "/run/drums/bus",
    "/",
    ".",
    "~",
    "a\x00b",
    "x" * 5000,
    "\udcff\udcfe",
    "é/../é",
    "%2e%2e/%2e%2e/etc",
]
paths = st.one_of(
    st.sampled_from(TRAVERSALS),
    st.text(min_size=1, max_size=300),
    st.builds(lambda a, b: f"{a}/{b}", st.sampled_from(TRAVERSALS), st.text(max_size=40)),
)


@pytest.fixture(scope="module")
def guest(daemon):
    with Client(daemon.url, daemon.token) as c:
        with c.sessions.create(
            image="default", screen="800x600", labels={"drums.osworld": "1", "drums.fuzz": "guest"}
        ) as s:
            # Symlinks inside the session aimed at host-looking paths: they resolve in the session's root.
            s.exec(
                f"mkdir -p {_canary_dir} && echo session-copy > {CANARY}; ln -s {_canary_dir} /home/user/link-host; "
                "ln -s / /home/user/link-root; ln -s link-loop /home/user/link-loop",
                root=True,
            )
            info = c.request("GET", f"/v1/sessions/{s.id}").json()
            yield s, f"http://127.0.0.1:{info['osworld']['serverPort']}"
    shutil.rmtree(_canary_dir, ignore_errors=True)


def _to_bytes(p: str) -> bytes:
    return p.encode("utf-8", "surrogateescape")


def _host_view(p: str):
    """What the host has at the path the guest route resolves `p` to (the session's home is the base of
    a relative path): None if nothing, else (type, size, mtime) of the entry itself, not followed. A route
    that wrote on the host instead of in the session would change it. Paths the route expands (~, $VAR),
    ones the host cannot name, and /proc, /sys and /dev are not compared (None for both sides)."""
    if "~" in p or "$" in p:
        return None
    try:
        host = "/" + os.path.normpath(
            os.path.join("/home/user", _to_bytes(p).decode("utf-8", "surrogateescape"))
        ).lstrip("/")
        st_ = os.lstat(host)
    except (OSError, ValueError):
        return None
    if host.split("/")[1] in ("proc", "sys", "dev"):
        return None  # pseudo filesystems: their inodes' times are made up on lookup, nothing written there persists
    if stat.S_ISDIR(st_.st_mode):
        return ("dir",)  # other processes on the host may add entries to a host directory meanwhile
    return (st_.st_mode >> 12, st_.st_size, st_.st_mtime_ns)


def _check(r: requests.Response, what: str) -> None:
    assert r.status_code < 500, f"{what}: {r.status_code} {r.text[:300]}"


def _over_budget() -> bool:
    """Each route gets BUDGET_S of wall clock; examples past it pass without a request."""
    test = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]
    return time.monotonic() - _started.setdefault(test, time.monotonic()) > BUDGET_S


@settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True, database=None
)
@given(p=paths)
def test_file_route(guest, p):
    if _over_budget():
        return
    _, base = guest
    r = requests.post(f"{base}/file", data={"file_path": _to_bytes(p)}, timeout=120)
    _check(r, f"/file {p!r}")
    if r.status_code == 200:
        assert r.content != b"host canary\n", "a host file was served"


@settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True, database=None
)
@given(p=paths, data=st.binary(max_size=2048))
def test_upload_route(guest, p, data):
    if _over_budget():
        return
    _, base = guest
    before = _host_view(p)
    r = requests.post(
        f"{base}/setup/upload", files={"file_data": ("f", data)}, data={"file_path": _to_bytes(p)}, timeout=120
    )
    _check(r, f"/setup/upload {p!r}")
    assert _host_view(p) == before, f"/setup/upload {p!r} changed the host's {p!r}"


@settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True, database=None
)
@given(p=st.one_of(paths, st.integers(), st.none(), st.lists(st.text(max_size=5), max_size=3)))
def test_list_directory_route(guest, p):
    if _over_budget():
        return
    _, base = guest
    r = requests.post(f"{base}/list_directory", json={"path": p}, timeout=120)
    _check(r, f"/list_directory {p!r}")


@settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True, database=None
)
# /execute keeps upstream's 500 for a malformed command (the contract test asserts it), so it is not here.
@given(
    route=st.sampled_from(["/file", "/setup/upload", "/list_directory", "/run_bash_script"]),
    body=st.binary(max_size=512),
    ctype=st.sampled_from(
        [
            "application/json",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "text/plain; charset=utf-7",
            "",
        ]
    ),
)
def test_bad_bodies(guest, route, body, ctype):
    if _over_budget():
        return
    _, base = guest
    r = requests.post(f"{base}{route}", data=body, headers={"content-type": ctype} if ctype else {}, timeout=120)
    _check(r, f"{route} {ctype!r} {body[:60]!r}")


def test_symlinks_resolve_in_the_session(guest):
    """Each route through a link the session planted to a directory that exists on the host too: it reads,
    writes and lists the session's own directory of that name; the host's stays empty."""
    s, base = guest
    host_dir = tempfile.mkdtemp(prefix="drums-fuzz-linked-", dir="/var/tmp")
    try:
        s.exec(
            f"mkdir -p {host_dir} && echo in-session > {host_dir}/own.txt && chown -R 1000:1000 {host_dir} "
            f"&& ln -sfn {host_dir} /home/user/link-fresh",
            root=True,
        )
        r = requests.post(f"{base}/file", data={"file_path": "/home/user/link-fresh/own.txt"}, timeout=60)
        assert r.status_code == 200 and r.content == b"in-session\n", (r.status_code, r.content[:100])
        r = requests.post(
            f"{base}/setup/upload",
            files={"file_data": ("f", b"via link\n")},
            data={"file_path": "~/link-fresh/sub/uploaded.txt"},
            timeout=60,
        )
        assert r.status_code == 200, r.text[:200]
        assert s.exec(f"cat {host_dir}/sub/uploaded.txt")["stdout"] == "via link\n"
        r = requests.post(f"{base}/list_directory", json={"path": "/home/user/link-fresh"}, timeout=60)
        assert r.status_code == 200, r.text[:200]
        assert sorted(c["name"] for c in r.json()["directory_tree"]["children"]) == ["own.txt", "sub"]
        assert os.listdir(host_dir) == [], f"the host's {host_dir} got {os.listdir(host_dir)}"
        # Through a link to the session's root: the session's /etc/hostname, not the host's.
        r = requests.post(f"{base}/file", data={"file_path": "/home/user/link-root/etc/hostname"}, timeout=60)
        assert r.status_code == 200 and r.content == s.exec("cat /etc/hostname")["stdout"].encode(), r.content[:100]
        # A link loop is a 4xx, not a hang or a 5xx (a loop of the test's own: the fuzzed uploads may have
        # replaced the fixture's, since a failed upload removes what it could not write).
        s.exec("ln -sfn link-loop2 /home/user/link-loop2")
        for route, kw in (
            ("/file", {"data": {"file_path": "/home/user/link-loop2"}}),
            ("/list_directory", {"json": {"path": "/home/user/link-loop2"}}),
            ("/setup/upload", {"data": {"file_path": "/home/user/link-loop2"}, "files": {"file_data": ("f", b"x")}}),
            # A file that cannot be made in an existing directory (sh: "Directory nonexistent"): was a 500.
            ("/setup/upload", {"data": {"file_path": "/proc/drums-fuzz"}, "files": {"file_data": ("f", b"x")}}),
        ):
            r = requests.post(f"{base}{route}", timeout=60, **kw)
            assert 400 <= r.status_code < 500, (route, r.status_code, r.text[:200])
    finally:
        s.exec(f"rm -rf {host_dir} /home/user/link-fresh /home/user/link-loop2", root=True)
        shutil.rmtree(host_dir, ignore_errors=True)


def test_huge_body_and_nothing_outside_touched(guest):
    s, base = guest
    # A 9 MiB upload (over the main API's body limit, under the guest server's 1 GiB; that limit: osworld-contract): no 5xx.
    with requests.Session() as h:
        big = b"x" * (9 * 1024 * 1024)
        r = h.post(
            f"{base}/setup/upload", files={"file_data": ("f", big)}, data={"file_path": "/home/user/big"}, timeout=300
        )
        _check(r, "huge upload")
    # The host canary is untouched; the session's own copy is what the session saw.
    st_now = os.stat(CANARY)
    assert (st_now.st_mtime_ns, st_now.st_size) == (_canary_stat.st_mtime_ns, _canary_stat.st_size)
    with open(CANARY) as f:
        assert f.read() == "host canary\n"
    assert sorted(os.listdir(_canary_dir)) == ["canary.txt"], os.listdir(_canary_dir)
    # The session still answers.
    assert s.exec("echo ok")["stdout"].strip() == "ok"
    r = requests.post(f"{base}/file", data={"file_path": CANARY}, timeout=60)
    assert r.status_code == 200 and r.content == b"session-copy\n"
