"""The builders: password policies (presets and parts, lengths in characters over multi-character
tokens), blocklists, regular expressions (character models and a transformer's tokens), each
checked against brute force with the filter applied."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest

from arenum import AutoregressiveEnumerable, why_rejected
from arenum.constraints import PRESETS, Blocklist, Policy, Regex, build, char_class, policy
from arenum.models import NGramModel
from arenum.testing import RandomModel, brute_force

# four-character tokens of one class each, a mixed one, and a one-character one: lengths in characters
PIECES = ["abcd", "EFGH", "1234", "!@#$", "aB3", "x", "<eos>"]


def _text(t):
    return "" if t == "<eos>" else t


def _filtered(bf, c):
    return [(q, s) for q, s in bf if why_rejected(c, q[:-1]) is None]


def _check(ar, bf):
    n = len(bf)
    assert int(ar.count(-math.inf)) == n
    for i in range(0, n, max(1, n // 40)):
        q, s = ar.unrank(i)
        assert (tuple(q), s) == bf[i]
        assert ar.rank(q).rank == sum(1 for _, v in bf if v > s)
        assert int(ar.count(s)) == sum(1 for _, v in bf if v >= s)


def _expected(text: str, spec: dict) -> bool:
    classes = {char_class(ch) for ch in text}
    return (len(text) >= spec.get("min_len", 0) and len(text) <= spec.get("max_len", 10**9)
            and len(classes) >= spec.get("min_classes", 0))


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_count_characters_of_multi_character_tokens(name):
    m = RandomModel(PIECES, seed=4, eos="<eos>", eos_boost=0.7)
    c = policy(name, text=_text)
    cap = 6
    ar = AutoregressiveEnumerable(m, eos="<eos>", max_len=cap, constraint=c)
    everything = brute_force(m.table, eos="<eos>", cap=cap)
    bf = _filtered(everything, c)
    assert bf == [(q, s) for q, s in everything if _expected("".join(map(_text, q)), PRESETS[name])]
    assert bf, name
    _check(ar, bf)


def test_policy_by_parts_and_required_classes():
    m = RandomModel(["a", "B", "7", "!", "$"], seed=9, eos="$", eos_boost=0.8)
    c = Policy(min_len=2, max_len=4, min_classes=2, required=["digit"])
    assert c.name == "policy(min_len=2, max_len=4, classes>=2, required=digit)"
    ar = AutoregressiveEnumerable(m, eos="$", max_len=6, constraint=c)
    everything = brute_force(m.table, eos="$", cap=6)
    bf = _filtered(everything, c)
    want = [(q, s) for q, s in everything
            if 2 <= len(q) - 1 <= 4 and "7" in q and len({char_class(x) for x in q[:-1]}) >= 2]
    assert bf == want and bf
    _check(ar, bf)
    # max_len: nothing past 4 characters is ever scored (prefixes of 5 characters are pruned)
    assert all(len(p) <= 4 for p in ar.oracle._cache) if ar.oracle._cache else True
    with pytest.raises(ValueError, match="max_len=1 is below min_len=2"):
        Policy(min_len=2, max_len=1)
    with pytest.raises(ValueError, match="required classes"):
        Policy(required=["vowel"])
    with pytest.raises(ValueError, match="policy must be one of"):
        policy("basic9")


def test_blocklist_removes_exactly_the_listed_strings():
    m = RandomModel(["a", "b", "c", "$"], seed=6, eos="$")
    everything = brute_force(m.table, eos="$", cap=5)
    words = ["".join(q[:-1]) for q, _ in everything[:6]] + ["zzz"]
    b = Blocklist(words)
    assert b.size == 7 and "blocklist(7 words" in b.name
    ar = AutoregressiveEnumerable(m, eos="$", max_len=5, constraint=b)
    bf = [(q, s) for q, s in everything if "".join(q[:-1]) not in words]
    assert _filtered(everything, b) == bf
    _check(ar, bf)
    # rank and count: the unconstrained ones minus the listed strings that outrank
    plain = AutoregressiveEnumerable(m, eos="$", max_len=5)
    for q, s in bf[:10]:
        listed_above = sum(1 for w, v in everything if "".join(w[:-1]) in words and v > s)
        assert ar.rank(q).rank == plain.rank(q).rank - listed_above


def test_blocklist_file(tmp_path):
    p = tmp_path / "block.txt"
    p.write_text("123456\r\npassword\n\nqwerty\n")
    b = Blocklist.from_file(str(p))
    assert b.size == 3 and b.name.startswith("blocklist(block.txt: 3 words")
    assert why_rejected(b, "password") and why_rejected(b, "passwor") is None
    latin = tmp_path / "latin.txt"
    latin.write_bytes("abc\nmañana\n".encode("latin-1"))  # its word kept as a stray byte would never match
    with pytest.raises(ValueError, match=r"is not utf-8 text \(line 2, byte 6\)") as e:
        Blocklist.from_file(str(latin))
    assert "\n" not in str(e.value)
    assert why_rejected(Blocklist.from_file(str(latin), encoding="latin-1"), "mañana")


def test_regex_on_a_character_ngram():
    words = ["ab12", "abc1", "ba21", "cab", "a1", "bb22", "c3", "abc12"]
    m = NGramModel.fit(words, order=2)
    r = Regex(r"[a-c]{1,3}[0-9]{2}")
    ar = m.enumerable(max_len=6, constraint=r)  # the model binds its symbols as the tokens' text
    text, _ = m.token_text()
    V, eos = m.vocab_size, m.eos

    def table(prefix):
        lps = np.asarray(m.next_logprobs(prefix))
        ids = np.arange(V)
        o = np.argsort(-lps, kind="stable")
        return [int(ids[i]) for i in o], [float(lps[i]) for i in o]

    everything = brute_force(table, eos=eos, cap=6)
    bf = [(q, s) for q, s in everything if re.fullmatch(r"[a-c]{1,3}[0-9]{2}", "".join(text(t) for t in q[:-1]))]
    assert bf
    _check(ar, bf)
    with pytest.raises(ValueError, match=r"cannot be compiled: missing \), unterminated subpattern"):
        Regex("a(")
    with pytest.raises(ValueError, match=r"cannot be compiled: unsupported construct '\^'"):
        Regex("^a")


def test_regex_reads_classes_and_refuses_look_arounds_as_python_does():
    """A class whose first member is ']' (a literal to Python) matches as re.fullmatch does, over
    every string up to 3 characters of an alphabet holding ']', '[', '^', '\\' and '-'; look-arounds
    are refused in one line."""
    import itertools

    alphabet = "ab]-[^\\"
    strings = ["".join(t) for n in range(4) for t in itertools.product(alphabet, repeat=n)]
    for pat in [r"[]a]", r"[^]a]", r"x[]]|[^]]+", r"[]]*", r"[]-a]+", r"[^]]b", r"[\]a]+", r"[a\]]]", r"[]^]",
                r"[^^]", r"[\\]]", r"(?:[]b]|a)+", r"[]]{2}"]:
        r = Regex(pat)
        for st in strings:
            assert (why_rejected(r, st) is None) == (re.fullmatch(pat, st) is not None), (pat, st)
    for pat in ["a(?=b)b?", "a(?!b).", "(?<=a)b", "(?<!a)b", "(?:a(?=b))*b"]:
        with pytest.raises(ValueError, match=r"cannot be compiled: look-arounds .* are not supported") as e:
            Regex(pat)
        assert "\n" not in str(e.value)


def test_build_from_options(tmp_path):
    assert build() is None
    c = build(policy="basic8", regex="[a-z]+[0-9]", classes=2)
    assert c.name == "basic8 & policy(classes>=2) & regex([a-z]+[0-9])"
    assert why_rejected(c, "abcdefg1") is None and why_rejected(c, "abcdefgh")
    p = tmp_path / "b.txt"
    p.write_text("abcdefg1\n")
    assert why_rejected(build(policy="basic8", blocklist=str(p)), "abcdefg1")


def test_regex_count_on_a_small_transformer_equals_brute_force():
    import torch
    import transformers

    from arenum.models.hf import CausalLMOracle

    pieces = ["a", "b", "ab", "1", "12", "!", "<eos>"]  # token id -> text; the last one ends
    V, eos = len(pieces), len(pieces) - 1
    cfg = transformers.GPT2Config(vocab_size=V, n_positions=16, n_embd=16, n_layer=1, n_head=2,
                                  bos_token_id=0, eos_token_id=eos)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    oracle = CausalLMOracle(model, prompt=[0], eos=eos, dtype=torch.float64)  # float32 sums vary with the batch
    pat = r"(a|b)+1[0-9]*"
    c = Regex(pat, text=lambda t: "" if t == eos else pieces[t])
    cap = 4
    ar = oracle.enumerable(max_len=cap, constraint=c)
    plain = oracle.enumerable(max_len=cap)
    everything = [(tuple(q), s) for q, s in plain.slice(0, int(plain.count(-math.inf)))]
    want = [(q, s) for q, s in everything if re.fullmatch(pat, "".join(pieces[t] for t in q[:-1]))]
    assert len(want) > 5
    n = int(ar.count(-math.inf))
    assert n == len(want)
    got = [(tuple(q), s) for q, s in ar.slice(0, n)]
    assert [q for q, _ in got] == [q for q, _ in want]
    np.testing.assert_allclose([s for _, s in got], [s for _, s in want], rtol=0, atol=1e-9)
    for q, s in got:
        assert int(ar.count(s)) == sum(1 for _, v in got if v >= s)
        assert ar.rank(q).rank == sum(1 for _, v in got if v > s)


def test_a_tokenizer_gives_the_token_text_by_itself(tiny_word_gpt2):
    """``CausalLMOracle.enumerable(constraint=Regex(...))`` reads each id's text through the
    tokenizer (no ``text=``): the count equals brute force over the decoded tokens."""
    from arenum.models.hf import CausalLMOracle

    model, tok, words = tiny_word_gpt2(1)
    oracle = CausalLMOracle(model, tok, prompt=[0], eos=1)
    pat = r"(ab|c)+7+"
    ar = oracle.enumerable(max_len=4, constraint=Regex(pat))
    plain = oracle.enumerable(max_len=4)
    every = [(tuple(q), s) for q, s in plain.slice(0, int(plain.count(-math.inf)))]
    want = [q for q, _ in every if re.fullmatch(pat, "".join(tok.decode([t]) for t in q[:-1]))]
    assert len(want) >= 3
    assert int(ar.count(-math.inf)) == len(want)
    assert [tuple(q) for q, _ in ar.slice(0, len(want))] == want


# ------------------------------------------------------------------ edges a randomized harness found
def test_a_constraint_that_accepts_nothing_counts_zero_past_a_cap():
    """Nothing the model makes has a capital: the product is empty, the certified DP counts 0 (every
    query past a cap raised ValueError before; accepted_mass too, without a cap)."""
    from arenum.constraints import accepted_mass

    m = NGramModel.fit(["ab", "ba", "a"], order=2)
    c = Policy(required=["upper"])
    assert m.enumerable(max_len=6, constraint=c).count(-math.inf) == 0
    e = m.enumerable(max_len=6, constraint=c, max_prefixes=2)
    assert tuple(e.count_bracket(-20.0)) == (0, 0) and e.count(-20.0) == 0
    assert (e.mass_above(-20.0).lo, e.mass_above(-20.0).hi) == (0.0, 0.0)
    with pytest.raises(IndexError, match="beyond the support"):
        e.threshold(1)
    m2 = NGramModel.fit(["ab", "ba", "abab", "a"], order=2)  # non-empty model support, empty at this length cap
    with pytest.raises(IndexError, match="beyond the support"):
        m2.enumerable(max_len=3, constraint=Policy(min_len=4), max_bytes=2000).threshold(1)
    assert accepted_mass(m.enumerable(max_len=6, constraint=c)).hi == 0.0


def test_the_plain_rank_bracket_does_not_pass_the_true_cumulative_mass():
    from fractions import Fraction

    m = NGramModel.fit(["", "a1", "b1"], order=1, smoothing="addk")
    e = m.enumerable(max_len=3, constraint=Regex("1|a|ab1"), max_prefixes=1, finite_state=None)
    q = m.encode("1")
    r = e.rank(q)
    s = e.log_density(q)
    full = m.enumerable(max_len=3, constraint=Regex("1|a|ab1"))
    true = sum(Fraction(float(np.exp(x))) for _, x in full.slice(0, 10) if x >= s)
    assert Fraction(r.cumulative_lo) <= true <= Fraction(r.cumulative_hi), (r, float(true))


def test_builder_inputs_and_classes_say_what_they_are():
    with pytest.raises(TypeError, match="a list of strings, got one str"):
        Blocklist("password")  # it blocked the 8 characters one by one
    from arenum import Automaton, AutoregressiveEnumerable
    from arenum.constraints import build, policy
    from arenum.models import PCFGModel

    # each was a raw internal error not naming the parameter, a wrong one, or silently accepted (QA)
    for make, exc, match in [
        (lambda: Policy(required=None), TypeError, "required must be a list of class names"),
        (lambda: Policy(required="digit"), TypeError, r"got str 'digit' \(write \['digit'\]\)"),
        (lambda: policy(["basic8"]), TypeError, "policy must be a preset name"),
        (lambda: Blocklist(None), TypeError, "words must be a list of strings, got NoneType"),
        (lambda: build(blocklist=5), TypeError, "blocklist must be a file path or a list of words, got int 5"),
        (lambda: Automaton(0, None, [0]), TypeError, "transitions must be a mapping"),
        (lambda: Automaton(0, {0: {"a": 0}}, 0), TypeError, "accepting must be a collection of states"),
        (lambda: Regex("a", text=5), TypeError, "text must be a function of a token"),
        (lambda: Policy(min_len=1, text="x"), TypeError, "text must be a function of a token"),
        (lambda: Policy(max_len=3, min_classes=4), ValueError, "accepts nothing: 4 character classes need 4 characters"),
        (lambda: Policy(max_len=1, required=["digit", "upper"]), ValueError, "accepts nothing"),
        (lambda: AutoregressiveEnumerable(lambda p: [(0, 0.0)], max_len=2, constraint=Policy), TypeError,
         "got the class Policy: make one"),
        (lambda: PCFGModel.fit(["ab1"]).decode([0.9, 2.7]), TypeError, "token 0.9 at position 0 is not an integer"),
        (lambda: PCFGModel.fit(["ab1"]).decode(["0"]), TypeError, "token '0' at position 0 is not an integer"),
        (lambda: PCFGModel.fit(["ab1"]).decode("ab"), TypeError, "decode takes token ids"),
    ]:
        with pytest.raises(exc, match=match) as e:
            make()
        assert "\n" not in str(e.value)
    assert Policy(max_len=4, min_classes=4).min_classes == 4
    assert char_class("7") == 2 and char_class("²") == 3 and char_class("③") == 3  # ASCII digits, as the PCFG
    assert why_rejected(Policy(required=["digit"]), "password²") is not None
    for pat, s in [(r"\w+", "café"), (r"\w+", "cafe"), (r"\d", "٣"), (r"\D", "٣"), (r"\s", "\u00a0"), (r"[\wé]+", "café")]:
        assert (why_rejected(Regex(pat), s) is None) == (re.fullmatch(pat, s, re.ASCII) is not None), (pat, s)


def test_a_curve_whose_draws_do_not_fit_the_caps_keeps_its_certified_brackets():
    from arenum.report import guessing_curve

    m = NGramModel.fit(["ab1", "ba", "a1b"], order=2)
    test = [m.encode("ab1ba", eos=False), m.encode("aaab1", eos=False)]

    def e():
        return m.enumerable(max_len=5, terminating=False, constraint=Policy(min_len=3), max_bytes=20_000)

    assert guessing_curve(e(), test, estimate=True).at(10) == guessing_curve(e(), test, estimate=False).at(10)


def test_a_constraint_whose_states_never_repeat_gets_brackets_not_a_wait(monkeypatch):
    """A counter (a new state each token) has no finite product: the product gives up after
    MAX_TRANSITIONS step calls (it ran without end before) and the answer past a cap is a bracket."""
    from arenum import Constraint
    from arenum.step import constrained

    monkeypatch.setattr(constrained, "MAX_TRANSITIONS", 1 << 12)

    class EvenLength(Constraint):
        name, start = "even-length-counter", 0

        def step(self, q, t):
            return q + 1

        def accepts(self, q):
            return q % 2 == 0

    m = NGramModel.fit(["ab", "ba", "abab", "a"], order=2)
    truth = m.enumerable(max_len=6, constraint=EvenLength()).count(-8.0)
    b = m.enumerable(max_len=6, constraint=EvenLength(), max_prefixes=2).count_bracket(-8.0)
    assert b.lo <= truth <= b.hi and not b.exact
