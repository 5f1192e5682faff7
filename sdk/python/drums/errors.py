"""Typed exceptions, one per error code of protocol/openapi.yaml.

Every API error carries a stable lower_snake ``code``. ``error_from_response``
turns an error body into the most specific exception: a class per code
(``StaleGeneration``, ``SessionNotFound``, ...), each a subclass of a class per
HTTP status family (``Conflict``, ``NotFound``, ...), all subclasses of
``DrumsError``. The status families are written by hand (``_status_errors.py``);
the per-code classes are generated from the spec into ``_errors.py`` by
scripts/gen-protocol.ts, as static classes so type checkers and IDEs see them.
"""

from __future__ import annotations

from typing import Any

from . import _errors
from ._errors import *  # noqa: F403  (the per-code classes; _errors.__all__ names them)
from ._errors import ERRORS
from ._status_errors import (
    BadRequest,
    Conflict,
    DrumsError,
    Forbidden,
    Gone,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    ServerError,
    Timeout,
    TooManyRequests,
    Unauthorized,
    Unavailable,
    UnsupportedMediaType,
    base_for,
)

__all__ = [
    "DrumsError",
    "error_from_response",
    "BadRequest",
    "Unauthorized",
    "Forbidden",
    "NotFound",
    "MethodNotAllowed",
    "Conflict",
    "Gone",
    "PayloadTooLarge",
    "UnsupportedMediaType",
    "TooManyRequests",
    "ServerError",
    "Unavailable",
    "Timeout",
]
__all__ += _errors.__all__


def error_from_response(status: int, body: Any) -> DrumsError:
    """The typed exception for an error response (status and decoded JSON body, if any)."""
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict) and isinstance(err.get("code"), str):
        code = err["code"]
        cls = ERRORS.get(code, base_for(status))
        details = err.get("details") if isinstance(err.get("details"), dict) else {}
        return cls(str(err.get("message", code)), code=code, status=status, details=details)
    return base_for(status)(f"HTTP {status}", code=f"http_{status}", status=status)
