"""Typed exceptions, rebuilt from the error code table in protocol/openapi.yaml.

Every API error carries a stable lower_snake ``code``. ``error_from_response``
turns an error body into the most specific exception: a class per code
(``StaleGeneration``, ``SessionNotFound``, ...), each a subclass of a class per
HTTP status family (``Conflict``, ``NotFound``, ...), all subclasses of
``DrumsError``. The per-code classes are generated from ``_codes.ERROR_CODES``
(itself generated from the spec by scripts/gen-protocol.ts).
"""

from __future__ import annotations

from typing import Any

from ._codes import ERROR_CODES


class DrumsError(Exception):
    """An error answered by the Drums API (or a transport failure, status 0)."""

    code: str = "error"
    status: int = 0

    def __init__(
        self, message: str, *, code: str | None = None, status: int | None = None, details: dict[str, Any] | None = None
    ):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status
        self.details: dict[str, Any] = details or {}

    @property
    def field(self) -> str | None:
        """The failing field of a validation error."""
        f = self.details.get("field")
        return f if isinstance(f, str) else None

    def __str__(self) -> str:
        return f"{self.code} ({self.status}): {self.message}"


class BadRequest(DrumsError):
    status = 400


class Unauthorized(DrumsError):
    status = 401


class Forbidden(DrumsError):
    status = 403


class NotFound(DrumsError):
    status = 404


class MethodNotAllowed(DrumsError):
    status = 405


class Conflict(DrumsError):
    status = 409


class Gone(DrumsError):
    status = 410


class PayloadTooLarge(DrumsError):
    status = 413


class UnsupportedMediaType(DrumsError):
    status = 415


class TooManyRequests(DrumsError):
    status = 429


class ServerError(DrumsError):
    status = 500


class Unavailable(ServerError):
    status = 503


class Timeout(ServerError):
    status = 504


_BY_STATUS: dict[int, type[DrumsError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    405: MethodNotAllowed,
    409: Conflict,
    410: Gone,
    413: PayloadTooLarge,
    415: UnsupportedMediaType,
    429: TooManyRequests,
    503: Unavailable,
    504: Timeout,
}


def _base_for(status: int) -> type[DrumsError]:
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    return ServerError if status >= 500 else BadRequest if status >= 400 else DrumsError


def _class_name(code: str) -> str:
    name = "".join(part.capitalize() for part in code.split("_"))
    return name if name not in globals() else name + "Error"


#: code -> exception class, e.g. ERRORS["stale_generation"] is StaleGeneration.
ERRORS: dict[str, type[DrumsError]] = {}
for _code, (_status, _doc) in ERROR_CODES.items():
    _cls = type(
        _class_name(_code),
        (_base_for(_status),),
        {"code": _code, "status": _status, "__doc__": _doc, "__module__": __name__},
    )
    ERRORS[_code] = _cls
    globals()[_cls.__name__] = _cls

__all__ = [
    "DrumsError",
    "ERRORS",
    "error_from_response",
    *(c.__name__ for c in set(_BY_STATUS.values())),
    *(c.__name__ for c in ERRORS.values()),
]


def error_from_response(status: int, body: Any) -> DrumsError:
    """The typed exception for an error response (status and decoded JSON body, if any)."""
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict) and isinstance(err.get("code"), str):
        code = err["code"]
        cls = ERRORS.get(code, _base_for(status))
        details = err.get("details") if isinstance(err.get("details"), dict) else {}
        return cls(str(err.get("message", code)), code=code, status=status, details=details)
    return _base_for(status)(f"HTTP {status}", code=f"http_{status}", status=status)
