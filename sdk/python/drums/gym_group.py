"""``drums.gym_group`` is ``drums.integrations.gym_group``: the same module object, under its older name."""

import sys

from .integrations import gym_group as _module

sys.modules[__name__] = _module
