"""Under CI=true a skipped test is a failure (conftest.py), unless made with _data.not_here(why);
outside CI a skip stays a skip. Run in a pytest of its own, with this directory's conftest.py."""

import os
import sys
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.fast  # pure (inner pytest runs, no daemon): npm run check runs it

HERE = Path(__file__).resolve().parent

TESTS = """
import pytest
from _data import missing, not_here

def test_plain_skip():
    pytest.skip("plain reason")

@pytest.mark.skipif(True, reason="mark reason")
def test_mark_skip():
    pass

def test_importorskip():
    pytest.importorskip("drums_no_such_module")

def test_missing():
    missing("no frobnicator here (apt install frobnicator)")

def test_not_here():
    not_here("needs a GPU")

def test_runs():
    pass
"""


def _run(pytester, monkeypatch, ci: bool):
    pytester.makeconftest((HERE / "conftest.py").read_text())
    pytester.makepyfile(test_needs=TESTS)
    if ci:
        monkeypatch.setenv("CI", "true")
    else:
        monkeypatch.delenv("CI", raising=False)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(HERE), *sys.path]))
    return pytester.runpytest_subprocess("-ra", "-p", "no:cacheprovider")


def test_outside_ci_skips_stay_skips(pytester, monkeypatch):
    _run(pytester, monkeypatch, ci=False).assert_outcomes(passed=1, skipped=5)


def test_under_ci_a_skip_is_a_failure_unless_not_here(pytester, monkeypatch):
    r = _run(pytester, monkeypatch, ci=True)
    # plain, importorskip and missing() fail; the skipif mark fails at setup (an error); not_here stays a skip.
    r.assert_outcomes(passed=1, skipped=1, failed=3, errors=1)
    out = r.stdout.str()
    assert "CI=true and a test cannot run: no frobnicator here (apt install frobnicator)" in out
    assert "CI=true, and this test was skipped: plain reason." in out
    assert "CI=true, and this test was skipped: mark reason." in out
    assert "not run on this kind of host: needs a GPU" in out
