"""Loaded at interpreter start-up when this directory is first on PYTHONPATH (``drums osworld exec``),
so every process of an OSWorld run script, multiprocessing children included, gets the drums provider:

- placeholders for the heavy packages desktop_env imports but osworld-deps.txt lacks (drums._optional);
- once ``desktop_env.desktop_env`` has been imported, ``drums.osworld.register()`` runs;
- an ``argparse`` option ``--provider_name`` with a fixed ``choices`` list also accepts ``drums``
  (OSWorld's run scripts list their providers there).

Any other ``sitecustomize`` further down ``sys.path`` is loaded afterwards.
"""

import argparse
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

_TARGET = "desktop_env.desktop_env"


class _AfterImport(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname != _TARGET:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        real = spec.loader.exec_module

        def exec_module(module, real=real):
            real(module)
            sys.meta_path[:] = [f for f in sys.meta_path if f is not self]
            import drums.osworld

            drums.osworld.register()

        spec.loader.exec_module = exec_module
        return spec


if not any(isinstance(f, _AfterImport) for f in sys.meta_path) and _TARGET not in sys.modules:
    from drums._optional import OPTIONAL_HEAVY, install_finder

    install_finder(OPTIONAL_HEAVY)  # desktop_env imports them at module level, before register() can run
    sys.meta_path.insert(0, _AfterImport())

if not getattr(argparse.ArgumentParser.add_argument, "_drums", False):
    _add = argparse.ArgumentParser.add_argument

    def add_argument(self, *names, **kw):
        choices = kw.get("choices")
        if "--provider_name" in names and choices is not None and "drums" not in choices:
            kw["choices"] = list(choices) + ["drums"]
        return _add(self, *names, **kw)

    add_argument._drums = True
    argparse.ArgumentParser.add_argument = add_argument


def _chain():
    """Runs the next sitecustomize on sys.path (the one this file shadows), if any."""
    here = os.path.dirname(os.path.abspath(__file__))
    for d in sys.path:
        if not d or os.path.abspath(d) == here:
            continue
        p = os.path.join(d, "sitecustomize.py")
        if os.path.isfile(p):
            spec = importlib.util.spec_from_file_location("_drums_next_sitecustomize", p)
            if spec and spec.loader:
                spec.loader.exec_module(importlib.util.module_from_spec(spec))
            return


if __name__ == "sitecustomize":
    _chain()
