"""The vocabulary (tokens <-> ids) and the parse of ``(token, log_prob)`` lists through it."""
from __future__ import annotations

import math
import random

import numpy as np
import pytest

import arenum.step.tables as tables_mod
from arenum.step import decode_token, encode_token
from arenum.step.vocab import Vocab


def test_integer_mode_ids_are_the_tokens():
    v = Vocab()
    assert v.id(7) == 7 and v.int_mode is True and len(v) == 0
    assert v.token(7) == 7 and v.tokens([3, 4]) == (3, 4)
    assert v.ids([1, np.int32(5), 2**40]).tolist() == [1, 5, 2**40]
    with pytest.raises(TypeError, match="not an integer"):
        v.id("a")
    with pytest.raises(TypeError, match="not an integer"):
        v.ids([1, True])
    with pytest.raises(ValueError, match="does not fit in int64"):
        v.ids([1, 2**63])
    assert v.ids_of([1, "x"]) == [1, None]


def test_object_mode_interns_in_order_and_round_trips():
    v = Vocab()
    assert v.ids_of(["a"]) == [None]  # undecided: nothing known
    assert v.ids(["b", "a", "b2"]).tolist() == [0, 1, 2] and v.int_mode is False
    assert v.id("a") == 1 and v.id("zz", intern=False) is None and len(v) == 3
    assert v.tokens([2, 0]) == ("b2", "b") and v.ids_of(["a", "q"]) == [1, None]
    assert v.id(True) == 3  # bool is not an integer token: interned like any other
    with pytest.raises(TypeError, match="not hashable"):
        v.ids(["a", ["x"]])
    mode, toks = v.state()
    w = Vocab()
    w.id("b")
    w.restore(mode, toks)
    assert w.state() == (mode, toks) and w.since(2) == ["b2", True]
    with pytest.raises(ValueError, match="do not match"):
        w.restore(False, ["x", "y"])
    u = Vocab()
    u.id(1)
    with pytest.raises(ValueError, match="token mode"):
        u.restore(False, [])


def test_ids_equal_one_by_one_interning():
    rng = random.Random(3)
    pool = ["a", "b", b"c", 1, 2, np.int64(3), 2.5, True, (1, 2), 2**63, -5]
    for _ in range(300):
        toks = [rng.choice(pool) for _ in range(rng.randint(1, 6))]
        a, b = Vocab(), Vocab()
        try:
            want = ("ok", [a.id(t) for t in toks])
        except (TypeError, ValueError) as e:
            want = ("error", type(e), str(e))
        try:
            got = ("ok", b.ids(toks).tolist())
        except (TypeError, ValueError) as e:
            got = ("error", type(e), str(e))
        assert got == want, toks
        if got[0] == "ok":
            assert a.state() == b.state()


def test_token_codec_round_trips_and_refuses_other_tokens():
    for t in ["x", "", b"\x00\xff", 0, -(2**63), 2**63 - 1]:
        assert decode_token(encode_token(t)) == t
    assert encode_token(np.int16(4)) == ["i", 4]
    for t in [1.5, True, None, (1,)]:
        with pytest.raises(ValueError, match="cannot be stored"):
            encode_token(t)


def _parse(raw, vocab):
    try:
        ids, lps = tables_mod.parse_table(raw, ("p",), tables_mod.Parser(vocab, 1e-3))
        return ("ok", vocab.tokens(ids), lps.tolist())
    except (TypeError, ValueError) as e:
        return ("error", type(e), str(e))


def test_pair_lists_parse_as_the_item_by_item_path():
    """The fast parse of a list (one dict) answers exactly as the item-by-item path (a generator of
    the same pairs): same tables, or the same error, on valid, duplicate, malformed and bad rows."""
    rng = random.Random(5)
    for trial in range(500):
        n = rng.randint(1, 6)
        p = np.array([rng.random() + 0.01 for _ in range(n)])
        p /= p.sum()
        toks: list = rng.sample(range(20), n) if trial % 2 else [f"t{rng.randrange(20)}" for _ in range(n)]
        vals: list = [math.log(q) for q in p]
        items: list = [(t, v) for t, v in zip(toks, vals)]
        kind = rng.randrange(8)
        j = rng.randrange(n)
        if kind == 1 and n > 1:
            items[j] = (items[(j + 1) % n][0], items[j][1])  # a duplicate token
        elif kind == 2:
            items[j] = (items[j][0],)  # not a pair
        elif kind == 3:
            items[j] = (items[j][0], "x")  # not a number
        elif kind == 4:
            items[j] = (items[j][0], float("nan"))
        elif kind == 5:
            items[j] = (items[j][0], -math.inf)
        elif kind == 6:
            items[j] = ([1], items[j][1])  # unhashable
        elif kind == 7:
            items[j] = (items[j][0], items[j][1] + 0.5)  # sum off 1
        assert _parse(list(items), Vocab()) == _parse(iter(items), Vocab()), items


