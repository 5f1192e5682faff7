"""desktop_env's metrics run in sandboxes, never in the harness process.

A metric parses what the session produced (a file the agent saved, the output of a command the
agent could influence) and some run code: ``check_gnome_favorite_apps`` ``eval``s a command's
output, ``check_python_file_by_test_suite`` imports the agent's Python file. On OSWorld that
process is the host harness, which holds the Drums daemon's token. ``install()`` replaces every
metric in desktop_env's metrics package (where DesktopEnv looks them up by name):

- ``check_python_file_by_test_suite`` runs in a **throwaway Drums session** (``check_python_file_by_test_suite``
  below): the test's directory is copied in, a runner as root-in-session starts the test as the
  desktop user and prints the score on its own stdout, which the test's process does not hold.
- **every other metric** runs in a **bubblewrap sandbox on the host** (``run_metric``): new mount,
  pid, net, ipc, uts and cgroup namespaces; an empty root with ``/usr``, a few files of ``/etc``,
  the Python packages and the files the getters fetched for this evaluation, all read-only; a
  private ``/tmp``; no environment but what it needs (no token); as ``DRUMS_OSWORLD_SANDBOX_UID``
  (65534) with no capabilities when the harness is root, else in a user namespace of the harness's
  own uid; rlimits and a timeout. Inside, ``drums.osworld_sandbox_runner`` calls the metric in a
  process of its own and sends the score back over a pipe that only the runner holds.

Getters stay in the harness: they are the I/O half of an evaluation (HTTP to the guest server,
DevTools to the session's browser), which the sandbox, with no network, cannot do. They parse what
they fetch with data parsers (json, sqlite3, expat, lxml) and evaluate none of it as code.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import logging
import math
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import threading
from typing import Any, Iterator, Optional

log = logging.getLogger("drums.osworld.sandbox")

#: metric name -> its sandboxed replacement (filled by install())
SANDBOXED: dict[str, Any] = {}


class MetricSandboxError(RuntimeError):
    """A sandboxed metric gave no score: it raised, timed out, or the sandbox could not start."""


# --------------------------------------------------------------------- every metric: bubblewrap

METRIC_TIMEOUT_S = float(os.environ.get("DRUMS_OSWORLD_METRIC_TIMEOUT_S", "300"))
METRIC_MEMORY_MB = int(os.environ.get("DRUMS_OSWORLD_METRIC_MEMORY_MB", "8192"))
SANDBOX_UID = int(os.environ.get("DRUMS_OSWORLD_SANDBOX_UID", "65534"))
#: The sandbox's /tmp (a tmpfs) and the largest file the metric may write.
TMP_BYTES = 1 << 30
#: How many of the evaluation's files are bound in, and how much of the sandbox's output is kept for the log.
MAX_BIND_FILES = 10000
MAX_LOG = 64 << 10
#: The score pipe's message (JSON) and the longest string looked at as a path.
MAX_SCORE = 64 << 10
MAX_PATH = 4096
#: What of /etc the sandbox sees (the dynamic linker, fonts, certificates, time zones, user names, MIME types).
ETC = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "fonts",
    "ssl",
    "ca-certificates",
    "localtime",
    "timezone",
    "passwd",
    "group",
    "nsswitch.conf",
    "mime.types",
    "magic",
    "magic.mime",
    "alternatives",
    "ImageMagick-6",
)

_ctx = threading.local()


@contextlib.contextmanager
def files_from(*roots: str) -> Iterator[None]:
    """While this runs (on this thread), metric arguments that name files under ``roots`` are bound into
    the sandbox read-only. DesktopEnv.evaluate runs inside ``files_from(env.cache_dir)`` (install())."""
    prev = getattr(_ctx, "roots", ())
    _ctx.roots = prev + tuple(os.path.realpath(r) for r in roots if r)
    try:
        yield
    finally:
        _ctx.roots = prev


def _strings(obj: Any, depth: int = 0) -> Iterator[str]:
    if depth > 20:
        return
    if isinstance(obj, str):
        if 0 < len(obj) <= MAX_PATH and "\0" not in obj:
            yield obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _strings(k, depth + 1)
            yield from _strings(v, depth + 1)
    elif isinstance(obj, (list, tuple, set, frozenset)):
        for v in obj:
            yield from _strings(v, depth + 1)


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _file_binds(args: Any) -> list[tuple[str, str]]:
    """(source, destination) for each regular file that an argument names (a file, or a directory's files)
    under the evaluation's roots. The destination is the path as the metric will open it (relative paths
    against the harness's cwd, which is the sandbox's too); the source is its real path, which must be under
    a root: a symlink, or a string the session chose, never brings in anything else."""
    roots = getattr(_ctx, "roots", ())
    if not roots:
        return []
    cwd = os.getcwd()
    binds: dict[str, str] = {}

    def add(dest: str, src: str) -> None:
        if len(binds) >= MAX_BIND_FILES:
            raise MetricSandboxError(f"the metric's arguments name more than {MAX_BIND_FILES} files")
        binds[dest] = src

    for s in _strings(args):
        dest = os.path.abspath(os.path.join(cwd, s))
        try:
            src = os.path.realpath(dest)
            if not _under(src, roots):
                continue
            if os.path.isfile(src):
                add(dest, src)
            elif os.path.isdir(src):
                for d, _dirs, files in os.walk(src):  # does not follow links to directories
                    for f in files:
                        p = os.path.join(d, f)
                        if not os.path.islink(p) and os.path.isfile(p):
                            add(os.path.join(dest, os.path.relpath(p, src)), p)
        except (OSError, ValueError):
            continue
    return sorted((src, dest) for dest, src in binds.items())


def _python() -> tuple[str, list[str]]:
    """The sandbox's interpreter and sys.path, as real paths (bound at those paths, so no link in them
    leads out): the harness's interpreter and prefixes, its site-packages, the directories that hold
    ``drums`` and ``desktop_env`` (an OSWorld checkout with --osworld-src). Not the rest of sys.path:
    the harness's working directory or a test runner's root would bring in whatever lies there."""
    import desktop_env
    import drums

    prefixes = [os.path.realpath(p) for p in (sys.prefix, sys.exec_prefix, sys.base_prefix)]
    wanted = {
        os.path.realpath(os.path.dirname(os.path.dirname(os.path.abspath(m.__file__)))) for m in (drums, desktop_env)
    }
    out: list[str] = []
    for p in sys.path:
        if not p or not os.path.isabs(p) or not os.path.isdir(p):
            continue
        r = os.path.realpath(p)
        if r in out or r.rstrip("/").endswith(os.path.join("drums", "_boot")):
            continue
        if r in wanted or _under(r, tuple(prefixes)) or os.path.basename(r) in ("site-packages", "dist-packages"):
            out.append(r)
    out += sorted(w for w in wanted if w not in out)
    exe = os.path.join(prefixes[0], "bin", os.path.basename(sys.executable))
    if not os.path.exists(exe):
        exe = os.path.realpath(sys.executable)
    return exe, out


def bwrap_argv(file_binds: list[tuple[str, str]], score_fd: int, timeout_s: float) -> list[str]:
    """The sandbox's command line (bubblewrap, then setpriv to the sandbox uid when the harness is root)."""
    bwrap = shutil.which("bwrap")
    if not bwrap:
        raise MetricSandboxError(
            "bubblewrap (bwrap) is not installed: desktop_env's metrics run in a bubblewrap sandbox "
            "(apt-get install bubblewrap; scripts/setup.sh installs it), or DRUMS_OSWORLD_SANDBOX=0 runs them in this process"
        )
    root = os.geteuid() == 0
    exe, pypath = _python()
    pyroots: list[str] = []
    for p in sorted({os.path.realpath(sys.prefix), *pypath}, key=len):
        if os.path.isdir(p) and not _under(p, ("/usr", *pyroots)):
            pyroots.append(p)
    a = [bwrap, "--die-with-parent", "--new-session"]
    a += ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
    if not root:
        a += ["--unshare-user"]
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": "/tmp",
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "PYTHONPATH": os.pathsep.join(pypath),
        "PYTHONDONTWRITEBYTECODE": "1",
        "DRUMS_OSWORLD_SANDBOX": "0",
        "DRUMS_METRIC_RLIMIT_AS": str(METRIC_MEMORY_MB << 20),
        "DRUMS_METRIC_RLIMIT_CPU": str(int(math.ceil(timeout_s))),
        "DRUMS_METRIC_RLIMIT_FSIZE": str(TMP_BYTES),
        # Per uid and host-wide: only meaningful for the sandbox's own uid, not the harness's.
        "DRUMS_METRIC_RLIMIT_NPROC": "512" if root else "0",
    }
    a += ["--clearenv"]
    for k, v in env.items():
        a += ["--setenv", k, v]
    a += ["--ro-bind", "/usr", "/usr"]
    for d in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        p = "/" + d
        if os.path.islink(p):
            a += ["--symlink", os.readlink(p), p]
        elif os.path.isdir(p):
            a += ["--ro-bind", p, p]
    for e in ETC:
        a += ["--ro-bind-try", "/etc/" + e, "/etc/" + e]
    a += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--size", str(TMP_BYTES), "--tmpfs", "/tmp"]
    # Mount points: bubblewrap makes missing parents, as root with mode 0700; the sandbox uid must traverse them.
    binds = [(p, p) for p in pyroots] + file_binds
    cwd = os.getcwd()
    covered = ["/usr", "/etc", "/proc", "/dev"]
    parents: set[str] = set()
    for _, dest in binds + [(cwd, cwd)]:
        d = os.path.dirname(dest) if dest != cwd else dest
        while d not in ("/", "") and not _under(d, tuple(covered)):
            parents.add(d)
            d = os.path.dirname(d)
    for d in sorted(parents, key=lambda x: (x.count("/"), x)):
        a += ["--perms", "0755", "--dir", d]
    # Metrics may write next to their files, as in OSWorld's harness (compare_archive unpacks each archive
    # into `<archive>_pred` / `_gold` beside it). Each directory that holds the evaluation's files is a
    # private tmpfs of its own, writable by the sandbox's uid and bounded like /tmp; the files are bound
    # into it below, and nothing written there reaches the host.
    writable: list[str] = []
    for d in sorted({os.path.dirname(dest) for _, dest in file_binds}, key=lambda x: (x.count("/"), x)):
        # /tmp is one already; the system's and Python's directories stay read-only.
        if d in ("/", "", "/tmp") or _under(d, ("/usr", "/etc", "/proc", "/dev", *pyroots, *writable)):
            continue
        writable.append(d)
        a += ["--perms", "1777", "--size", str(TMP_BYTES), "--tmpfs", d]
    # The tmpfs hides the folders made above inside it: make them again, writable like their tmpfs.
    for d in sorted(parents, key=lambda x: (x.count("/"), x)):
        if any(d != w and _under(d, (w,)) for w in writable):
            a += ["--perms", "1777", "--dir", d]
    for src, dest in sorted(binds, key=lambda b: (b[1].count("/"), b[1])):
        a += ["--ro-bind", src, dest]
    a += ["--chdir", cwd]
    a += ["--"]
    if root:
        u = str(SANDBOX_UID)
        a += [
            "setpriv",
            f"--reuid={u}",
            f"--regid={u}",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--no-new-privs",
            "--",
        ]
    a += [exe, "-m", "drums.osworld_sandbox_runner", str(score_fd)]
    return a


