"""The pure tests' tier rule, which scripts/test.sh relies on. check.ts (the fast tier) runs every test marked
`fast`; the python tier then leaves a file out when it is marked fast whole (`pytestmark = pytest.mark.fast`, the
line test.sh greps for) and runs the others with -m 'not fast'. A file whose every test is marked one by one would
then collect nothing (pytest's exit 5, a failure): such a file must carry the module mark instead. Pure: reads the
test files with ast."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast  # pure: npm run check runs it

HERE = Path(__file__).resolve().parent
MODULE_MARK = re.compile(r"^pytestmark = pytest\.mark\.fast\b", re.M)  # scripts/test.sh's grep


def _is_fast(d: ast.expr) -> bool:
    return ast.unparse(d) == "pytest.mark.fast"


def test_a_file_of_fast_tests_only_is_marked_whole():
    for f in sorted(HERE.glob("test_*.py")):
        src = f.read_text()
        if MODULE_MARK.search(src):
            continue
        tests = [
            n
            for n in ast.parse(src).body
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name.startswith("test_")
        ]
        fast = [n for n in tests if any(_is_fast(d) for d in n.decorator_list)]
        assert not tests or len(fast) < len(tests), f"{f.name}: every test is marked fast; mark the module instead"


def test_the_module_mark_is_what_pytest_sees():
    """The files test.sh leaves out are the ones whose every test pytest marks fast."""
    marked = [f for f in sorted(HERE.glob("test_*.py")) if MODULE_MARK.search(f.read_text())]
    assert {"test_errors.py", "test_parity.py", "test_tiers.py"} <= {f.name for f in marked}
    for f in marked:
        tree = ast.parse(f.read_text())
        marks = [
            n.value
            for n in tree.body
            if isinstance(n, ast.Assign) and [getattr(t, "id", None) for t in n.targets] == ["pytestmark"]
        ]
        assert len(marks) == 1 and _is_fast(marks[0]), f.name
