"""Exact sums (arenum.exact.exactsum) against Fraction arithmetic, on seeded random arrays."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

import arenum.exact.exactsum as xs
from arenum.exact.exactsum import SCALE, GroupedSum, PrefixSums, exact_sum, float_units, to_float, values

TINY = [0.0, 5e-324, 1e-323, 2.2250738585072014e-308, 2.225073858507201e-308, 1e-310, 4.9e-320]


def _ref(v) -> int:
    """``sum(v) * 2**SCALE`` with Fractions (exact)."""
    s = sum((Fraction(x) for x in np.asarray(v, float).tolist()), Fraction(0))
    u = s * 2**SCALE
    assert u.denominator == 1
    return int(u)


def _array(rng, n: int, kind: str) -> np.ndarray:
    if kind == "probs":
        v = np.exp(-rng.exponential(rng.choice([0.5, 20.0, 300.0, 800.0]), n))
    elif kind == "wide":  # every binade, subnormals included
        v = np.ldexp(rng.random(n) + 0.5, rng.integers(-1080, 1020, n))
    elif kind == "ties":
        v = rng.choice(np.exp(-rng.exponential(5.0, 4)), n)
    else:  # "tiny": zeros and subnormals
        v = rng.choice(np.array(TINY), n) * rng.integers(1, 5, n)
    v[rng.random(n) < 0.05] = 0.0
    return v


@pytest.mark.parametrize("kind", ["probs", "wide", "ties", "tiny"])
def test_exact_sum_is_the_fraction_sum_in_any_order(kind):
    rng = np.random.default_rng(len(kind))
    for n in (0, 1, 2, 17, 1000, 5000):
        v = _array(rng, n, kind)
        S = exact_sum(v)
        assert S == _ref(v)
        assert exact_sum(v[rng.permutation(n)]) == S
        cut = sorted(rng.integers(0, n + 1, 3).tolist())
        parts = [v[: cut[0]], v[cut[0] : cut[1]], v[cut[1] : cut[2]], v[cut[2] :]]
        assert sum(exact_sum(p) for p in parts) == S
        assert to_float(S) == float(Fraction(S, 2**SCALE))
        if kind != "wide":
            assert abs(to_float(S) - math.fsum(v.tolist())) <= 1e-15 * max(1.0, to_float(S))


def test_small_chunks_and_steps_give_the_same_sums(monkeypatch):
    """Many bins of more than ``_CHUNK`` values: the accumulation converts to ints every chunk."""
    rng = np.random.default_rng(3)
    v = np.concatenate([_array(rng, 3000, "ties"), _array(rng, 2000, "probs"), _array(rng, 500, "tiny")])
    want = _ref(v)
    g = rng.integers(0, 5, v.shape[0])
    want_g = [_ref(v[g == k]) for k in range(5)]
    e_top = np.array([1023, 1020, 1000, 10, 1])
    for chunk, step in ((7, 3), (64, 64), (1000, 17)):
        monkeypatch.setattr(xs, "_CHUNK", chunk)
        monkeypatch.setattr(xs, "_STEP", step)
        assert exact_sum(v) == want
        acc = GroupedSum(e_top, 3)
        for a in range(0, v.shape[0], 333):
            acc.add(v[a : a + 333], g[a : a + 333])
        assert acc.units().tolist() == want_g
        ps = PrefixSums(v[:100])  # longer than a chunk: exact sums per query
        assert ps.units(100) == _ref(v[:100]) and ps.units(37) == _ref(v[:37])


def test_huge_values_and_negative_zero():
    big = np.full(5000, np.finfo(np.float64).max)
    v = np.concatenate([big, [1.0, 5e-324, -0.0]])
    assert exact_sum(v) == _ref(np.abs(v))
    assert to_float(exact_sum(v)) == math.inf  # past the largest float
    assert to_float(exact_sum(big[:1])) == np.finfo(np.float64).max
    assert exact_sum(np.array([-0.0, 0.0])) == 0


@pytest.mark.parametrize("bad", [-1.0, -5e-324, math.nan, math.inf, -math.inf])
def test_bad_values_are_refused(bad):
    v = np.array([0.5, bad, 0.25])
    with pytest.raises(ValueError, match="finite and >= 0"):
        exact_sum(v)
    acc = GroupedSum(np.array([1022]), 2)
    with pytest.raises(ValueError, match="finite and >= 0"):
        acc.add(v, np.zeros(3, int))
    with pytest.raises(ValueError, match="width"):
        GroupedSum(np.array([1022]), 9)


def test_to_float_rounds_once_to_nearest_even():
    rng = np.random.default_rng(5)
    cases = [0, 1, 2, 3, (1 << 52) - 1, 1 << 52, (1 << 53) + 1, 3 << 1074, (1 << 1127) + (1 << 1073)]
    cases += [int(x) for x in rng.integers(0, 1 << 62, 50)]
    cases += [int(rng.integers(1, 1 << 62)) << int(rng.integers(0, 1100)) for _ in range(200)]
    for S in cases:
        assert to_float(S) == float(Fraction(S, 2**SCALE))
    # halfway between two floats: ties to even
    one = float_units(1.0)
    ulp = float_units(2.0**-52)
    assert to_float(one + ulp // 2) == 1.0
    assert to_float(one + ulp + ulp // 2) == 1.0 + 2 * 2.0**-52
    assert to_float(one + ulp // 2 + 1) == 1.0 + 2.0**-52


def test_float_units_is_exact():
    rng = np.random.default_rng(6)
    xs_ = np.concatenate([_array(rng, 300, "wide"), np.array(TINY), -_array(rng, 50, "probs")])
    for x in xs_.tolist():
        u = float_units(x)
        assert Fraction(u, 2**SCALE) == Fraction(x)
        assert to_float(u) == x
    with pytest.raises(ValueError, match="finite"):
        float_units(math.nan)


@pytest.mark.parametrize("width", [1, 2, 3, 8])
def test_grouped_sums_with_right_and_wrong_windows(width):
    """Each group's sum is exact whether its values lie in its exponent window or not."""
    rng = np.random.default_rng(width)
    n, ng = 4000, 9
    g = rng.integers(0, ng, n)
    e_top = rng.integers(0, 1030, ng)
    e_top[:3] = [1, 2, 1022]
    E = e_top[g] - rng.integers(0, width, n)  # in the window ...
    stray = rng.random(n) < 0.1
    E[stray] = rng.integers(0, 2046, int(stray.sum()))  # ... but for some strays
    v = np.ldexp(rng.random(n) + 0.5, np.maximum(E, 0) - 1022)
    v[rng.random(n) < 0.03] = 0.0
    v[:4] = [5e-324, 1e-310, 0.0, 1.0]
    acc = GroupedSum(e_top, width)
    for a in range(0, n, 1000):
        acc.add(v[a : a + 1000], g[a : a + 1000])
    got = acc.units().tolist()
    assert got == [_ref(v[g == k]) for k in range(ng)]
    assert sum(got) == exact_sum(v)
    z = acc.trailing
    assert acc.units(z).tolist() == [u >> z for u in got] and all(u % (1 << z) == 0 for u in got)
    with pytest.raises(ValueError, match="shift"):
        acc.units(z + 1)
    with pytest.raises(ValueError, match="groups must be in"):
        acc.add(v[:2], np.array([0, ng]))