def run_metric(name: str, args: tuple, kwargs: dict, timeout_s: Optional[float] = None) -> float:
    """Calls desktop_env's metric ``name`` in the sandbox; its score, or MetricSandboxError."""
    timeout_s = METRIC_TIMEOUT_S if timeout_s is None else timeout_s
    try:
        payload = pickle.dumps({"name": name, "args": args, "kwargs": kwargs})
    except Exception as e:
        raise MetricSandboxError(f"metric {name}: its arguments cannot be sent to the sandbox: {e}") from e
    staging = tempfile.mkdtemp(prefix="drums-metric-") if os.geteuid() == 0 else None
    try:
        binds = _file_binds((args, kwargs))
        if staging:
            binds = _readable_by_sandbox(binds, staging)
        return _run(name, payload, binds, timeout_s)
    finally:
        if staging:
            shutil.rmtree(staging, ignore_errors=True)


def _readable_by_sandbox(binds: list[tuple[str, str]], staging: str) -> list[tuple[str, str]]:
    """The sandbox's uid reads a bound file by the file's own mode (its directories are the sandbox's):
    a file that others may not read (a harness with umask 077) is bound from a 0644 copy instead."""
    out = []
    for i, (src, dest) in enumerate(binds):
        if not os.stat(src).st_mode & 0o004:
            copy = os.path.join(staging, str(i))
            shutil.copyfile(src, copy)
            os.chmod(copy, 0o644)
            src = copy
        out.append((src, dest))
    return out


