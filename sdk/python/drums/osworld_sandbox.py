"""Metrics that execute agent output run inside a throwaway Drums session, not in the host Python.

desktop_env's ``check_python_file_by_test_suite`` (``metrics/vscode.py``) imports a test file
from the task's cache directory, and that test imports the Python file the agent edited, all
in the evaluating process. On OSWorld that process is the host harness. Here the wrapper
copies the files of the test's directory into a fresh session (the osworld image, no egress,
the desktop user, the session's cgroup limits), runs the same steps there (chdir to the test's
directory, put it first on sys.path, load it as a module, call the test function, map its
result to a score the way upstream does), reads the score back, and destroys the session.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

log = logging.getLogger("drums.osworld.sandbox")

#: metric name -> the sandboxed replacement
SANDBOXED: dict[str, Any] = {}

#: Files of the test's directory copied into the sandbox (bytes, total).
MAX_COPY = 64 << 20
RUN_TIMEOUT_MS = int(os.environ.get("DRUMS_OSWORLD_SANDBOX_TIMEOUT_MS", "120000"))
MARK = "DRUMS-SANDBOX-SCORE "

# Runs in the sandbox: upstream's steps and result mapping, the score on the last line.
_RUNNER = (
    r"""
import importlib.util, json, math, os, sys
test_file, fn = sys.argv[1], sys.argv[2]
def score():
    d = os.path.dirname(os.path.abspath(test_file))
    os.chdir(d)
    sys.path.insert(0, d)
    spec = importlib.util.spec_from_file_location("dynamic_test_module", test_file)
    if spec is None or spec.loader is None:
        return 0.0
    mod = importlib.util.module_from_spec(spec)
    sys.modules["dynamic_test_module"] = mod
    spec.loader.exec_module(mod)
    f = getattr(mod, fn, None)
    if not callable(f):
        return 0.0
    r = f()
    if isinstance(r, bool):
        return 1.0 if r else 0.0
    if isinstance(r, (int, float)):
        v = float(r)
        return 0.0 if math.isnan(v) else max(0.0, min(1.0, v))
    return 1.0 if r else 0.0
try:
    s = score()
except BaseException as e:
    print("test raised %s: %s" % (type(e).__name__, e), file=sys.stderr)
    s = 0.0
sys.stdout.flush()
print("\n"""
    + MARK
    + r"""" + json.dumps(s))
"""
)


def _client():
    from .client import Client

    return Client()


def check_python_file_by_test_suite(actual_files, test_file, **options) -> float:
    """Same contract as desktop_env's metric; the test runs in a throwaway Drums session."""
    fn = options.get("test_function_name", "test")
    if not test_file or not os.path.isfile(test_file):
        log.error("test file does not exist: %s", test_file)
        return 0.0
    d = os.path.dirname(os.path.abspath(test_file))
    files: dict[str, bytes] = {}
    total = 0
    for name in sorted(os.listdir(d)):
        p = os.path.join(d, name)
        if name.startswith(".") or os.path.islink(p) or not os.path.isfile(p):
            continue
        total += os.path.getsize(p)
        if total > MAX_COPY:
            log.error("the test's directory holds more than %d bytes; not copied into the sandbox", MAX_COPY)
            return 0.0
        with open(p, "rb") as f:
            files[name] = f.read()
    image = os.environ.get("DRUMS_OSWORLD_SANDBOX_IMAGE") or os.environ.get("DRUMS_OSWORLD_IMAGE") or "osworld"
    with _client() as c:
        s = c.sessions.create(image=image, labels={"drums.osworld": "0", "drums.osworld.sandbox": "1"}, ttl_seconds=600)
        try:
            work = "/home/user/.drums-eval"
            for name, data in files.items():
                s.files.write(f"{work}/{name}", data)
            s.files.write(f"{work}/.drums_runner.py", _RUNNER)
            r = s.exec(
                ["python3", f"{work}/.drums_runner.py", f"{work}/{os.path.basename(test_file)}", str(fn)],
                cwd=work,
                timeout_ms=RUN_TIMEOUT_MS,
            )
        finally:
            s.destroy()
    out = r.get("stdout") or ""
    if r.get("timedOut"):
        log.error("the test suite timed out in the sandbox after %d ms", RUN_TIMEOUT_MS)
        return 0.0
    for line in reversed(out.splitlines()):
        if line.startswith(MARK):
            try:
                v = float(json.loads(line[len(MARK) :]))
            except ValueError:
                break
            log.info("sandboxed %s: %s (stderr: %s)", os.path.basename(test_file), v, (r.get("stderr") or "")[-500:])
            return max(0.0, min(1.0, v))
    log.error("no score from the sandbox (exit %s): %s", r.get("exitCode"), (r.get("stderr") or out)[-1000:])
    return 0.0


SANDBOXED["check_python_file_by_test_suite"] = check_python_file_by_test_suite


def install() -> None:
    """Replaces the metrics in desktop_env's metrics package (DesktopEnv looks them up there by name)."""
    from desktop_env.evaluators import metrics

    for name, fn in SANDBOXED.items():
        setattr(metrics, name, fn)
