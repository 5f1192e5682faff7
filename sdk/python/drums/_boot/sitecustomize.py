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
_WATCHED = ("desktop_env", _TARGET)


def _cannot_import(name: str, origin, e: BaseException):
    """A desktop_env that cannot be imported (a checkout whose requirements are not installed in this
    Python, say) ends the process with one line that says why, as `drums osworld run` does, instead
    of a traceback from inside the script's imports."""
    src = os.environ.get("DRUMS_OSWORLD_SRC")
    print(
        f"drums osworld exec: cannot import {name} ({origin}): {type(e).__name__}: {e} "
        f"(install what it needs into {sys.executable}'s environment, e.g. pip install -r "
        f"{src or '<checkout>'}/requirements.txt, or set DRUMS_PYTHON to a Python that has it)",
        file=sys.stderr,
        flush=True,
    )
    raise SystemExit(2)


class _AfterImport(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname not in _WATCHED:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        real = spec.loader.exec_module

        def exec_module(module, real=real, name=fullname, origin=spec.origin):
            try:
                real(module)
            except Exception as e:
                _cannot_import(name, origin, e)
            if name != _TARGET:
                return
            sys.meta_path[:] = [f for f in sys.meta_path if f is not self]
            try:
                import drums.osworld

                drums.osworld.register()
            except Exception as e:
                _cannot_import("desktop_env's providers for drums", origin, e)

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
