"""The package's import graph has no circle, none hidden in a function-level import, and its
layers hold (docs/design.md, "The layers"): the bottom modules import nothing of the package's
upper layers, `node.py` imports no op, the op layer imports no engine, nn/optim stay above.

Read from the source (every `import` statement, wherever it is: module level, in a function,
under `if TYPE_CHECKING`), so an import that would only run later counts as an edge too.
"""
from __future__ import annotations

import ast
import pathlib


ROOT = pathlib.Path(__file__).resolve().parents[1]
PKG = "parallel_autograd"


def _modules() -> dict:
    out = {}
    for f in (ROOT / PKG).rglob("*.py"):
        parts = list(f.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = f
    return out


def _target(mod: str, is_pkg: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = mod.split(".")
    if not is_pkg:
        base = base[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph() -> tuple[dict, list]:
    """({module: set of package modules it imports}, [(module, line, target) of imports
    inside functions])."""
    mods = _modules()
    edges, nested = {m: set() for m in mods}, []
    for mod, path in mods.items():
        tree = ast.parse(path.read_text())
        is_pkg = path.name == "__init__.py"
        funcs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef,
                                                              ast.AsyncFunctionDef))]
        inner = {id(n) for f in funcs for n in ast.walk(f) if n is not f}
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.ImportFrom):
                base = _target(mod, is_pkg, node)
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    targets.append(full if full in mods else base)
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            for t in targets:
                if t in mods and t != mod:
                    edges[mod].add(t)
                    if id(node) in inner:
                        nested.append((mod, node.lineno, t))
    return edges, nested


def circles(edges: dict) -> list:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def _package_inits(edges: dict) -> dict:
    """Edges without those into a package's own `__init__` from its submodules (importing
    `pkg.sub` runs `pkg/__init__.py` first: that is not a dependency of `sub` on `pkg`)."""
    return {m: {t for t in ts if not m.startswith(t + ".")} for m, ts in edges.items()}


def test_no_import_circle_function_level_imports_included():
    edges, _ = import_graph()
    found = circles(_package_inits(edges))
    assert not found, "import circles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_no_package_import_inside_a_function():
    _, nested = import_graph()
    assert not nested, "imports inside functions (hidden circles):\n" + "\n".join(
        f"  {m}:{line} imports {t}" for m, line, t in nested)


def _reaches(edges: dict, start: str) -> set:
    seen, todo = set(), [start]
    while todo:
        for t in edges[todo.pop()]:
            if t not in seen:
                seen.add(t)
                todo.append(t)
    return seen


def test_the_layers_hold():
    edges = _package_inits(import_graph()[0])
    node = _reaches(edges, f"{PKG}.node")
    assert not {m for m in node if m.startswith(f"{PKG}.ops")}, "node.py reaches the op layer"
    for m in edges:
        if m.startswith(f"{PKG}.ops"):
            up = {t for t in _reaches(edges, m)
                  if t.startswith((f"{PKG}.engine", f"{PKG}.nn", f"{PKG}.optim"))}
            assert not up, f"{m} (op layer) reaches {sorted(up)}"
