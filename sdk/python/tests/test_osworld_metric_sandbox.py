"""Issue 27, finding 5: desktop_env's metrics run in sandboxes, not in the harness process.

- A metric that ``eval``s session output (``check_gnome_favorite_apps``), driven end to end through the
  real DesktopEnv on a Drums session: the agent's step leaves a Python expression where the evaluator's
  getter reads, and the expression writes a marker file on the host. It must not appear.
- The session sandbox of ``check_python_file_by_test_suite``: the agent's code printing the score line
  and exiting does not make a score.
- The metric process cannot write the score channel (it tries every fd and every /proc/*/fd).
- Files reach the sandbox only from the evaluation's own directory: not another host file, not through a link.
"""

import json
import os
import stat
import textwrap
import time

import pytest

import drums.osworld  # noqa: F401  (registers the provider; installs the sandboxed metrics)
from drums import osworld_sandbox


def test_every_metric_is_replaced():
    import inspect

    from desktop_env.evaluators import metrics

    fns = {n: f for n, f in vars(metrics).items() if inspect.isfunction(f) and not n.startswith("_")}
    assert len(fns) > 100
    left = [
        n
        for n, f in fns.items()
        if not getattr(f, "__drums_sandboxed__", False) and n != "check_python_file_by_test_suite"
    ]
    assert left == [], f"metrics still run in the harness: {left}"
    assert metrics.check_python_file_by_test_suite is osworld_sandbox.check_python_file_by_test_suite


def test_gnome_favorite_apps_eval_of_session_output_writes_nothing_on_the_host(daemon, tmp_path):
    from desktop_env.desktop_env import DesktopEnv

    marker_dir = tmp_path / "host-only"
    marker_dir.mkdir()
    os.chmod(tmp_path, 0o777)  # even a world-writable host directory: the sandbox does not see it
    os.chmod(marker_dir, 0o777)
    marker = marker_dir / "written-by-session-output"
    # What the session prints where the evaluator reads (gsettings' output in the real task).
    expr = (
        f"(__import__('os').makedirs({str(marker_dir)!r}, exist_ok=True), "
        f"open({str(marker)!r}, 'w').write('pwned'), ['evil.desktop'])[-1]"
    )
    task = {
        "id": "drums-test-gnome-eval",
        "instruction": "a check_gnome_favorite_apps-style evaluation",
        "config": [],
        "evaluator": {
            "func": "check_gnome_favorite_apps",
            "result": {"type": "vm_command_line", "command": "cat /home/user/favorites.txt", "shell": True},
            "expected": {"type": "rule", "rules": {"expected": ["google-chrome.desktop"]}},
        },
    }
    cache = tmp_path / "cache"
    cache.mkdir()
    env = DesktopEnv(provider_name="drums", action_space="pyautogui", require_a11y_tree=False, cache_dir=str(cache))
    try:
        env.reset(task_config=task)
        # The agent's action (desktop_env sends it to /execute as the desktop user).
        env.step(f"open('/home/user/favorites.txt', 'w').write({expr!r})", 0)
        score = env.evaluate()
    finally:
        env.close()
    assert not marker.exists(), "a metric eval'd session output on the host"
    assert score == 0  # the expression ran, in the sandbox, and named the wrong apps


def test_printed_score_line_is_not_a_score(daemon, tmp_path):
    # The agent's module, imported by the task's test: prints the score line the old sandbox read, and exits.
    (tmp_path / "game.py").write_text(
        textwrap.dedent(
            f"""
            import os, sys
            print("\\n{osworld_sandbox.MARK}1.0", flush=True)
            sys.stderr.write("{osworld_sandbox.MARK}1.0\\n")
            os._exit(0)
            """
        )
    )
    (tmp_path / "test_suite.py").write_text("import game\ndef test():\n    return False\n")
    score = osworld_sandbox.check_python_file_by_test_suite(str(tmp_path / "game.py"), str(tmp_path / "test_suite.py"))
    assert score == 0.0


FORGE = textwrap.dedent(
    """
    import glob, json, os
    fake = json.dumps({"score": 1.0}).encode()
    print('{"score": 1.0}')
    for fd in range(3, 1024):
        try:
            os.write(fd, fake)
        except OSError:
            pass
    for p in glob.glob("/proc/*/fd/*"):
        try:
            with open(p, "wb") as f:
                f.write(fake)
        except OSError:
            pass
    """
)


def test_metric_process_cannot_write_the_score_channel():
    # The expression writes the score message to every fd it has and every fd in /proc, prints it, then
    # returns the wrong apps. Its writes garble its own result pipe (an error, no score) but never reach
    # the runner's score pipe: whatever comes back, it is not the forged 1.0.
    expr = f"(exec({FORGE!r}), ['evil.desktop'])[-1]"
    try:
        got = osworld_sandbox.run_metric("check_gnome_favorite_apps", (expr, {"expected": ["a.desktop"]}), {})
    except osworld_sandbox.MetricSandboxError as e:
        assert "without a result" in str(e)
        got = None
    assert got != 1.0


