"""check_python_file_by_test_suite runs the agent's code in a throwaway Drums session: it scores
like desktop_env's own metric, and a hostile test file cannot touch the host."""

import os
import secrets
import textwrap

import drums.osworld  # noqa: F401  (registers; installs the sandboxed metric)
from drums import osworld_sandbox


def write_suite(d, agent_code: str, test_code: str):
    (d / "game.py").write_text(textwrap.dedent(agent_code))
    (d / "test_suite.py").write_text(textwrap.dedent(test_code))
    return str(d / "game.py"), str(d / "test_suite.py")


def test_desktop_env_uses_the_sandboxed_metric():
    from desktop_env.evaluators import metrics

    assert metrics.check_python_file_by_test_suite is osworld_sandbox.check_python_file_by_test_suite


def test_scores_like_upstream(daemon, tmp_path):
    from desktop_env.evaluators.metrics.vscode import check_python_file_by_test_suite as upstream

    agent, suite = write_suite(
        tmp_path,
        "def add(a, b):\n    return a + b\n",
        "from game import add\ndef test():\n    return add(2, 3) == 5\ndef half():\n    return 0.5\n",
    )
    got = osworld_sandbox.check_python_file_by_test_suite(agent, suite)
    assert got == upstream(agent, suite) == 1.0
    assert osworld_sandbox.check_python_file_by_test_suite(agent, suite, test_function_name="half") == 0.5
    (tmp_path / "game.py").write_text("def add(a, b):\n    return a - b\n")
    # (upstream, in this process, would still see the first game.py: it stays in sys.modules.)
    assert osworld_sandbox.check_python_file_by_test_suite(agent, suite) == 0.0
    (tmp_path / "game.py").write_text("def add(a, b) syntax error\n")
    assert osworld_sandbox.check_python_file_by_test_suite(agent, suite) == 0.0


def test_hostile_test_file_cannot_touch_the_host(daemon, tmp_path):
    secret = tmp_path / "host-secret.txt"
    secret.write_text(secrets.token_hex(8))
    marker = tmp_path / "written-by-agent-code"
    agent, suite = write_suite(
        tmp_path,
        "x = 1\n",
        f"""
        import os, subprocess
        def test():
            os.makedirs({str(tmp_path)!r}, exist_ok=True)
            open({str(marker)!r}, "w").write("pwned")      # lands in the session's filesystem, if anywhere
            try:
                leaked = open({str(secret)!r}).read()         # the host file is not in the session
            except OSError:
                leaked = None
            return leaked is None and os.path.exists({str(marker)!r})
    """,
    )
    os.remove(agent)  # the hostile suite does not need it
    score = osworld_sandbox.check_python_file_by_test_suite(None, suite)
    assert not marker.exists(), "the agent's code wrote on the host"
    # 1.0: the code ran, saw its own write, and could not read the host's file.
    assert score == 1.0
    assert len(secret.read_text()) == 16
