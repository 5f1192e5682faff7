"""``drums.ray`` is ``drums.integrations.ray``: the same module object, under its older name."""

import sys

from .integrations import ray as _module

sys.modules[__name__] = _module