def test_only_the_evaluations_files_reach_the_sandbox(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)  # like DesktopEnv's private copy: not traversable by the sandbox's uid
    (cache / "actual.txt").write_text("hello\n")
    (cache / "expected.txt").write_text("hello\n")
    secret = tmp_path / "secret.txt"
    secret.write_text("hello\n")
    os.chmod(secret, 0o644)
    (cache / "link.txt").symlink_to(secret)
    (cache / "private.txt").write_text("hello\n")
    os.chmod(cache / "private.txt", 0o600)  # a harness with umask 077: still readable by the metric
    expected = str(cache / "expected.txt")
    with osworld_sandbox.files_from(str(cache)):
        for mine in ("actual.txt", "private.txt"):
            assert osworld_sandbox.run_metric("compare_text_file", (str(cache / mine), expected), {}) == 1.0
        # A host file outside the evaluation's directory, named directly or through a link in it, is not there.
        for other in (secret, cache / "link.txt"):
            with pytest.raises(osworld_sandbox.MetricSandboxError, match="FileNotFoundError"):
                osworld_sandbox.run_metric("compare_text_file", (str(other), str(cache / "expected.txt")), {})
    # Outside an evaluation no file is bound at all.
    with pytest.raises(osworld_sandbox.MetricSandboxError, match="FileNotFoundError"):
        osworld_sandbox.run_metric("compare_text_file", (str(cache / "actual.txt"), str(cache / "expected.txt")), {})
    assert stat.S_IMODE(os.stat(cache).st_mode) == 0o700


def test_a_metric_that_hangs_is_stopped():
    t0 = time.monotonic()
    expr = "(__import__('time').sleep(600), [])[-1]"
    with pytest.raises(osworld_sandbox.MetricSandboxError, match="timed out"):
        osworld_sandbox.run_metric("check_gnome_favorite_apps", (expr, {"expected": []}), {}, timeout_s=20)
    assert time.monotonic() - t0 < 60


def test_the_sandbox_has_no_token_no_daemon_and_no_host_uid(daemon):
    # Reports what it sees through the metric's error message (the one thing it sends back besides a number).
    probe = textwrap.dedent(
        f"""
        import os, socket, json
        seen = {{"uid": os.getuid(), "token_env": any("TOKEN" in k for k in os.environ),
                 "state_dir": os.path.exists({daemon.state_dir!r})}}
        host, port = {daemon.url.split("//")[1].split(":")[0]!r}, {int(daemon.url.rsplit(":", 1)[1].split("/")[0])}
        try:
            socket.create_connection((host, port), timeout=2)
            seen["daemon"] = "reached"
        except OSError as e:
            seen["daemon"] = type(e).__name__
        raise RuntimeError("SEEN" + json.dumps(seen))
        """
    )
    with pytest.raises(osworld_sandbox.MetricSandboxError) as e:
        osworld_sandbox.run_metric("check_gnome_favorite_apps", (f"exec({probe!r})", {"expected": []}), {})
    seen = json.loads(str(e.value).split("SEEN", 1)[1])
    assert seen["uid"] == (osworld_sandbox.SANDBOX_UID if os.geteuid() == 0 else os.geteuid())
    assert seen["token_env"] is False
    assert seen["state_dir"] is False
    assert seen["daemon"] != "reached"


def test_a_metric_may_write_next_to_its_files_in_the_sandbox_only(tmp_path):
    """compare_archive (multi_apps 5df7b33a, chrome's archive tasks) unpacks each archive into a folder next
    to it (``<pred>_pred``, ``<gold>_gold``), as it may in OSWorld's harness. In the sandbox that folder is in
    a private tmpfs over the evaluation's directory: the metric scores, and nothing is written on the host."""
    import zipfile

    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    for name, text in (("pred.zip", "same\n"), ("gold.zip", "same\n"), ("other.zip", "different\n")):
        with zipfile.ZipFile(cache / name, "w") as z:
            z.writestr("book/a.txt", text)
    before = sorted(os.listdir(cache))
    with osworld_sandbox.files_from(str(cache)):
        kw = {"file_path": "book", "file_type": "text"}
        assert (
            osworld_sandbox.run_metric("compare_archive", (str(cache / "pred.zip"), str(cache / "gold.zip")), kw) == 1.0
        )
        assert (
            osworld_sandbox.run_metric("compare_archive", (str(cache / "other.zip"), str(cache / "gold.zip")), kw)
            == 0.0
        )
    assert sorted(os.listdir(cache)) == before  # no pred/gold folders on the host