def _run(name: str, payload: bytes, binds: list[tuple[str, str]], timeout_s: float) -> float:
    r, w = os.pipe()
    try:
        argv = bwrap_argv(binds, w, timeout_s)
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            pass_fds=(w,),
            start_new_session=True,
        )
    finally:
        os.close(w)
    tail = bytearray()

    def drain() -> None:  # the sandbox's output, for the log only; bounded, and read to the end
        assert proc.stdout is not None
        for chunk in iter(lambda: proc.stdout.read1(65536), b""):  # type: ignore[union-attr]
            tail.extend(chunk)
            del tail[:-MAX_LOG]

    t = threading.Thread(target=drain, daemon=True)
    t.start()
    try:
        assert proc.stdin is not None
        try:
            proc.stdin.write(payload)
            proc.stdin.close()
        except BrokenPipeError:
            pass
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)  # our own child's process group (bwrap; --die-with-parent takes the rest)
            proc.wait()
            raise MetricSandboxError(f"metric {name} timed out after {timeout_s:.0f} s in the sandbox") from None
        os.set_blocking(r, False)
        try:
            raw = os.read(r, MAX_SCORE)
        except BlockingIOError:
            raw = b""
    finally:
        os.close(r)
        t.join(timeout=5)
    out = bytes(tail).decode("utf-8", "replace")
    log.debug("sandboxed metric %s output: %s", name, out[-4000:])
    try:
        res = json.loads(raw) if raw else None
    except ValueError:
        res = None
    if isinstance(res, dict) and isinstance(res.get("score"), float) and math.isfinite(res["score"]):
        log.info("sandboxed metric %s: %s", name, res["score"])
        return res["score"]
    if isinstance(res, dict) and isinstance(res.get("error"), str):
        raise MetricSandboxError(f"metric {name}: {res['error']}")
    raise MetricSandboxError(f"metric {name}: no score from the sandbox (exit {code}): {out[-1000:]}")


