"""Monte Carlo guess numbers: arenum's draws against a plain vectorized sampler on the same n-gram.

Model: a character 4-gram (``NGramModel.fit(words, order=4)``, Kneser-Ney defaults) on the 30,000
``english_wikipedia`` words shipped in ``zxcvbn`` when it is installed, else on 30,000 words the
benchmark generates (seed 0); terminating, ``max_len`` 24.

Samplers, all in one process, each timed from nothing to an estimator that answers ranks:

- ``plain``: written here, the textbook method. The finite-state tables' rows (eos as one more
  column) as float CDFs with the state index added (``cdf[s] + s``); each step draws ``u`` for
  every live draw and finds its token by ONE ``np.searchsorted`` over the flat table; then the
  scores sorted once with the prefix sum of ``1/p``; a rank is one binary search.
- ``arenum``: ``enum.monte_carlo(n, head=False)`` (the finite-state walk of
  :func:`arenum.beyond.draws.walk_finite_state`: exact integer step widths, a row scan per draw) and
  ``est.rank(log_prob)`` per query (intervals included).
- ``arenum-callback`` (up to ``--callback-max`` draws): the same model served as a user's dense
  batch callback (``batch_next_logprobs``), no finite-state tables: level-wise draws, one batched
  call per level.

Accuracy: words of the list whose exact rank is affordable (``--exact-words`` of them, ranks found
by the exact engine, one forward per live prefix) get estimated ranks from every sampler at every
size; reported: median relative error and the fraction of arenum's intervals that cover the exact
rank (over ``--seeds`` seeds at the largest size that runs them).

Run: ``python benchmarks/bench_mc.py`` (``--sizes 4 5 6`` exponents of the draw count; add 7 if you
have the time and about 3 GB). Writes ``benchmarks/results/mc.json``.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import time

import numpy as np


def _words() -> tuple[list[str], str]:
    try:
        from zxcvbn.frequency_lists import FREQUENCY_LISTS
        return list(FREQUENCY_LISTS["english_wikipedia"]), "zxcvbn english_wikipedia (30,000 words)"
    except ImportError:
        rng = np.random.default_rng(0)
        letters = np.array(list("etaoinshrdlcumwfgypbvkjxqz"))
        p = 1.0 / np.arange(1, 27) ** 0.9
        p /= p.sum()
        words = ["".join(rng.choice(letters, size=int(k), p=p)) for k in rng.integers(2, 12, size=30_000)]
        return words, "30,000 generated words (seed 0)"


class PlainSampler:
    """Ancestral draws over finite-state tables, one ``np.searchsorted`` per step, then a sorted
    prefix sum of ``1/p`` for ranks (the method the benchmark compares with)."""

    def __init__(self, fs, eos: int, max_len: int) -> None:
        tokens, lps, nxt, end = fs.step_tables(True)
        self.lp = np.concatenate((lps, end[:, None]), axis=1)  # (S, C): last column is eos
        self.nxt = np.concatenate((nxt, np.full((nxt.shape[0], 1), -1, nxt.dtype)), axis=1).astype(np.int64)
        S, C = self.lp.shape
        cdf = np.cumsum(np.exp(self.lp), axis=1)
        cdf /= cdf[:, -1:]
        self.flat = (cdf + np.arange(S)[:, None]).reshape(-1)
        self.C, self.start, self.max_len = C, int(fs.start), max_len

    def draw(self, n: int, seed: int) -> np.ndarray:
        """Log-probs of ``n`` complete draws (``-inf`` for one that hit ``max_len``)."""
        rng = np.random.default_rng(seed)
        score = np.full(n, -math.inf)
        alive = np.arange(n)
        state = np.full(n, self.start, np.int64)
        sc = np.zeros(n)
        C, lp, nxt = self.C, self.lp.reshape(-1), self.nxt.reshape(-1)
        for _ in range(self.max_len):
            g = np.searchsorted(self.flat, state + rng.random(alive.size), side="right")
            g = np.minimum(g, state * C + C - 1)  # float edge: stay in the row
            sc = sc + lp[g]
            end = g - state * C == C - 1
            score[alive[end]] = sc[end]
            keep = ~end
            alive, sc, state = alive[keep], sc[keep], nxt[g[keep]]
            if alive.size == 0:
                break
        return score

    @staticmethod
    def ranks(scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The sorted prefix sum: descending scores and cumulative ``1/p`` over the draws."""
        s = np.sort(-scores[scores > -math.inf])  # ascending -score
        return s, np.cumsum(np.exp(s))

    @staticmethod
    def rank(table: tuple[np.ndarray, np.ndarray], n: int, s0: float) -> float:
        s, c = table
        k = int(np.searchsorted(s, -s0, side="left"))  # draws with score > s0
        return float(c[k - 1]) / n if k else 0.0


