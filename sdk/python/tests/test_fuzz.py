"""Spec-driven API fuzzing with schemathesis against the real daemon.

Every operation in /openapi.json gets generated requests (valid and invalid, from the
spec's schemas); the run fails on any 5xx, on a response that is not the one error body
shape, or on a hang (each call has a timeout). Bounded: DRUMS_FUZZ_EXAMPLES examples per
operation (default 25), and a wall-clock budget (DRUMS_FUZZ_BUDGET_S, default 150 s) shared
out over the operations (each gets budget / 40 s, then its remaining examples pass by, so a slow
host fuzzes every operation a little rather than the first half fully), with the whole budget
twice over as a backstop after
which all remaining examples pass by (not skips: under CI=true a skip is a failure, conftest.py).
The event stream is read up to its first event; a drain is undone right after its call.

Keeping it cheap and clean: generated creates always use image `minimal`, no URL, no
egress (the spec allows egress, which flips the host-wide ip_forward); every session a
create made is destroyed right after the call (a generated pool gets size 0 and image
`minimal`, and is removed right after), and half of the calls on /v1/sessions/{id}
paths target one live session (so reset/exec/screenshot/events really run), except DELETE.
The daemon fixture then checks that no session is left.
"""

from __future__ import annotations

import os
import random
import subprocess
import time

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error

from drums import Client

schemathesis.experimental.OPEN_API_3_1.enable()

EXAMPLES = int(os.environ.get("DRUMS_FUZZ_EXAMPLES", "25"))
BUDGET_S = float(os.environ.get("DRUMS_FUZZ_BUDGET_S", "150"))
_started = time.monotonic()
# Time spent so far per operation (method, path), for its share of the budget.
_op_spent: dict[tuple[str, str], float] = {}
OP_SHARE_S = BUDGET_S / 40
# A private RNG: Hypothesis reseeds the global `random` for every example (derandomize=True),
# so random.random() would return the same value each time and never pick the live session.
_rng = random.Random(7450)


@pytest.fixture(scope="session")
def api_schema(daemon):
    return schemathesis.from_uri(f"{daemon.url}/openapi.json", base_url=daemon.url)


@pytest.fixture(scope="module")
def live(daemon):
    with Client(daemon.url, daemon.token) as c:
        with c.sessions.create(image="minimal", screen="640x480", labels={"drums.fuzz": "target"}) as s:
            yield s


schema = schemathesis.from_pytest_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_api_never_5xx(case, daemon, live):
    if time.monotonic() - _started > 2 * BUDGET_S:
        return  # the whole budget is used up twice over: the remaining examples pass by, as an operation's do
    op = (case.method, case.operation.path)
    if _op_spent.get(op, 0.0) > OP_SHARE_S:
        return  # this operation's share of the budget is used up
    t0 = time.monotonic()
    child = None
    pid = case.body.get("pid") if isinstance(case.body, dict) else None
    if op == ("POST", "/v1/host/client-cgroup") and type(pid) is int and pid > 0:
        # The test runs as root, and root may move any host process (init, a shell) into the client
        # cgroup: a generated pid would move a process this test did not start. Its own child instead.
        child = subprocess.Popen(["sleep", "60"])
        case.body = {**case.body, "pid": child.pid}
    try:
        _fuzz_one(case, daemon, live)
    finally:
        if child is not None:
            child.kill()
            child.wait()
        _op_spent[op] = _op_spent.get(op, 0.0) + time.monotonic() - t0


def _fuzz_one(case, daemon, live):
    if case.operation.path == "/v1/sessions" and case.method == "POST" and isinstance(case.body, dict):
        case.body = {**case.body, "image": "minimal"}
        case.body.pop("url", None)
        case.body.pop("egress", None)
        case.body.pop("browserFlags", None)
    if case.operation.path == "/v1/pools/{name}" and case.method == "PUT" and isinstance(case.body, dict):
        # A generated pool never fills: size 0, image minimal (it is removed after the call).
        case.body = {**case.body, "size": 0}
        if isinstance(case.body.get("template"), dict):
            case.body["template"] = {**case.body["template"], "image": "minimal"}
            for k in ("url", "egress", "browserFlags"):
                case.body["template"].pop(k, None)
    if (
        case.operation.path.endswith("/fork")
        and isinstance(case.body, dict)
        and isinstance(case.body.get("count"), int)
    ):
        case.body = {**case.body, "count": min(case.body["count"], 1)}  # copies are destroyed after the call
    if case.path_parameters and "id" in case.path_parameters and case.method != "DELETE" and _rng.random() < 0.5:
        case.path_parameters["id"] = live.id
    # A drain (POST /v1/host/drain) is fuzzed too: the finally below undoes it before the next call, and
    # nothing else runs meanwhile (one test at a time), so no later create meets a draining host.
    headers = {"authorization": f"Bearer {daemon.token}"}
    if case.operation.path.endswith("/events"):
        _fuzz_event_stream(case, headers)
        return
    response = case.call(headers=headers, timeout=120)
    try:
        case.validate_response(response, checks=(not_a_server_error,))
        if response.status_code >= 400:
            body = response.json()
            assert set(body) == {"error"} and isinstance(body["error"].get("code"), str), (
                f"bad error body: {response.text[:200]}"
            )
    finally:
        if case.operation.path == "/v1/host/drain" and case.method == "POST":
            with Client(daemon.url, daemon.token) as c:
                c.undrain()  # the daemon is shared by the tests after this one
        if case.operation.path == "/v1/sessions" and case.method == "POST" and response.status_code in (200, 201):
            sid = response.json()["id"]
            with Client(daemon.url, daemon.token) as c:
                c.sessions.get(sid).destroy()
        if case.operation.path.endswith("/fork") and response.status_code == 201:
            with Client(daemon.url, daemon.token) as c:
                for copy in response.json()["copies"]:
                    c.sessions.get(copy["id"]).destroy()
        if case.operation.path == "/v1/pools/{name}" and case.method == "PUT" and response.status_code in (200, 201):
            with Client(daemon.url, daemon.token) as c:
                c.pools.delete(response.json()["name"])


