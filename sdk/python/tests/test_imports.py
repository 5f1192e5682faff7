"""The drums package has no import cycle (issue 32). Imports inside functions count too: the OSWorld
CLI once lived in drums.osworld and imported drums.osworld_group inside run_main, while
drums.osworld_group imports drums.osworld at its top. Imports under ``if TYPE_CHECKING:`` do not
count (they never run), nor those under ``if __name__ == "__main__":`` (they run in a module named
``__main__``, a copy apart from the one others import). Pure: reads the sources with ast, imports
nothing."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

PKG = Path(__file__).resolve().parents[1] / "drums"


def _name(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _run_time_nodes(tree: ast.AST):
    """Every node of the module but those under ``if TYPE_CHECKING:`` or ``if __name__ == "__main__":``
    (their ``else:`` runs)."""
    todo: list[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        yield node
        test = ast.unparse(node.test) if isinstance(node, ast.If) else ""
        if "TYPE_CHECKING" in test or test.replace("'", '"') == '__name__ == "__main__"':
            todo.extend(node.orelse)
        else:
            todo.extend(ast.iter_child_nodes(node))


def import_graph(pkg: Path = PKG) -> dict[str, set[str]]:
    """module -> the drums modules it imports (anywhere in it, at run time)."""
    files = {_name(p): p for p in pkg.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in files}
    for mod, path in files.items():
        here = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in _run_time_nodes(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = here.split(".")
                    up = up[: len(up) - (node.level - 1)]
                    base = ".".join([*up, base] if base else up)
                # `from . import x` and `from drums import x` name a module x, or a name in base.
                names = [base, *(f"{base}.{a.name}" for a in node.names)]
            else:
                continue
            for n in names:
                # A package is imported before any module in it: that edge closes no cycle.
                if n in graph and n != mod and not mod.startswith(n + "."):
                    graph[mod].add(n)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as [a, b, ..., a], or None (depth-first, deterministic)."""
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = "open"
        path.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == "open":
                return path[path.index(n) :] + [n]
            if n not in state and (c := visit(n)):
                return c
        path.pop()
        state[m] = "done"
        return None

    for m in sorted(graph):
        if m not in state and (c := visit(m)):
            return c
    return None


def test_the_graph_sees_imports_inside_functions():
    g = import_graph()
    assert "drums.osworld" in g["drums.osworld_group"]  # at the top
    assert "drums.osworld_group" in g["drums.osworld_cli"]  # inside run_main
    assert "drums.client" in g["drums.osworld"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_the_sdk_has_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])