def _sandboxed(name: str, upstream: Any) -> Any:
    @functools.wraps(upstream)
    def metric(*args, **kwargs):
        return run_metric(name, args, kwargs)

    metric.__drums_sandboxed__ = True  # type: ignore[attr-defined]
    return metric


# --------------------------------------------------------------------- check_python_file_by_test_suite: a session

#: Files of the test's directory copied into the sandbox (bytes, total).
MAX_COPY = 64 << 20
RUN_TIMEOUT_MS = int(os.environ.get("DRUMS_OSWORLD_SANDBOX_TIMEOUT_MS", "120000"))
MARK = "DRUMS-SANDBOX-SCORE "

# The test's process, as the desktop user: upstream's steps and result mapping; the score goes to the fd in argv[3].
_TEST = r"""
import importlib.util, json, math, os, sys
test_file, fn, out = sys.argv[1], sys.argv[2], os.fdopen(int(sys.argv[3]), "w")
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
out.write(json.dumps(s))
out.close()
"""

# The runner, as root-in-session (`python3 -I`: nothing from the test's directory is imported): starts the test
# as the desktop user with its output on stderr and a pipe for its score, and prints the score line on its own
# stdout, which the test's process does not hold and, as another uid, cannot open through /proc.
_RUNNER = (
    r"""
import json, math, os, subprocess, sys
test_file, fn, timeout_s = sys.argv[1], sys.argv[2], float(sys.argv[3])
r, w = os.pipe()
env = dict(os.environ, HOME="/home/user", USER="user", LOGNAME="user")
child = subprocess.Popen(
    ["setpriv", "--reuid=user", "--regid=user", "--init-groups", "--", sys.executable, "-c", sys.argv[4], test_file, fn, str(w)],
    stdout=2, stderr=2, pass_fds=(w,), env=env, cwd="/home/user", start_new_session=True)
os.close(w)
try:
    child.wait(timeout=timeout_s)
except subprocess.TimeoutExpired:
    os.killpg(child.pid, 9)
    child.wait()
os.set_blocking(r, False)
try:
    raw = os.read(r, 4096)
except BlockingIOError:
    raw = b""
try:
    v = float(json.loads(raw))
    s = v if math.isfinite(v) else 0.0
except (ValueError, TypeError):
    print("the test process exited with %s and no score" % child.returncode, file=sys.stderr)
    s = 0.0
print("""
    + repr(MARK)
    + r""" + json.dumps(s))
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
            r = s.exec(
                [
                    "python3",
                    "-I",
                    "-c",
                    _RUNNER,
                    f"{work}/{os.path.basename(test_file)}",
                    str(fn),
                    str(max(1, RUN_TIMEOUT_MS // 1000 - 10)),
                    _TEST,
                ],
                root=True,
                cwd="/",
                timeout_ms=RUN_TIMEOUT_MS,
            )
        finally:
            s.destroy()
    out = r.get("stdout") or ""
    if r.get("timedOut"):
        log.error("the test suite timed out in the sandbox after %d ms", RUN_TIMEOUT_MS)
        return 0.0
    # Only the runner (root-in-session) writes this stdout; the test's own output is on stderr.
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


def install() -> None:
    """Replaces every metric in desktop_env's metrics package (DesktopEnv looks them up there by name),
    and makes DesktopEnv.evaluate bind the env's cache directory's files into the sandbox."""
    from desktop_env.evaluators import metrics
    import desktop_env.desktop_env as de

    for name, fn in list(vars(metrics).items()):
        if getattr(fn, "__drums_sandboxed__", False) or not inspect.isfunction(fn) or name.startswith("_"):
            continue
        if name == "check_python_file_by_test_suite":
            SANDBOXED[name] = check_python_file_by_test_suite
        elif (getattr(fn, "__module__", "") or "").startswith("desktop_env.evaluators.metrics"):
            SANDBOXED[name] = _sandboxed(name, fn)
        else:
            continue
        setattr(metrics, name, SANDBOXED[name])
    evaluate = de.DesktopEnv.evaluate
    if getattr(evaluate, "__drums_sandboxed__", False):
        return

    @functools.wraps(evaluate)
    def evaluate_with_files(self, *a, **k):
        with files_from(getattr(self, "cache_dir", None) or ""):
            return evaluate(self, *a, **k)

    evaluate_with_files.__drums_sandboxed__ = True  # type: ignore[attr-defined]
    de.DesktopEnv.evaluate = evaluate_with_files
