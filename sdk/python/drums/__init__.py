"""Drums: isolated desktop sessions for computer-use agents (Python client).

``drums.Client`` / ``drums.AsyncClient`` talk to a Drums daemon; ``drums.gym.DesktopEnv``
is a gymnasium environment over one session; ``drums.errors`` holds typed exceptions
rebuilt from the API's error codes; ``drums.models`` holds TypedDicts of the API's JSON
bodies, generated from the spec (protocol/openapi.yaml). ``SessionInfo`` is the spec's
``Session`` (what ``Session.info`` holds), renamed here so it does not clash with the
``Session`` handle class.
"""

from . import _models as models
from . import errors
from ._models import (
    A11yNode,
    A11yTree,
    Action,
    ActionResult,
    ActionsRequest,
    ActionsResponse,
    ExecRequest,
    ExecResult,
    FileList,
    FileStat,
    FileStatResult,
    FileWritten,
    ScreenshotOptions,
    SessionSpec,
    WindowsView,
)
from ._models import Session as SessionInfo
from .client import AsyncClient, AsyncFiles, AsyncSession, Client, Files, Session
from .errors import DrumsError

__version__ = "0.1.0"
__all__ = [
    "Client",
    "AsyncClient",
    "Session",
    "AsyncSession",
    "Files",
    "AsyncFiles",
    "DrumsError",
    "errors",
    "models",
    "__version__",
    "SessionInfo",
    "SessionSpec",
    "ExecRequest",
    "ExecResult",
    "Action",
    "ActionsRequest",
    "ActionsResponse",
    "ActionResult",
    "ScreenshotOptions",
    "A11yNode",
    "A11yTree",
    "WindowsView",
    "FileStat",
    "FileStatResult",
    "FileList",
    "FileWritten",
]
