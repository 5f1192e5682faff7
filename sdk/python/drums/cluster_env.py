"""``drums.cluster_env`` is ``drums.integrations.cluster_env``: the same module object, under its older name."""

import sys

from .integrations import cluster_env as _module

sys.modules[__name__] = _module