def _fuzz_event_stream(case, headers):
    """An event stream never ends, so it is read, not waited for: the status, then an error's body, or the
    stream's content type and its first event (`state`, sent at once); then the connection is closed."""
    r = case.call(headers=headers, timeout=(10, 60), stream=True)
    try:
        assert r.status_code < 500, f"{r.status_code} {r.text[:200]}"
        if r.status_code >= 400:
            body = r.json()
            assert set(body) == {"error"} and isinstance(body["error"].get("code"), str), (
                f"bad error body: {r.text[:200]}"
            )
        else:
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream"), r.headers
            first = next(line for line in r.iter_lines(decode_unicode=True) if line and not line.startswith(":"))
            assert first == "event: state", first
    finally:
        r.close()


# Beside the spec-driven cases: what schemathesis does not send. Raw bytes that are not UTF-8 or not
# JSON, wrong or odd content types, malformed percent-encoding and control bytes in a path id, on
# the main API's write routes. Each answer is a 4xx with the one error body shape, never a 5xx.
_RAW_ROUTES = [
    ("POST", "/v1/sessions"),
    ("POST", "/v1/sessions/{id}/actions"),
    ("POST", "/v1/sessions/{id}/exec"),
    ("POST", "/v1/sessions/{id}/fork"),
    ("POST", "/v1/sessions/{id}/reset"),
    ("PUT", "/v1/pools/fuzz-raw"),
    ("PUT", "/v1/sessions/{id}/files/home/user/x"),
]


def _raw_check(r, what):
    assert r.status_code < 500, f"{what}: {r.status_code} {r.text[:200]}"
    if r.status_code >= 400:
        body = r.json()
        assert set(body) == {"error"} and isinstance(body["error"].get("code"), str), f"{what}: {r.text[:200]}"


@settings(
    max_examples=EXAMPLES * 2, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True, database=None
)
@given(
    route=st.sampled_from(_RAW_ROUTES),
    body=st.one_of(
        st.binary(max_size=256),
        st.sampled_from([b"\xff\xfe{}", b'{"image": "\xc3\x28"}', b'{"a":' * 200, b"[]", b"null", b'"x"', b"\x00"]),
    ),
    ctype=st.sampled_from(
        ["application/json", "application/json; charset=latin1", "text/plain", "application/x-www-form-urlencoded", ""]
    ),
    bad_id=st.sampled_from([None, "%ff", "%", "%00", "..%2f..", "a%2Fb", "x" * 300]),
)
def test_raw_bodies_and_paths_never_5xx(daemon, live, route, body, ctype, bad_id):
    method, path = route
    path = path.replace("{id}", bad_id if bad_id is not None else live.id)
    if body.strip() in (b"", b"null") and method == "POST" and path == "/v1/sessions":
        body = b"\xff"  # an empty (or null) create body is the all-defaults spec, not garbage
    headers = {"authorization": f"Bearer {daemon.token}", **({"content-type": ctype} if ctype else {})}
    r = requests.request(method, f"{daemon.url}{path}", data=body, headers=headers, timeout=120)
    try:
        _raw_check(r, f"{method} {path} {ctype!r} {body[:60]!r}")
        # Only garbage was sent: nothing may have been made from it.
        assert r.status_code not in (200, 201) or method != "POST" or path != "/v1/sessions", r.text[:200]
    finally:
        if method == "POST" and path == "/v1/sessions" and r.status_code in (200, 201):
            with Client(daemon.url, daemon.token) as c:
                c.sessions.get(r.json()["id"]).destroy()
        if path.endswith("/fork") and r.status_code == 201:  # an empty body is a fork of one
            with Client(daemon.url, daemon.token) as c:
                for copy in r.json()["copies"]:
                    c.sessions.get(copy["id"]).destroy()
        if method == "PUT" and path.startswith("/v1/pools/") and r.status_code in (200, 201):
            with Client(daemon.url, daemon.token) as c:
                c.pools.delete("fuzz-raw")


def test_huge_bodies_get_413_not_a_crash(daemon, live):
    headers = {"authorization": f"Bearer {daemon.token}", "content-type": "application/json"}
    big = b'{"actions": [' + b'{"type": "noop"},' * (9 * 1024 * 1024 // 17 + 1000) + b"]}"
    for path in ("/v1/sessions", f"/v1/sessions/{live.id}/actions"):
        r = requests.post(f"{daemon.url}{path}", data=big, headers=headers, timeout=300)
        assert r.status_code == 413, (path, r.status_code, r.text[:200])
        assert r.json()["error"]["code"] == "payload_too_large"
    with Client(daemon.url, daemon.token) as c:
        assert c.sessions.get(live.id).exec("echo ok")["stdout"].strip() == "ok"