def _chunk(rng, n, form, defect):
    rows = []
    for i in range(n):
        w = rng.randint(1, 7)
        p = np.array([rng.random() + 0.01 for _ in range(w)])
        p /= p.sum()
        toks: list = rng.sample(range(-3, 30), w) if form != "str" else [f"t{x}" for x in rng.sample(range(30), w)]
        vals = [math.log(q) for q in p]
        if rng.random() < 0.2:
            vals = [v + 1e-9 for v in vals]  # within norm_tol, renormalized
        if rng.random() < 0.1:
            toks.append("t99" if form == "str" else 99)
            vals.append(-math.inf)
        rows.append((toks, vals))
    if defect:
        i = rng.randrange(n)
        toks, vals = rows[i]
        j = rng.randrange(len(toks))
        kind = rng.randrange(7)
        if kind == 0 and len(toks) > 1:
            toks[j] = toks[(j + 1) % len(toks)]
        elif kind == 1:
            vals[j] = float("nan")
        elif kind == 2:
            vals[j] = 0.5
        elif kind == 3:
            vals[j] += 0.5
        elif kind == 4:
            rows[i] = ([], [])
        elif kind == 5:
            vals[:] = [-math.inf] * len(vals)
        elif kind == 6 and form == "list":
            toks[j] = True
    out = []
    for toks, vals in rows:
        if form == "numpy":
            out.append((np.array(toks, np.int64), np.array(vals)))
        else:
            out.append(list(zip(toks, vals)))
    if defect and rng.random() < 0.5:  # a row of another form, or a malformed one, among good rows
        i = rng.randrange(n)
        toks, vals = rows[i]
        kind = rng.randrange(6)
        if kind == 0 and form != "str":
            out[i] = [np.array(toks, np.int64), np.array(vals)]  # the array pair given as a list
        elif kind == 1:
            out[i] = [[t, v] for t, v in zip(toks, vals)]  # items as lists
        elif kind == 2:
            out[i] = [(t, v, 0) for t, v in zip(toks, vals)]  # not pairs
        elif kind == 3 and form == "numpy":
            out[i] = (np.array(toks, np.int32), np.array(vals, np.float32))  # other dtypes
        elif kind == 4 and form == "numpy":
            out[i] = (np.array(toks, np.int64), np.array(vals)[None, :])  # not 1-D
        elif kind == 5 and form == "numpy":
            out[i] = (np.array(toks, np.int64), np.array(vals)[:-1])  # lengths differ
    return out


@pytest.mark.parametrize("form", ["list", "numpy", "str"])
def test_many_rows_parse_as_one_by_one(form):
    """parse_tables (the plain callback's rows in bulk) answers exactly as parse_table row by row:
    same ids, values, widths, renormalization counts, vocab, or the same first error."""
    from arenum.step.many import parse_tables

    rng = random.Random(11)
    for trial in range(300):
        raws = _chunk(rng, rng.randint(1, 9), form, defect=trial % 3 == 0)
        pre = [("p", i) for i in range(len(raws))]
        res = []
        for bulk in (True, False):
            vocab, seen = Vocab(), []
            ps = tables_mod.Parser(vocab, 1e-3, seen.append)
            try:
                if bulk:
                    r, ids, lps, widths = parse_tables(raws, pre, ps)
                    tabs = [(ids[r == i].tolist(), lps[r == i].tolist()) for i in range(len(raws))]
                    assert widths.tolist() == [len(t[0]) for t in tabs]
                else:
                    tabs = [tuple(x.tolist() for x in tables_mod.parse_table(raw, p, ps)) for raw, p in zip(raws, pre)]
                res.append(("ok", tabs, sum(seen), vocab.state()))
            except (TypeError, ValueError) as e:
                res.append(("error", type(e), str(e)))
        assert res[0] == res[1], raws
