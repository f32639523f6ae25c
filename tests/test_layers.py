"""The package's shape: stage folders, one-way imports down the pipeline, no circles, borders kept.

A *unit* is a top-level module of ``arenum`` or one of its folders. Units are ordered by the
pipeline (model -> step -> exact -> beyond -> facade -> report -> packages); an import may only go
down (or stay inside its unit). A stage folder is entered only through its ``__init__``, which
exports exactly the names that cross its border. Circles are checked between whole modules, so a
circle inside a sub-package counts too.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import arenum

SRC = Path(arenum.__file__).parent
ROOT = SRC.parent.parent

# lowest first; a unit may import only units of a lower (or, without a circle, the same) layer
LAYERS = [
    {"_validate", "_io", "_guard", "errors", "results", "support"},
    {"step"},
    {"exact"},
    {"settings"},
    {"beyond"},
    {"answers"},
    {"bounded"},
    {"enumerable"},
    {"report", "testing", "__init__"},
    {"models", "cli", "distributed", "serve", "constraints"},
]
STAGES = ("step", "exact", "beyond", "report")
# the adapters' one convenience constructor (model.enumerable()) imports the facade lazily; the
# command line's `serve` command imports the server lazily (the server answers through the CLI's loader
# and serializers, one schema for both)
ALLOWED_UP = {("models", "__init__"), ("models", "enumerable"), ("cli", "serve")}
MAX_TOP_MODULES = 12
MAX_LINES = 650


def _full(path: Path) -> str:
    rel = path.relative_to(SRC).with_suffix("")
    return ".".join(("arenum",) + rel.parts).removesuffix(".__init__")


def _unit(full: str) -> str:
    parts = full.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _is_module(full: str) -> bool:
    rel = Path(*full.split(".")[1:]) if "." in full else Path("__init__")
    return (SRC / rel).with_suffix(".py").exists() or (SRC / rel / "__init__.py").exists()


def _imports(path: Path):
    """``(target module as a dotted name, imported names, lazy)`` of every arenum import in ``path``;
    ``from P import M`` of a submodule ``M`` targets ``P.M``."""
    tree = ast.parse(path.read_text())
    pkg = _full(path).split(".")
    if path.name != "__init__.py":
        pkg = pkg[:-1]
    top = {id(n) for n in tree.body}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                mod = pkg[: len(pkg) - (node.level - 1)] + (node.module.split(".") if node.module else [])
            else:
                mod = (node.module or "").split(".")
            if mod[:1] != ["arenum"]:
                continue
            base = ".".join(mod)
            names = []
            for a in node.names:
                if _is_module(f"{base}.{a.name}"):
                    yield f"{base}.{a.name}", [], id(node) not in top
                else:
                    names.append(a.name)
            if names:
                yield base, names, id(node) not in top
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "arenum" and "." in a.name:
                    yield a.name, [], id(node) not in top


def _files():
    return sorted(SRC.rglob("*.py"))


def _layer(name: str) -> int:
    for i, layer in enumerate(LAYERS):
        if name in layer:
            return i
    raise AssertionError(f"unit {name!r} is in no layer of tests/test_layers.py")


def test_every_import_runs_down_the_pipeline():
    bad = []
    for p in _files():
        src = _unit(_full(p))
        for tgt, _, _ in _imports(p):
            t = _unit(tgt)
            if t != src and _layer(t) > _layer(src) and (src, t) not in ALLOWED_UP:
                bad.append(f"{p.relative_to(SRC)} imports {tgt}")
    assert not bad, bad


def _assert_no_circle(graph: dict[str, set[str]]) -> None:
    """A depth-first walk of ``graph``; an edge back into the walk's own path is a circle. A module
    importing its own package (``arenum.step.tables`` -> ``arenum.step``) is not an edge back."""
    seen: dict[str, int] = {}

    def visit(n: str, stack: list[str]) -> None:
        seen[n] = 1
        for m in sorted(graph.get(n, ())):
            if n.startswith(m + ".") or m == "arenum":
                continue
            assert seen.get(m) != 1, f"import circle: {' -> '.join(stack + [n, m])}"
            if m not in seen:
                visit(m, stack + [n])
        seen[n] = 2

    for n in sorted(graph):
        if n not in seen:
            visit(n, [])


def _graph(node) -> dict[str, set[str]]:
    """Import edges between ``node(module)`` of every module, the adapters' lazy import of the facade
    left out."""
    graph: dict[str, set[str]] = {}
    for p in _files():
        src = _full(p)
        for tgt, _, _ in _imports(p):
            if node(tgt) != node(src) and (_unit(src), _unit(tgt)) not in ALLOWED_UP:
                graph.setdefault(node(src), set()).add(node(tgt))
    return graph


def test_no_import_circles_between_modules():
    """Imports between whole modules (sub-packages included) form no circle; a package imports its
    ``__init__``'s submodules, so ``from . import X`` of a name defined by the ``__init__`` that
    imports the importer is a circle too. Lazy imports inside functions are edges too."""
    _assert_no_circle(_graph(lambda m: m))


def test_no_circles_between_units():
    _assert_no_circle(_graph(_unit))


def test_stages_are_entered_through_their_init_which_exports_what_crosses():
    crossing: dict[str, set[str]] = {s: set() for s in STAGES}
    deep = []
    for p in _files():
        src = _unit(_full(p))
        for tgt, names, _ in _imports(p):
            parts = tgt.split(".")
            if len(parts) < 2 or parts[1] not in STAGES or parts[1] == src:
                continue
            exported_module = len(parts) == 3 and parts[2] in __import__(tgt.rsplit(".", 1)[0], fromlist=["__all__"]).__all__
            if exported_module:  # a module the stage exports as such (arenum.step.kernels)
                names = [parts[2]]
            elif len(parts) > 2:
                deep.append(f"{p.relative_to(SRC)} imports {tgt} (import it from arenum.{parts[1]})")
            crossing[parts[1]].update(names)
    assert not deep, deep
    # names the docs and README import from a stage are its public face too
    docs = "\n".join(f.read_text() for f in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])
    for stage in STAGES:
        for m in re.finditer(rf"from arenum\.{stage} import ([\w, ]+)", docs):
            crossing[stage].update(n.strip() for n in m.group(1).split(","))
        mod = __import__(f"arenum.{stage}", fromlist=["__all__"])
        exported = set(mod.__all__)
        assert crossing[stage] <= exported, (stage, "imported but not exported", crossing[stage] - exported)
        assert exported <= crossing[stage], (stage, "exported but used by nobody outside", exported - crossing[stage])
        doc = mod.__doc__ or ""
        assert doc.startswith("Stage") and "Exports" in doc, f"arenum.{stage}.__init__ says what it does and exports"


def test_no_module_imports_another_modules_private_names():
    bad = []
    for p in _files():
        for tgt, names, _ in _imports(p):
            for n in names:
                if n.startswith("_") and not n.startswith("__"):
                    bad.append(f"{p.relative_to(SRC)}: from {tgt} import {n}")
    assert not bad, bad


def test_the_top_of_the_package_is_small_and_no_module_is_long():
    top = sorted(p.name for p in SRC.glob("*.py"))
    assert len(top) <= MAX_TOP_MODULES, top
    big = {str(p.relative_to(SRC)): n for p in _files() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not big, big


def test_tests_mirror_the_folders():
    here = Path(__file__).parent
    folders = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    for sub in (p for p in here.iterdir() if p.is_dir() and not p.name.startswith((".", "__"))):
        assert sub.name in folders, f"tests/{sub.name} mirrors no folder of arenum"
