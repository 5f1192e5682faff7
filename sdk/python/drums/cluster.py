"""``drums.cluster`` is ``drums.integrations.cluster``: the same module object, under its older name."""

import sys

from .integrations import cluster as _module

sys.modules[__name__] = _module
