"""The inside of the metric sandbox (drums.osworld_sandbox starts it under bubblewrap).

Two processes, so that the score comes from a side the metric's code cannot write:

- the **runner** (``python -m drums.osworld_sandbox_runner SCORE_FD``) holds the write end of the
  score pipe that the harness reads. It makes itself non-dumpable (so no other process of the
  sandbox's uid can open ``/proc/<runner>/fd/SCORE_FD`` or ptrace it), reads the call from stdin,
  and starts the metric process without that fd.
- the **metric process** (``--child RESULT_FD``) sets its rlimits, imports desktop_env's metrics,
  calls the one named, and writes its result (a number, or the exception it raised) to its own
  result pipe. Its stdout and stderr are the runner's stderr: the harness logs them and never reads
  a score there.

The runner writes ``{"score": x}`` or ``{"error": "..."}`` to the score fd, only after the metric
process has exited. Code that the metric runs (``eval`` of session output, the agent's module
imported by a test) can decide what *its* process returns, as it could in the harness, but it cannot
write the score channel, cannot print a score, and cannot reach anything outside the sandbox.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

#: What the runner reads back from the metric process (a number or an error message).
MAX_RESULT = 64 << 10


def _nondumpable() -> None:
    import ctypes

    PR_SET_DUMPABLE = 4
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


def _read_bounded(fd: int, limit: int) -> bytes:
    out = b""
    while True:
        chunk = os.read(fd, 65536)
        if not chunk:
            return out
        if len(out) < limit:
            out += chunk[: limit - len(out)]


def runner(score_fd: int) -> int:
    def report(d: dict) -> None:
        os.write(score_fd, json.dumps(d).encode())
        os.close(score_fd)

    os.set_inheritable(score_fd, False)
    _nondumpable()
    payload = sys.stdin.buffer.read()
    r, w = os.pipe()
    try:
        child = subprocess.Popen(
            [sys.executable, "-m", "drums.osworld_sandbox_runner", "--child", str(w)],
            stdin=subprocess.PIPE,
            stdout=sys.stderr,
            pass_fds=(w,),
            close_fds=True,
        )
    except OSError as e:
        report({"error": f"could not start the metric process: {e}"})
        return 0
    os.close(w)
    assert child.stdin is not None
    try:
        child.stdin.write(payload)
        child.stdin.close()
    except BrokenPipeError:
        pass
    raw = _read_bounded(r, MAX_RESULT)
    code = child.wait()
    try:
        res = json.loads(raw) if raw else None
    except ValueError:
        res = None
    if isinstance(res, dict) and isinstance(res.get("ok"), (int, float)) and not isinstance(res["ok"], bool):
        v = float(res["ok"])
        report({"score": v} if math.isfinite(v) else {"error": f"the metric returned {v}"})
    elif isinstance(res, dict) and isinstance(res.get("error"), str):
        report({"error": res["error"][:2000]})
    else:
        how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
        report({"error": f"the metric process {how} without a result"})
    return 0


def child(result_fd: int) -> int:
    import pickle
    import resource

    def limit(which: int, value: int) -> None:
        if value > 0:
            resource.setrlimit(which, (value, value))

    limit(resource.RLIMIT_AS, int(os.environ.get("DRUMS_METRIC_RLIMIT_AS", "0")))
    limit(resource.RLIMIT_CPU, int(os.environ.get("DRUMS_METRIC_RLIMIT_CPU", "0")))
    limit(resource.RLIMIT_FSIZE, int(os.environ.get("DRUMS_METRIC_RLIMIT_FSIZE", "0")))
    limit(resource.RLIMIT_NPROC, int(os.environ.get("DRUMS_METRIC_RLIMIT_NPROC", "0")))
    limit(resource.RLIMIT_CORE, 0)
    call = pickle.loads(sys.stdin.buffer.read())  # from the harness, not from the session
    out = os.fdopen(result_fd, "w")
    try:
        import warnings

        warnings.filterwarnings("ignore", category=FutureWarning)
        from drums._optional import OPTIONAL_HEAVY, install_finder

        install_finder(OPTIONAL_HEAVY)
        from desktop_env.evaluators import metrics

        fn = getattr(metrics, call["name"])
        r = fn(*call["args"], **call["kwargs"])
        res = {"ok": float(r)}
    except BaseException as e:  # noqa: BLE001 - every failure becomes the metric's error
        res = {"error": f"{type(e).__name__}: {e}"[:2000]}
    out.write(json.dumps(res))
    out.close()
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        sys.exit(child(int(sys.argv[2])))
    sys.exit(runner(int(sys.argv[1])))