def main() -> None:
    from arenum import AutoregressiveEnumerable
    from arenum.models import NGramModel

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[4, 5, 6])
    ap.add_argument("--callback-max", type=int, default=5, help="largest exponent for the callback sampler")
    ap.add_argument("--exact-words", type=int, default=11)
    ap.add_argument("--max-rank", type=float, default=3e5, help="exact ranks up to about this")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--queries", type=int, default=2000, help="rank queries timed per sampler")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "mc.json"))
    a = ap.parse_args()

    words, corpus = _words()
    t0 = time.perf_counter()
    model = NGramModel.fit(words, order=4)
    fit_s = time.perf_counter() - t0
    L = 24
    enum = model.enumerable(max_len=L)
    t0 = time.perf_counter()
    fs = model.finite_state()
    fs_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    plain = PlainSampler(fs, model.eos, L)
    plain_build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    enum.finite_state_sampler()  # arenum's tables by state, built once like the plain sampler's
    arenum_build_s = time.perf_counter() - t0

    # exact ranks of words whose rank is affordable
    exact_enum = model.enumerable(max_len=L)
    cand = sorted(((exact_enum.log_density(model.encode(w)), w) for w in words[:3000]), reverse=True)
    thr = exact_enum.threshold(int(a.max_rank))
    picks = [x for x in cand if x[0] >= thr][:: max(1, len([x for x in cand if x[0] >= thr]) // a.exact_words)]
    picks = picks[: a.exact_words]
    t0 = time.perf_counter()
    truth = [(w, lp, int(exact_enum.rank(model.encode(w)).rank)) for lp, w in picks]
    exact_s = time.perf_counter() - t0
    print(f"model: 4-gram on {corpus}; {fs.n_states} states x {len(fs.tokens)} tokens; fit {fit_s:.2f}s, "
          f"finite-state tables {fs_s:.2f}s, "
          f"sampler tables: plain {plain_build_s:.2f}s, arenum {arenum_build_s:.2f}s; {len(truth)} words with exact ranks {min(t[2] for t in truth)}.."
          f"{max(t[2] for t in truth)} ({exact_s:.1f}s)")

    rng = np.random.default_rng(1)
    q_scores = rng.uniform(min(t[1] for t in truth) - 10, max(t[1] for t in truth), size=a.queries)
    rows = []
    for e in a.sizes:
        n = 10**e
        row: dict = {"n": n}
        # plain
        t0 = time.perf_counter()
        sc = plain.draw(n, seed=0)
        row["plain_draw_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        table = plain.ranks(sc)
        row["plain_index_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        for s0 in q_scores:
            plain.rank(table, n, float(s0))
        row["plain_rank_qps"] = a.queries / (time.perf_counter() - t0)
        row["plain_relerr"] = float(np.median([abs(plain.rank(table, n, lp) - r) / r for _, lp, r in truth]))
        # arenum, finite-state walk
        enum._beyond._mc.clear()
        t0 = time.perf_counter()
        est = enum.monte_carlo(n, head=False, seed=0)
        row["arenum_s"] = time.perf_counter() - t0  # draws + the estimator's sorted sums
        assert est.samples.extra.get("sampler") == "finite_state"
        t0 = time.perf_counter()
        for s0 in q_scores:
            est.rank(float(s0))
        row["arenum_rank_qps"] = a.queries / (time.perf_counter() - t0)
        res = [est.rank(lp) for _, lp, _ in truth]
        row["arenum_relerr"] = float(np.median([abs(x.rank - r) / r for x, (_, _, r) in zip(res, truth)]))
        row["arenum_cover"] = float(np.mean([x.rank_lo <= r <= x.rank_hi for x, (_, _, r) in zip(res, truth)]))
        row["ratio"] = row["arenum_s"] / (row["plain_draw_s"] + row["plain_index_s"])
        # arenum through a user's dense batch callback (no finite-state tables)
        if e <= a.callback_max:
            cb = AutoregressiveEnumerable(model.next_logprobs, batch_next_logprobs=model.batch_next_logprobs,
                                          eos=model.eos, max_len=L, batch_size=4096)
            t0 = time.perf_counter()
            est_cb = cb.monte_carlo(n, head=False, seed=0)
            row["callback_s"] = time.perf_counter() - t0
            row["callback_forwards"] = est_cb.samples.forwards
            res = [est_cb.rank(lp) for _, lp, _ in truth]
            row["callback_relerr"] = float(np.median([abs(x.rank - r) / r for x, (_, _, r) in zip(res, truth)]))
        rows.append(row)
        print(f"done 1e{e}", flush=True)

    # coverage over seeds at the largest size with seeds affordable
    n_cov = 10 ** min(max(a.sizes), 5)
    cover = []
    for sd in range(a.seeds):
        enum._beyond._mc.clear()
        est = enum.monte_carlo(n_cov, head=False, seed=100 + sd)
        cover += [est.rank(lp).rank_lo <= r <= est.rank(lp).rank_hi for _, lp, r in truth]
    coverage = float(np.mean(cover))

    hdr = ("draws", "plain s", "arenum s", "arenum/plain", "plain draws/s", "arenum draws/s", "callback s",
           "plain ranks/s", "arenum ranks/s", "rel.err plain", "rel.err arenum", "arenum covers")
    print("\n" + " | ".join(hdr))
    print("-" * 150)
    for r in rows:
        p = r["plain_draw_s"] + r["plain_index_s"]
        print(" | ".join([
            f"{r['n']:.0e}", f"{p:.3f}", f"{r['arenum_s']:.3f}", f"{r['ratio']:.2f}", f"{r['n'] / p:.3g}",
            f"{r['n'] / r['arenum_s']:.3g}", f"{r['callback_s']:.2f}" if "callback_s" in r else "-",
            f"{r['plain_rank_qps']:.3g}", f"{r['arenum_rank_qps']:.3g}", f"{100 * r['plain_relerr']:.2f}%",
            f"{100 * r['arenum_relerr']:.2f}%", f"{r['arenum_cover']:.2f}",
        ]))
    print(f"\ninterval coverage over {a.seeds} seeds x {len(truth)} words at n = {n_cov:.0e}: {coverage:.3f} "
          f"(confidence 0.95)")
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump({"benchmark": "mc", "corpus": corpus, "states": fs.n_states, "columns": len(fs.tokens),
                   "fit_s": fit_s, "finite_state_s": fs_s, "plain_build_s": plain_build_s,
                   "arenum_build_s": arenum_build_s,
                   "truth": truth, "rows": rows, "coverage": coverage, "coverage_n": n_cov,
                   "machine": platform.platform(),
                   "how": "one process; times from nothing to an estimator answering ranks; the model's "
                          "finite-state tables are built once before (finite_state_s)"}, f, indent=2)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
