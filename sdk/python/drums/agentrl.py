"""``drums.agentrl`` is ``drums.integrations.agentrl``: the same module object, under its older name."""

import sys

from .integrations import agentrl as _module

sys.modules[__name__] = _module
