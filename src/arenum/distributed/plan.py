"""Shard plans: how one support is cut into disjoint parts, one per worker.

A plan is a *frontier*: a set of prefixes such that every sequence of the support either passes
through exactly one frontier prefix or lies entirely inside the *interior* (the proper ancestors of
frontier prefixes; only an interior node's ``eos`` completion can). Each frontier prefix (a *unit*)
belongs to one worker; an interior node's ``eos`` completion belongs to one worker that owns a unit
below that node. The frontier starts at the first tokens and splits a unit into its children while
it carries much more than its share of the probability mass (a peaked model: one first token holding
most of the mass); units are then dealt to the workers in a snake over their scores, so every worker
gets units of every size and the parts carry similar work at every budget.

A worker's tree is the single-process tree with every interior node's table cut down to the entries
the worker owns (:class:`arenum.distributed.worker.ShardOracle`): the scores of its sequences are
summed left to right from the same table entries, so they are the same floats.

The global order breaks ties by length, then by table positions along the sequence; a worker's
interior tables are cut, so their positions are local. :meth:`ShardPlan.key` gives a sequence's
positions in the *whole* interior tables down to its unit: two tied sequences of the same length in
different workers differ there, and within one unit the worker's own order is the global one.
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from ..step import decode_token, encode_token

__all__ = ["ShardPlan", "plan_shards", "SPLIT_FACTOR", "MAX_SPLITS_PER_WORKER"]

SPLIT_FACTOR = 4
"""A unit is split while its mass exceeds ``1 / (SPLIT_FACTOR * workers)`` of the whole."""
MAX_SPLITS_PER_WORKER = 16
"""At most this many interior tables (forwards) per worker are fetched to plan."""


def _tok(t: Any) -> Any:
    """A token as the plan holds it (numpy ints become ints)."""
    return int(t) if isinstance(t, (np.integer, int)) and not isinstance(t, bool) else t


def _enc(t: Any) -> Any:
    """A token's JSON form (the store's: ``str``, ``bytes`` or ``int``); ``None`` stays ``None``."""
    return None if t is None else encode_token(t)


def _dec(x: Any) -> Any:
    return None if x is None else decode_token(x)


@dataclass
class ShardPlan:
    """A frontier cut of the support (module docstring).

    ``workers``: how many parts. ``units``: frontier prefix -> worker. ``tables``: interior prefix ->
    its whole table's tokens in table order (descending log-prob, ties in the model's order); ``lps``:
    their log-probs (the plan's forwards, so that no worker scores an interior prefix again; a plan
    saved without them is read as it was, its workers scoring their interior prefixes). ``eos_owner``: interior prefix -> the worker counting its ``eos`` completion. ``eos``: the end
    token (``None``: fixed length).
    """

    workers: int
    units: dict[tuple, int] = field(default_factory=dict)
    tables: dict[tuple, list] = field(default_factory=dict)
    eos_owner: dict[tuple, int] = field(default_factory=dict)
    eos: Any = None
    mass: list[float] = field(default_factory=list)
    lps: dict[tuple, list[float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._pos = {p: {t: j for j, t in enumerate(toks)} for p, toks in self.tables.items()}
        owners: dict[tuple, set] = {p: set() for p in self.tables}
        for u, w in self.units.items():
            for k in range(len(u)):
                owners[u[:k]].add(w)
        self._owners = owners

    # ------------------------------------------------------------------ ownership
    @property
    def single(self) -> bool:
        """No cut: worker 0 owns everything (``workers == 1`` or a root that cannot be split)."""
        return not self.tables

    def owns(self, worker: int, prefix: tuple, token: Any) -> bool:
        """Whether ``worker``'s tree keeps ``token`` in the table of the interior node ``prefix``."""
        c = prefix + (token,)
        w = self.units.get(c)
        if w is not None:
            return w == worker
        if c in self.tables:
            return worker in self._owners[c]
        if self.eos is not None and token == self.eos:
            return self.eos_owner.get(prefix) == worker
        return False

    def is_interior(self, prefix: tuple) -> bool:
        return prefix in self.tables

    def owner(self, seq: Sequence[Any]) -> int | None:
        """The worker whose part holds ``seq`` (``None``: none does, a token outside every table)."""
        if self.single:
            return 0
        seq = tuple(seq)
        for k in range(len(seq)):
            p, t = seq[:k], seq[k]
            if p not in self.tables:
                return None
            c = p + (t,)
            w = self.units.get(c)
            if w is not None:
                return w
            if c not in self.tables:
                if self.eos is not None and t == self.eos and k == len(seq) - 1:
                    return self.eos_owner.get(p)
                return None
        return None

    def key(self, seq: Sequence[Any]) -> tuple:
        """Whole-table positions of ``seq``'s tokens down to its unit (the cross-worker tie key)."""
        out = []
        for k in range(len(seq)):
            pos = self._pos.get(tuple(seq[:k]))
            if pos is None:
                break
            out.append(pos.get(seq[k], math.inf))
        return tuple(out)

    # ------------------------------------------------------------------ identity
    def to_json(self, *, log_probs: bool = True) -> str:
        """The plan as JSON; ``log_probs=False`` leaves out the interior tables' log-probs (the
        :meth:`digest`'s form: what cuts the support, the same with or without them)."""
        d = {
            "workers": self.workers,
            "units": [[[_enc(t) for t in u], w] for u, w in self.units.items()],
            "tables": [[[_enc(t) for t in p], [_enc(t) for t in toks]] for p, toks in self.tables.items()],
            "eos_owner": [[[_enc(t) for t in p], w] for p, w in self.eos_owner.items()],
            "eos": _enc(self.eos), "mass": self.mass,
        }
        if log_probs and self.lps:  # float.hex: bit for bit
            d["lps"] = [[[_enc(t) for t in p], [float(v).hex() for v in lp]] for p, lp in self.lps.items()]
        return json.dumps(d, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "ShardPlan":
        d = json.loads(text)
        def seq(xs: list) -> tuple:
            return tuple(_dec(x) for x in xs)
        plan = cls(workers=int(d["workers"]), units={seq(u): int(w) for u, w in d["units"]},
                   tables={seq(p): list(seq(t)) for p, t in d["tables"]},
                   eos_owner={seq(p): int(w) for p, w in d["eos_owner"]}, eos=_dec(d["eos"]), mass=list(d["mass"]),
                   lps={seq(p): [float.fromhex(v) for v in lp] for p, lp in d.get("lps", [])})
        if any(len(lp) != len(plan.tables.get(p, ())) for p, lp in plan.lps.items()):
            raise ValueError("the plan's log-probs do not match its tables")
        return plan

    def digest(self) -> str:
        """A hash of the plan (part of each worker's store fingerprint), its log-probs left out."""
        return hashlib.sha256(self.to_json(log_probs=False).encode()).hexdigest()[:32]

    def describe(self) -> dict:
        return {"workers": self.workers, "units": len(self.units), "interior": len(self.tables),
                "depth": max((len(u) for u in self.units), default=0), "mass": [round(m, 6) for m in self.mass]}


def plan_shards(workers: int, table: Callable[[tuple], tuple[list, np.ndarray]], *, eos: Any,
                leaf_level: int, split_factor: float = SPLIT_FACTOR,
                max_splits: int | None = None) -> ShardPlan:
    """Cut the support into ``workers`` parts of similar probability mass.

    ``table(prefix) -> (tokens, log_probs)``: the whole table at ``prefix`` in table order (one forward).
    ``leaf_level``: the deepest level whose nodes are prefixes (a unit is never split below it).
    Units start as the root's children; the heaviest is split into its children while its mass is
    above ``1 / (split_factor * workers)`` of the whole (at most ``max_splits`` forwards, default
    ``MAX_SPLITS_PER_WORKER * workers``); units are then dealt in a snake by descending score.
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if workers == 1 or leaf_level < 1:
        return ShardPlan(workers=workers, eos=eos, mass=[1.0] + [0.0] * (workers - 1))
    max_splits = MAX_SPLITS_PER_WORKER * workers if max_splits is None else max_splits
    tables: dict[tuple, list] = {}
    lps_of: dict[tuple, list[float]] = {}
    units: dict[tuple, float] = {}  # frontier prefix -> its score
    eos_items: dict[tuple, float] = {}

    final: set[tuple] = set()  # units that cannot be split (no child but eos)

    def split(p: tuple, s: float) -> bool:
        toks, lps = table(p)
        toks = [_tok(t) for t in toks]
        if all(eos is not None and t == eos for t in toks):
            return False
        tables[p] = toks
        lps_of[p] = np.asarray(lps, np.float64).tolist()
        for t, lp in zip(toks, lps_of[p]):
            if eos is not None and t == eos:
                eos_items[p] = s + lp
            else:
                units[p + (t,)] = s + lp
        return True

    if not split((), 0.0):
        return ShardPlan(workers=workers, eos=eos, mass=[1.0] + [0.0] * (workers - 1))
    limit = 1.0 / (split_factor * workers)
    for _ in range(max_splits):
        heavy = [(s, u) for u, s in units.items()
                 if len(u) <= leaf_level - 1 and u not in final and math.exp(s) > limit]
        if not heavy:
            break
        s, u = max(heavy)
        if split(u, s):
            del units[u]
        else:
            final.add(u)
    load = [0.0] * workers
    owner: dict[tuple, int] = {}
    # dealt in a snake over the units by descending score (0, 1, .., W-1, W-1, .., 0, 0, 1, ..): each
    # worker gets units of every size, so the work stays balanced at every budget (a heavy unit of a
    # peaked model holds much mass but few live prefixes: balancing mass alone would not do)
    for r, (u, s) in enumerate(sorted(units.items(), key=lambda kv: (-kv[1], len(kv[0]), repr(kv[0])))):
        k, lap = r % workers, (r // workers) % 2
        w = k if lap == 0 else workers - 1 - k
        owner[u] = w
        load[w] += math.exp(s)
    plan = ShardPlan(workers=workers, units=owner, tables=tables, eos=eos, lps=lps_of)
    for p, s in eos_items.items():  # the eos completion of an interior node: a worker below it
        w = min(plan._owners[p]) if plan._owners[p] else 0
        plan.eos_owner[p] = w
        load[w] += math.exp(s)
    plan.mass = load
    return plan
