"""drums.errors: the per-code classes are static (generated into drums/_errors.py from the spec by
scripts/gen-protocol.ts) and hang under the status class drums/_status_errors.py gives their status.
Pure: no daemon. `gen-protocol --check` (npm run check) keeps _errors.py in step with the spec; this
keeps the generator's status table in step with the Python one."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import drums
from drums import _errors, _status_errors, errors
from drums._codes import ERROR_CODES

pytestmark = pytest.mark.fast  # pure: npm run check runs it

GENERATED = Path(_errors.__file__)


def _static_classes() -> dict[str, str]:
    """class name -> code, read from the source the way a type checker does (no import-time magic)."""
    out: dict[str, str] = {}
    for node in ast.parse(GENERATED.read_text()).body:
        if isinstance(node, ast.ClassDef):
            for st in node.body:
                if isinstance(st, ast.Assign) and getattr(st.targets[0], "id", None) == "code":
                    out[node.name] = st.value.value  # type: ignore[attr-defined]
    return out


def test_every_spec_code_has_a_static_class():
    static = _static_classes()
    assert sorted(static.values()) == sorted(ERROR_CODES)
    for name, code in static.items():
        cls = getattr(errors, name)
        assert errors.ERRORS[code] is cls and name in errors.__all__
        assert (cls.code, cls.status) == (code, ERROR_CODES[code][0])
        assert cls.__doc__ and ERROR_CODES[code][1] in cls.__doc__


def test_each_class_sits_under_its_status_class():
    for code, (status, _doc) in ERROR_CODES.items():
        cls = errors.ERRORS[code]
        assert cls.__bases__ == (_status_errors.base_for(status),), (code, cls.__bases__)
        assert issubclass(cls, drums.DrumsError)
    assert issubclass(errors.SessionExpired, errors.Gone)
    assert issubclass(errors.RateLimited, errors.TooManyRequests)
    assert issubclass(errors.DisplayTimeout, errors.Timeout) and issubclass(errors.Timeout, errors.ServerError)


def test_no_code_class_shadows_a_status_class():
    status_names = {c.__name__ for c in _status_errors._BY_STATUS.values()} | {"DrumsError", "ServerError"}
    assert not status_names & set(_static_classes())
    assert errors.NotFoundError.__bases__ == (errors.NotFound,)


def test_error_from_response():
    e = errors.error_from_response(409, {"error": {"code": "stale_generation", "message": "m", "details": {"x": 1}}})
    assert type(e) is errors.StaleGeneration and e.details == {"x": 1} and str(e) == "stale_generation (409): m"
    e = errors.error_from_response(400, {"error": {"code": "invalid_spec", "message": "m", "details": {"field": "f"}}})
    assert isinstance(e, errors.InvalidSpec) and e.field == "f"
    # A code this SDK does not know yet: the status class, with the code kept.
    e = errors.error_from_response(409, {"error": {"code": "brand_new", "message": "m"}})
    assert type(e) is errors.Conflict and e.code == "brand_new"
    e = errors.error_from_response(502, "<html>")
    assert type(e) is errors.ServerError and e.code == "http_502"
