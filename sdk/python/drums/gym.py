"""``drums.gym`` is ``drums.integrations.gym``: the same module object, under its older name."""

import sys

from .integrations import gym as _module

sys.modules[__name__] = _module
