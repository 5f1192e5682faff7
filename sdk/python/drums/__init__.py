"""Drums: isolated desktop sessions for computer-use agents (Python client).

``drums.Client`` / ``drums.AsyncClient`` talk to a Drums daemon; ``drums.gym.DesktopEnv``
is a gymnasium environment over one session; ``drums.errors`` holds typed exceptions
rebuilt from the API's error codes.
"""
from . import errors
from .client import AsyncClient, AsyncSession, Client, Files, Session
from .errors import DrumsError

__version__ = "0.1.0"
__all__ = ["Client", "AsyncClient", "Session", "AsyncSession", "Files", "DrumsError", "errors", "__version__"]
