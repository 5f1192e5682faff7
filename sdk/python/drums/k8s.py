"""``drums.k8s`` is ``drums.integrations.k8s``: the same module object, under its older name."""

import sys

from .integrations import k8s as _module

sys.modules[__name__] = _module
