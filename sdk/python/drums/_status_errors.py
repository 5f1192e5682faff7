"""The exception tree's roots: ``DrumsError`` and one class per HTTP status family.

The per-code classes under them are generated into ``_errors.py`` (scripts/gen-protocol.ts,
whose ``PY_STATUS_BASES`` names the classes here); ``drums.errors`` is the public face of both.
"""

from __future__ import annotations

from typing import Any


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


def base_for(status: int) -> type[DrumsError]:
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    return ServerError if status >= 500 else BadRequest if status >= 400 else DrumsError
