"""The facade's shape: composed (not a mixin), validating and locking once per query, one source per
setting, one ladder of regimes, errors and constants in one place, a public catalog."""
from __future__ import annotations

import math
import re
import sys
import threading
from pathlib import Path

import pytest

import arenum
from arenum import AutoregressiveEnumerable
from arenum.testing import RandomModel, brute_force

SRC = Path(arenum.__file__).parent


def _model(term: bool, seed: int = 4):
    return RandomModel(5, seed=seed, peak=1.0, eos=0 if term else None, eos_boost=2.0)


def _fresh(m, term: bool, L: int = 4, **kw) -> AutoregressiveEnumerable:
    return AutoregressiveEnumerable(m, max_len=L, eos=0 if term else None, batch_next_logprobs=m.batch,
                                    batch_size=8, **kw)


class CountingLock:
    """A re-entrant lock that counts how often it is taken (not re-entered through ``locked``)."""

    def __init__(self) -> None:
        self._l = threading.RLock()
        self.takes = 0

    def _is_owned(self) -> bool:
        return self._l._is_owned()

    def acquire(self, *a):
        self.takes += 1
        return self._l.acquire(*a)

    def release(self) -> None:
        self._l.release()

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _spy_lock(ar: AutoregressiveEnumerable) -> CountingLock:
    spy = CountingLock()
    ar._tree.lock = ar._lock = ar._beyond.lock = spy  # before the first query: the seek index takes it too
    return spy


QUERIES = [
    ("threshold", lambda ar, seq: ar.threshold(5)),
    ("count", lambda ar, seq: ar.count(-3.0)),
    ("count_bracket", lambda ar, seq: ar.count_bracket(-3.0)),
    ("mass_above", lambda ar, seq: ar.mass_above(-3.0)),
    ("rank", lambda ar, seq: ar.rank(seq)),
    ("cumulative", lambda ar, seq: ar.cumulative(seq)),
    ("unrank", lambda ar, seq: ar.unrank(6)),
    ("slice", lambda ar, seq: ar.slice(2, 3)),
    ("top_k", lambda ar, seq: ar.top_k(4)),
    ("nucleus_size", lambda ar, seq: ar.nucleus_size(0.5)),
    ("seek", lambda ar, seq: ar.seek(3)),
    ("seek_mass", lambda ar, seq: ar.seek_mass(0.5)),
]


@pytest.mark.parametrize("term", [False, True])
@pytest.mark.parametrize("name, query", QUERIES, ids=[q[0] for q in QUERIES])
def test_each_query_takes_the_lock_once_and_is_exact(term, name, query):
    m = _model(term)
    bf = brute_force(m.table, fixed_len=None if term else 4, eos=0 if term else None, cap=4)
    seq = bf[7][0]
    ar = _fresh(m, term)
    spy = _spy_lock(ar)
    got = query(ar, seq)
    assert spy.takes == 1, (name, spy.takes)
    ar._check()
    ref = query(_fresh(m, term), seq)  # the same answer as an enumerable with its own lock
    assert got == ref
    if name == "threshold":
        assert got == bf[4][1]
    if name == "rank":
        assert got.rank == sum(1 for _, s in bf if s > bf[7][1])


def test_a_query_past_the_cap_takes_the_lock_once_too():
    m = _model(True)
    ar = _fresh(m, True, L=6, exact_limit=5, estimate_samples=300)
    spy = _spy_lock(ar)
    r = ar.count(-9.0)
    assert not r.exact and r.method.startswith("monte_carlo") and spy.takes == 1
    spy.takes = 0
    ar.threshold(40)
    assert spy.takes == 1


def _spy_validation(monkeypatch) -> list[str]:
    """Count every call of the shared validators, wherever a module imported them."""
    from arenum import _validate

    calls: list[str] = []
    for fname in ("exact_int", "optional_exact_int", "finite_float", "probability"):
        orig = getattr(_validate, fname)

        def spy(name, *a, _orig=orig, **k):
            calls.append(name)
            return _orig(name, *a, **k)

        for mod in list(sys.modules.values()):
            modname = getattr(mod, "__name__", "") or ""
            if modname.startswith("arenum") and modname != "arenum._validate" and getattr(mod, fname, None) is orig:
                monkeypatch.setattr(mod, fname, spy)
    return calls


PARAMS = {"threshold": ["rank"], "count": ["min_log_prob"], "count_bracket": ["min_log_prob"],
          "mass_above": ["min_log_prob"], "rank": [], "cumulative": [], "unrank": ["i"], "slice": ["k", "start"],
          "top_k": ["k"], "nucleus_size": ["p"], "seek": ["i"], "seek_mass": ["target"]}


@pytest.mark.parametrize("name, query", QUERIES, ids=[q[0] for q in QUERIES])
def test_each_query_validates_each_argument_once(monkeypatch, name, query):
    m = _model(False)
    ar = _fresh(m, False)
    seq = ar.unrank(7)[0]
    calls = _spy_validation(monkeypatch)
    query(ar, seq)
    assert sorted(calls) == PARAMS[name], (name, calls)


