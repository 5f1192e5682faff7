"""The sync and async clients are twins: every public method of a sync class has an async
counterpart of the same name and signature, and back (issue 32; E2B keeps its twins in step by
hand, this test does it for Drums). Pure: builds the classes, sends nothing.

A difference that is not drift goes in RENAMED (same method, name differs) or ONLY (one side on
purpose, with the reason)."""

from __future__ import annotations

import asyncio
import inspect

import pytest

from drums import client as c

pytestmark = pytest.mark.fast  # pure: npm run check runs it

INFO = {"id": "s1", "generation": 1, "attempt": {"token": "t"}, "state": "ready", "screen": {"width": 8, "height": 8}}


def _public_vars(o: object) -> set[str]:
    return {k for k in vars(o) if not k.startswith("_")}


#: (sync class, async class) -> the public attributes each instance's __init__ set
ATTRS: dict[tuple[type, type], tuple[set[str], set[str]]] = {}


def _twins() -> list[tuple[type, type]]:
    """The clients and sessions, then every object they hang on a public attribute (sessions, pools,
    files, and whatever is added later), pair by pair. Builds them without the network. An attribute
    only one side has is kept in ATTRS (test_twins_have_the_same_attributes), not skipped."""
    sc, ac = c.Client("http://127.0.0.1:9", "t"), c.AsyncClient("http://127.0.0.1:9", "t")
    todo = [(sc, ac), (c.Session(sc, INFO), c.AsyncSession(ac, INFO))]  # type: ignore[arg-type]
    pairs: list[tuple[type, type]] = []
    try:
        while todo:
            s, a = todo.pop(0)
            pairs.append((type(s), type(a)))
            ps, pa = _public_vars(s), _public_vars(a)
            ATTRS[(type(s), type(a))] = (ps, pa)
            for k in sorted(ps & pa):
                v = getattr(s, k)
                if type(v).__module__.startswith("drums."):
                    todo.append((v, getattr(a, k)))
    finally:
        sc.close()
        asyncio.run(ac.aclose())
    return pairs


TWINS = _twins()

#: sync name -> async name
RENAMED = {"close": "aclose", "__enter__": "__aenter__", "__exit__": "__aexit__"}

#: (class, name): why only one side has it
ONLY: dict[tuple[type, str], str] = {}

#: How the async annotations name the async twins.
_ASYNC_NAMES = [("AsyncIterator", "Iterator"), *((a.__name__, s.__name__) for s, a in TWINS)]


def _members(cls: type) -> dict[str, object]:
    out = {}
    for name, v in inspect.getmembers(cls):
        # Methods and properties (a property one side computes and the other lacks is drift too).
        if (not name.startswith("_") or name in RENAMED or name in RENAMED.values()) and (
            callable(v) or isinstance(v, property)
        ):
            out[name] = v
    return out


def _norm(sig: inspect.Signature) -> str:
    s = str(sig)
    for a, b in _ASYNC_NAMES:
        s = s.replace(a, b)
    return s


@pytest.mark.parametrize("sync,aio", TWINS, ids=[s.__name__ for s, _ in TWINS])
def test_twins_have_the_same_methods(sync, aio):
    s_names = {RENAMED.get(n, n) for n in _members(sync) if (sync, n) not in ONLY}
    a_names = {n for n in _members(aio) if (aio, n) not in ONLY}
    assert sorted(s_names - a_names) == [], f"{aio.__name__} lacks what {sync.__name__} has"
    assert sorted(a_names - s_names) == [], f"{sync.__name__} lacks what {aio.__name__} has"


@pytest.mark.parametrize("sync,aio", TWINS, ids=[s.__name__ for s, _ in TWINS])
def test_twins_have_the_same_signatures(sync, aio):
    am = _members(aio)
    for name, f in _members(sync).items():
        g = am.get(RENAMED.get(name, name))
        if g is None:
            continue
        if isinstance(f, property) or isinstance(g, property):
            assert isinstance(f, property) and isinstance(g, property), f"{name}: a property on one side only"
            continue
        assert _norm(inspect.signature(f)) == _norm(inspect.signature(g)), f"{sync.__name__}.{name}"
        # The async side awaits: coroutines (or an async generator for events()).
        if name not in ("__init__",):
            assert inspect.iscoroutinefunction(g) or inspect.isasyncgenfunction(g), f"{aio.__name__}.{name}"
            assert not (inspect.iscoroutinefunction(f) or inspect.isasyncgenfunction(f)), f"{sync.__name__}.{name}"


def test_the_twins_found():
    names = {s.__name__ for s, _ in TWINS}
    assert {"Client", "Sessions", "Pools", "Session", "Files"} <= names, names
    for s, a in TWINS:
        assert a.__name__ == "Async" + s.__name__, (s, a)


@pytest.mark.parametrize("sync,aio", TWINS, ids=[s.__name__ for s, _ in TWINS])
def test_twins_have_the_same_attributes(sync, aio):
    """What __init__ sets (sessions, pools, episodes, files, url, id, ...), on every pair found."""
    ps, pa = ATTRS[(sync, aio)]
    assert sorted(ps - pa) == [], f"{aio.__name__} lacks attributes {sync.__name__} has"
    assert sorted(pa - ps) == [], f"{sync.__name__} lacks attributes {aio.__name__} has"


def test_the_package_exports_twins_together():
    """`from drums import X` works for a sync class exactly when it works for its async twin."""
    import drums

    for s, a in TWINS:
        assert (s.__name__ in drums.__all__) == (a.__name__ in drums.__all__), (s.__name__, a.__name__)
        for cls in (s, a):
            if cls.__name__ in drums.__all__:
                assert getattr(drums, cls.__name__) is cls
