"""Placeholders for heavy optional packages desktop_env imports at module level (see drums.osworld)."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types

#: Packages desktop_env imports at module level that osworld-deps.txt may lack (easyocr pulls torch).
OPTIONAL_HEAVY = (
    "easyocr",
    "librosa",
    "cv2",
    "skimage",
    "acoustid",
    "fastdtw",
    "scipy",
    "fitz",
    "borb",
    "formulas",
    "imagehash",
    "pdfplumber",
    "torch",
)


class _MissingModule(types.ModuleType):
    def __init__(self, name: str, root: str):
        super().__init__(name)
        self.__path__ = []  # a package, so submodule imports resolve through the finder
        self._root = root

    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _MissingAttr(f"{self.__name__}.{attr}", self._root)


class _MissingAttr:
    def __init__(self, name: str, root: str):
        self._name, self._root = name, root

    def _fail(self, *a, **k):
        raise ModuleNotFoundError(
            f"{self._name} needs the optional package '{self._root}', which is not installed "
            f"(drums.osworld installs desktop-env without its heavy dependencies; pip install it to use this metric)"
        )

    __call__ = _fail

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _MissingAttr(f"{self._name}.{attr}", self._root)


class OptionalFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, roots):
        self.roots = set(roots)
        self.missing = set()

    def find_spec(self, fullname, path, target=None):
        root = fullname.split(".")[0]
        if root not in self.roots:
            return None
        if root not in self.missing:
            # Defer to the real package when it is installed.
            sys.meta_path.remove(self)
            try:
                real = importlib.util.find_spec(root)
            finally:
                sys.meta_path.insert(0, self)
            if real is not None:
                self.roots.discard(root)
                return None
            self.missing.add(root)
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        return _MissingModule(spec.name, spec.name.split(".")[0])

    def exec_module(self, module):
        pass


def install_finder(roots) -> "OptionalFinder":
    """Puts one OptionalFinder first on sys.meta_path (or returns the one already there)."""
    for f in sys.meta_path:
        if isinstance(f, OptionalFinder):
            f.roots |= set(roots) - f.missing
            return f
    f = OptionalFinder(roots)
    sys.meta_path.insert(0, f)
    return f


def cannot_import_desktop_env(e: BaseException) -> str:
    """The one line ``drums osworld run|assets`` prints when desktop_env does not import (a checkout
    given with --osworld-src whose requirements are not installed, say), instead of a traceback."""
    import os

    src = os.environ.get("DRUMS_OSWORLD_SRC")
    return (
        f"drums osworld: cannot import desktop_env{f' from --osworld-src {src}' if src else ''}: "
        f"{type(e).__name__}: {e} (install what it needs into {sys.executable}'s environment, "
        f"e.g. pip install -r {src or '<checkout>'}/requirements.txt)"
    )
