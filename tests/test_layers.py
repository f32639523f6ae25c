"""The package's shape: one-way imports down the pipeline, no circles, no private names across modules."""
from __future__ import annotations

import ast
from pathlib import Path

import arenum

SRC = Path(arenum.__file__).parent

# lowest first; a module may import only modules of a lower (or, without a circle, the same) layer
LAYERS = [
    {"_validate", "_arrays", "_io", "_guard", "exactsum", "quantize", "results", "support", "atoms", "finite_state",
     "budget", "dense", "kernels", "_numba_kernels"},
    {"tables", "draws"},
    {"oracle"},
    {"levels"},
    {"tree", "best_first"},
    {"index", "store"},
    {"seek", "sampling"},
    {"estimate", "envelope", "count_index", "settings", "certified"},
    {"lattice"},
    {"answers"},
    {"bounded"},
    {"beyond"},
    {"enumerable"},
    {"rescore", "plot", "evaluate", "testing", "__init__"},
    {"models", "cli", "distributed"},
]
# the adapters' one convenience constructor (model.enumerable()) imports the facade lazily
ALLOWED_UP = {("models", "__init__"), ("models", "enumerable")}


def _module(path: Path) -> str:
    rel = path.relative_to(SRC).with_suffix("")
    parts = rel.parts
    return parts[0] if len(parts) > 1 else parts[0]


def _full(path: Path) -> str:
    rel = path.relative_to(SRC).with_suffix("")
    return ".".join(("arenum",) + rel.parts).removesuffix(".__init__")


def _imports(path: Path):
    """(target top-level module of arenum, imported names) of every import in ``path``."""
    tree = ast.parse(path.read_text())
    pkg = _full(path).split(".")
    if path.name != "__init__.py":
        pkg = pkg[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg[: len(pkg) - (node.level - 1)]
                mod = base + (node.module.split(".") if node.module else [])
            else:
                mod = (node.module or "").split(".")
            if mod[:1] != ["arenum"]:
                continue
            names = [a.name for a in node.names]
            if len(mod) == 1:  # from arenum import X / from . import X: a submodule, or the package's name
                for n in names:
                    sub = (SRC / f"{n}.py").exists() or (SRC / n).is_dir()
                    yield (n, [], mod + [n]) if sub else ("__init__", [n], mod)
            else:
                yield mod[1], names, mod
        elif isinstance(node, ast.Import):
            for a in node.names:
                mod = a.name.split(".")
                if mod[0] == "arenum" and len(mod) > 1:
                    yield mod[1], [], mod


def _files():
    return [p for p in SRC.rglob("*.py")]


def _layer(name: str) -> int:
    for i, layer in enumerate(LAYERS):
        if name in layer:
            return i
    raise AssertionError(f"module {name!r} is in no layer of tests/test_layers.py")


def test_every_import_runs_down_the_pipeline():
    bad = []
    for p in _files():
        src = _module(p)
        for tgt, _, _ in _imports(p):
            if tgt == src:
                continue
            if _layer(tgt) > _layer(src) and (src, tgt) not in ALLOWED_UP:
                bad.append(f"{p.relative_to(SRC)} imports {tgt}")
    assert not bad, bad


def test_no_import_circles_between_modules():
    graph: dict[str, set[str]] = {}
    for p in _files():
        src = _module(p)
        for tgt, _, _ in _imports(p):
            if tgt != src and (src, tgt) not in ALLOWED_UP:
                graph.setdefault(src, set()).add(tgt)
    seen: dict[str, int] = {}

    def visit(n: str, stack: list[str]) -> None:
        seen[n] = 1
        for m in graph.get(n, ()):
            assert seen.get(m) != 1, f"import circle: {' -> '.join(stack + [n, m])}"
            if m not in seen:
                visit(m, stack + [n])
        seen[n] = 2

    for n in list(graph):
        if n not in seen:
            visit(n, [])


def test_no_module_imports_another_modules_private_names():
    bad = []
    for p in _files():
        for _, names, mod in _imports(p):
            for n in names:
                if n.startswith("_") and not n.startswith("__"):
                    bad.append(f"{p.relative_to(SRC)}: from {'.'.join(mod)} import {n}")
    assert not bad, bad


def test_no_module_is_a_thousand_lines():
    big = {str(p.relative_to(SRC)): n for p in _files() if (n := len(p.read_text().splitlines())) > 650}
    assert not big, big