@pytest.mark.parametrize("kind", ["ties", "probs", "wide", "tiny"])
def test_prefix_sums_and_the_smallest_prefix_reaching_the_units(kind):
    """Narrow arrays take the int64 running sums, wide ones (``wide``) the exact sums per query."""
    rng = np.random.default_rng(8)
    for trial in range(40):
        n = int(rng.integers(1, 60))
        v = np.sort(_array(rng, n, kind))[::-1]
        if kind == "probs" and trial % 2:
            v = np.sort(np.exp(-rng.uniform(3.0, 6.0, n)))[::-1]  # a bucket: a few binades
        pre = [0]
        for x in v.tolist():
            pre.append(pre[-1] + float_units(x))
        ps = PrefixSums(v)
        assert [ps.units(k) for k in range(n + 1)] == pre
        if pre[-1] == 0:
            continue
        cands = {1, pre[-1], *pre[1:5], *(p + 1 for p in pre[1:5])}
        cands |= {max(1, int(Fraction(r) * pre[-1])) for r in rng.random(8).tolist()}
        for units in sorted(u for u in cands if 0 < u <= pre[-1]):
            k = next(i for i in range(1, n + 1) if pre[i] >= units)
            assert ps.reaching(units) == k
            if k > 1:  # a tied run at the crossing: k - a = ceil((units - S(a)) / w)
                a = int(np.flatnonzero(v == v[k - 1])[0])
                assert k == a + -(-(units - pre[a]) // float_units(v[k - 1]))
    with pytest.raises(ValueError, match="units"):
        PrefixSums(np.array([0.5])).reaching(float_units(0.75))
    with pytest.raises(ValueError, match="finite and >= 0"):
        PrefixSums(np.array([0.5, -1.0]))


def test_values_is_numpys_exp_on_contiguous_arrays():
    x = -np.random.default_rng(9).exponential(30.0, 4001)
    v = values(x)
    assert np.array_equal(values(x[::2]), v[::2])
    assert all(values(np.array([x[i]]))[0] == v[i] for i in range(0, 4001, 37))


def test_windows_from_value_ranges():
    """Windows from each group's value range: in-window values take the fast path, and a group
    whose range was understated is still summed exactly."""
    rng = np.random.default_rng(10)
    lo = np.array([0.5, 1e-5, 1e-300, 3e-320])
    hi = np.array([1.0, 4e-5, 1e-290, 1e-310])
    acc = GroupedSum.for_ranges(lo, hi, np.array([1000, 1000, 5, 1]))
    assert acc.W == 5  # 1e-5..4e-5: 3 binades and a slack binade each side; the wide groups hold < 1%
    g = rng.choice(4, 2000, p=[0.45, 0.45, 0.05, 0.05])
    v = lo[g] + (hi[g] - lo[g]) * rng.random(2000)
    v[:5] = [2.0, 1e-7, 0.0, 5e-324, 1.0]  # outside their windows
    acc.add(v, g)
    assert acc.units().tolist() == [_ref(v[g == k]) for k in range(4)]


def test_a_chunk_of_huge_values_that_overflows_a_float_sum_is_summed_exactly():
    x = 1.5 * 2.0**999  # below the old 2**1000 cut: 2**25 of them overflow a float sum (256 MB here)
    n = 1 << 25
    assert n <= xs._CHUNK  # one chunk: the retry used to recurse on that same chunk without end
    v = np.full(n, x)
    v[7] = 2.0**1023
    assert exact_sum(v) == float_units(x) * (n - 1) + float_units(2.0**1023)
