"""``drums.placement`` is ``drums.integrations.placement``: the same module object, under its older name."""

import sys

from .integrations import placement as _module

sys.modules[__name__] = _module