def test_threshold_decodes_no_sequence():
    m = _model(False)
    ar = _fresh(m, False)
    seek = ar.seek_index()
    decoded = []
    orig = seek._decode
    seek._decode = lambda ids: decoded.append(ids) or orig(ids)
    assert ar.threshold(9) == brute_force(m.table, fixed_len=4, cap=4)[8][1]
    assert decoded == []
    ar.unrank(8)
    assert len(decoded) == 1


def test_the_facade_is_composed_and_holds_one_source_per_setting():
    assert AutoregressiveEnumerable.__mro__ == (AutoregressiveEnumerable, object)
    m = _model(False)
    ar = _fresh(m, False, branch_cap=3, exact_limit=50)
    assert ar.answers.beyond is ar._beyond and ar.answers.estimates
    for name in ("max_len", "branch_cap", "batch_size", "exact_limit", "count_mode", "quantizer", "cap"):
        assert getattr(ar, name) == getattr(ar.settings, name)
        with pytest.raises(AttributeError):
            setattr(ar, name, 1)
    assert ar.support.branch_cap == ar.settings.branch_cap == 3
    assert not hasattr(ar._tree, "branch_cap")  # the tree reads its support's
    ar.certified_resolution_bits = 0.25
    assert ar._beyond.resolution_bits == 0.25


def test_the_regime_ladder_is_one_method():
    """count, count_bracket, count_or_bracket, threshold, mass_above and rank go through
    Answers.regime; none of them catches BudgetExceeded to choose a regime itself."""
    text = (SRC / "answers.py").read_text()
    for q in ("count", "_count_brackets", "threshold", "mass_above", "rank"):
        body = re.search(rf"\n    def {q}\(self.*?(?=\n    def |\n    # -)", text, re.S).group(0)
        assert "self.regime(" in body and "except BudgetExceeded" not in body, q
    for q in ("count_bracket", "count_or_bracket"):
        body = re.search(rf"\n    def {q}\(self.*?(?=\n    def |\n    # -)", text, re.S).group(0)
        assert "self._count_brackets(" in body and "except BudgetExceeded" not in body, q


def test_errors_live_in_one_module_and_are_exported():
    from arenum import errors

    for name in errors.__all__:
        cls = getattr(arenum, name)
        assert cls is getattr(errors, name) and name in arenum.__all__
        assert cls.__module__ == "arenum.errors"
    assert issubclass(arenum.StoreError, ValueError) and issubclass(arenum.BudgetExceeded, RuntimeError)
    assert issubclass(arenum.WorkerError, RuntimeError) and issubclass(arenum.KernelUnavailable, ImportError)
    # the library's own exceptions are all in errors.py; the command line and the server map theirs
    # to exit codes and HTTP statuses, and the KV-cache probe's never leaves its module
    interface = {"cli", "serve"}
    defined = [f"{p.relative_to(SRC)}: {m.group(1)}" for p in SRC.rglob("*.py")
               for m in re.finditer(r"^class (\w+)\((?:\w*Error|Exception|RuntimeError|ImportError)\)", p.read_text(), re.M)
               if p.name != "errors.py" and not m.group(1).startswith("_")
               and p.relative_to(SRC).parts[0] not in interface and m.group(1) != "NoKVCache"]
    assert defined == [], defined
    m = _model(False)
    with pytest.raises(arenum.BudgetExceeded, match="max_prefixes"):
        _fresh(m, False, L=6, max_prefixes=3).count(-20.0)


def test_shared_constants_are_defined_once():
    pats = {"LN2": r"^LN2\s*=", "INT64_MAX": r"^_?INT64_MAX\s*=", "short_repr": r"^def short_repr\("}
    for name, pat in pats.items():
        where = [str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if re.search(pat, p.read_text(), re.M)]
        assert where == ["_validate.py"], (name, where)
    from arenum._validate import INT64_MAX, LN2, short_repr

    assert LN2 == math.log(2.0) and INT64_MAX == 2**63 - 1 and short_repr("x" * 100).endswith("...")


def test_low_level_classes_point_to_the_facade_method():
    from arenum.exact import CountIndex, ExactIndex, PrefixTree, SeekIndex
    from arenum.step import StepOracle

    for cls in (PrefixTree, StepOracle, ExactIndex, SeekIndex, CountIndex):
        doc = cls.__doc__ or ""
        assert doc.startswith("Low-level:"), cls.__name__
        named = re.findall(r"AutoregressiveEnumerable\.(\w+)", doc)
        assert named and all(hasattr(AutoregressiveEnumerable, n) for n in named), (cls.__name__, named)


def test_the_package_docstring_catalogs_every_public_name():
    doc = arenum.__doc__
    catalog = set(re.findall(r"^([A-Za-z_]\w*) {2,}\S", doc, re.M))
    assert catalog == set(arenum.__all__), (catalog ^ set(arenum.__all__))
    for group in ("Exact", "Certified", "Estimate", "Records", "Errors", "Adapters"):
        assert re.search(rf"^{group}\b.*\n-+$", doc, re.M), group
    for sub in re.findall(r"^(arenum\.[\w.]+) ", doc, re.M):
        __import__(sub) if sub != "arenum.models.hf" else None
