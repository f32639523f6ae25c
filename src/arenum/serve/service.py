"""The answers behind ``arenum serve``: one model, one store opened read-only, every query bounded.

:class:`Service` opens (or first extends, with ``build``) a store, then reopens it READ-ONLY with the
cap on live prefixes set to what the store holds, so that no request can make a forward past the
built tree (scoring the strings a request sends, one forward per prefix not yet seen, is the only
model work a request can cause). Inside the built budget answers are exact. Past it, a finite-state
model answers with the certified DP's bracket down to ``certify_bits`` (computed once at start-up,
so a request only reads it); deeper, with the plain certified bracket ``[sequences built, 2**bits]``.
A query that needs a position past the built index (``unrank``/``slice`` there) is refused with a
:class:`RequestError` (status 422) that says so.

Every answer is a JSON-ready dict built by the command line's own serializers
(:func:`arenum.cli.rank_record` and friends), so the API and ``arenum ... --json`` speak one schema.
Bad input raises :class:`RequestError` (status 400) with one line naming the parameter and value.
All public methods take one lock: the enumerable is read by one request at a time.
"""
from __future__ import annotations

import argparse
import math
import re
import os
import shutil
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from types import SimpleNamespace
from typing import Any, Sequence

from ..answers import Answers
from .._validate import INT64_MAX, LN2
from ..errors import BudgetExceeded
from ..exact import MANIFEST
from ..cli.common import CLIError, constraint_name, one_line
from ..cli.commands import EXACT_ITEMS, count_answer, item, mass_record, rank_record, threshold_record
from ..cli.load import Loaded, load_model, score_strings
from ..cli.servecmd import DEFAULT_CERTIFY_BITS

__all__ = ["Limits", "RequestError", "ServeConfig", "Service", "prepare", "describe_error", "int_param", "float_param",
           "json_safe", "DEFAULT_CERTIFY_BITS"]


class RequestError(ValueError):
    """A request the server refuses: ``status`` 400 (bad input) or 422 (past the server's caps)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Limits:
    """What one request may ask: strings per batch, characters per string, items per page, curve points."""

    max_batch: int = 100
    max_chars: int = 64
    max_page: int = 100
    max_points: int = 200


@dataclass
class ServeConfig:
    """How ``arenum serve`` opens its model (the command line's options, as plain data).

    model: an n-gram file or ``hf:DIR``. store: the store's folder (``None``: a temporary one,
    built to ``build`` sequences and removed on :meth:`Service.close`). build: extend the store to
    this many sequences first (a writer, holding the store's lock only while it builds).
    max_forwards: cap on that build. certify_bits / certify_resolution: depth (bits) and grid cell
    of the certified DP computed at start-up (finite-state models; 0: none; the default,
    ``DEFAULT_CERTIFY_BITS`` = 64, is the command line's ``--certify-bits`` default). policy, min_length,
    max_length, classes, require, regex, blocklist: the constraint flags of the other commands
    (``docs/constraints.md``): every answer counts only the sequences the constraint accepts.
    """

    model: str
    store: str | None = None
    build: int | None = None
    max_len: int | None = None
    eos: Any = "auto"
    prompt: str | None = None
    max_forwards: int = 5_000_000
    certify_bits: float = DEFAULT_CERTIFY_BITS
    certify_resolution: float | None = None
    limits: Limits = Limits()
    policy: str | None = None
    min_length: int | None = None
    max_length: int | None = None
    classes: int | None = None
    require: list[str] = field(default_factory=list)
    regex: str | None = None
    blocklist: str | None = None

    def as_json(self) -> dict:
        d = asdict(self)
        d["limits"] = asdict(self.limits)
        return d

    @classmethod
    def from_json(cls, d: dict) -> "ServeConfig":
        d = dict(d)
        d["limits"] = Limits(**d.get("limits", {}))
        return cls(**d)


def _args(cfg: ServeConfig, store: str, readonly: bool, max_forwards: int) -> argparse.Namespace:
    return argparse.Namespace(model=cfg.model, max_len=cfg.max_len, eos=cfg.eos, prompt=cfg.prompt, store=store,
                              store_readonly=readonly, max_forwards=max_forwards, workers=None, exact_limit=None,
                              policy=cfg.policy, min_length=cfg.min_length, max_length=cfg.max_length,
                              classes=cfg.classes, require=list(cfg.require), regex=cfg.regex,
                              blocklist=cfg.blocklist)


def int_param(name: str, value: Any, minimum: int = 0, maximum: int = INT64_MAX) -> int:
    """An exact integer in ``[minimum, maximum]`` from a query string or JSON value, else a 400."""
    if isinstance(value, bool):
        raise RequestError(f"{name} must be an integer, got {value!r}")
    if isinstance(value, int):
        v = value
    elif isinstance(value, str) and re.fullmatch(r"[+-]?[0-9]{1,40}", value.strip()):  # ASCII digits only
        v = int(value.strip())
    else:
        raise RequestError(f"{name} must be an integer, got {str(value)[:40]!r}")
    if v < minimum:
        raise RequestError(f"{name} must be >= {minimum}, got {v}")
    if v > maximum:
        raise RequestError(f"{name} must be <= {maximum:,}, got {v}")
    return v


def float_param(name: str, value: Any) -> float:
    """A finite number from a query string or JSON value, else a 400."""
    try:
        if isinstance(value, bool):
            raise ValueError
        if isinstance(value, str) and (not value.isascii() or len(value) > 64 or "_" in value):
            raise ValueError  # float() reads other scripts' digits and 1_0: a number here is ASCII digits
        f = float(value)
    except (TypeError, ValueError):
        raise RequestError(f"{name} must be a number, got {str(value)[:40]!r}") from None
    if not math.isfinite(f):
        raise RequestError(f"{name} must be finite, got {str(value)[:40]!r}")
    return f


def prepare(cfg: ServeConfig, log: Any = None) -> tuple[ServeConfig, bool]:
    """Build the store ``cfg.build`` asks for (as its one writer, holding its lock only while it
    builds), in a new temporary folder when ``cfg.store`` is ``None`` (then ``cfg.build`` defaults to
    100,000). Returns ``(config to open read-only, whether the store is temporary)``."""
    say = log or (lambda s: None)
    temporary = cfg.store is None
    store = tempfile.mkdtemp(prefix="arenum-serve-") if temporary else cfg.store
    build = 100_000 if temporary and cfg.build is None else cfg.build
    try:
        if build is not None:
            t0 = time.perf_counter()
            m = load_model(_args(cfg, store, False, cfg.max_forwards))
            try:
                try:
                    m.enum.threshold(build)
                except IndexError:  # a support smaller than the build: all of it (every later query exact)
                    build = int(m.enum.count(-math.inf))
                say(f"built the {build:,} most likely sequences into {store} ({m.forwards():,} forwards, "
                    f"{time.perf_counter() - t0:.1f} s)")
            finally:
                m.enum.close()
        elif not os.path.exists(os.path.join(store, MANIFEST)):
            raise CLIError(f"store {store!r} does not exist: pass --build N to build the N most likely "
                           "sequences into it first")
    except BaseException:
        if temporary:
            shutil.rmtree(store, ignore_errors=True)
        raise
    return replace(cfg, store=store, build=None), temporary


class Service:
    """One model answering the API's queries from a read-only store (module docstring).

    ``Service.open(config)`` builds (``config.build``) and opens; :meth:`close` releases the store
    (and removes a temporary one). Methods return JSON-ready dicts or raise :class:`RequestError`.
    """

    def __init__(self, m: Loaded, cfg: ServeConfig, store: str, *, temporary: bool = False) -> None:
        self.m = m
        self.cfg = cfg
        self.limits = cfg.limits
        self.store = store
        self._temporary = temporary
        self._lock = threading.Lock()
        enum = m.enum
        self.enum = enum
        self.constraint = constraint_name(enum)  # None: every sequence of the model counts
        enum.seek_index().freeze()  # no request deepens it, not even without a forward: answers never depend on
        # what was asked before (another client's strings would show in a count's lower end)
        self.plain = Answers(enum.seek_index(), enum.support)  # no certified DP, no estimate: never slow
        t0 = time.perf_counter()
        self.indexed = int(self.plain.count_bracket(-math.inf).lo)  # the index of the stored tree (no DP)
        st = enum.stats
        self.built_bits = float(st["built_bits"])
        self.prefixes = int(st["tree_prefixes"])
        self.start_forwards = int(st["forwards"])
        self.certified_bits = 0.0
        cc = enum.certified() if cfg.certify_bits > 0 else None
        if cc is not None:
            if cfg.certify_resolution is not None:
                enum.certified_resolution_bits = cfg.certify_resolution
                cc = enum.certified()
            t = -cfg.certify_bits * LN2
            cc.count_bracket(t)  # every cell down to t, both ends, counts and masses: later reads are lookups
            cc.mass_bracket(t)
            self.certified_bits = float(cfg.certify_bits)
        self.warm_seconds = time.perf_counter() - t0
        self._curve: dict | None = None

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls, cfg: ServeConfig, *, temporary: bool = False) -> "Service":
        """Open ``cfg.store`` read-only, frozen at what it holds (run :func:`prepare` first)."""
        if cfg.store is None or not os.path.exists(os.path.join(cfg.store, MANIFEST)):
            raise CLIError(f"store {cfg.store!r} does not exist: pass --build N to build the N most likely "
                           "sequences into it first")
        probe = load_model(_args(cfg, cfg.store, True, cfg.max_forwards))
        held = int(probe.enum.stats["tree_prefixes"])
        probe.enum.close()
        del probe
        m = load_model(_args(cfg, cfg.store, True, max(1, held)))  # frozen: no request builds past the store
        return cls(m, cfg, cfg.store, temporary=temporary)

    def close(self) -> None:
        """Release the store; a temporary store is removed."""
        with self._lock:
            self.enum.close()
            if self._temporary:
                shutil.rmtree(self.store, ignore_errors=True)

    # ------------------------------------------------------------------ helpers
    def _string(self, name: str, s: Any) -> str:
        if not isinstance(s, str):
            raise RequestError(f"{name} must be a string, got {type(s).__name__}")
        if not s:
            raise RequestError(f"{name} is empty")
        if len(s) > self.limits.max_chars:
            raise RequestError(f"{name} is {len(s)} characters long, past the limit of {self.limits.max_chars}")
        return s

    def _strings(self, strings: Any) -> list[str]:
        if not isinstance(strings, list):
            raise RequestError(f"strings must be a list of strings, got {type(strings).__name__}")
        if not strings:
            raise RequestError("strings is empty: send at least one string")
        if len(strings) > self.limits.max_batch:
            raise RequestError(f"strings holds {len(strings)} strings, past the batch limit of {self.limits.max_batch}")
        return [self._string(f"strings[{j}]", s) for j, s in enumerate(strings)]

    def _encode(self, name: str, s: str) -> tuple:
        try:
            return tuple(self.m.encode(s))
        except CLIError as exc:
            raise RequestError(f"{name}: {exc}") from None

    def _certifiable(self, t: float) -> bool:
        """Whether the certified DP was computed down to ``t`` (a read, never a sweep)."""
        return self.certified_bits > 0 and t >= -self.certified_bits * LN2

    def _steps(self, ids: Sequence[int]) -> list[dict]:
        """Per-step records ``log p(x_t | x_<t)`` of the token ids ``ids`` (one table each, memoized)."""
        o = self.enum.oracle
        out = []
        for j, tid in enumerate(ids):
            toks, lps = o.table(o.tokens(ids[:j]))
            hit = (toks == tid).nonzero()[0]
            lp = float(lps[hit[0]]) if hit.size else -math.inf
            out.append({"token": int(tid), "text": self._label(tid), "log_prob": lp, "bits": -lp / LN2})
        return out

    def _label(self, tid: int) -> str:
        if self.enum.terminating and self.enum.oracle.eos_id == int(tid):
            return ""
        return self.m.display([int(tid)])

    def _tag(self, d: dict) -> dict:
        """``d`` led by the ``constraint`` it answers under, as the command line's JSON (none: ``d``)."""
        return d if self.constraint is None else {"constraint": self.constraint, **d}

    def _rank_one(self, s: float) -> Any:
        """The rank record of a sequence of score ``s`` (from the one scoring call, as ``rank`` would
        compute it: both sum the same per-step log-probs left to right)."""
        if self._certifiable(s):  # exact inside the built index, else the certified DP's bracket (its cells
            return self.enum.answers.rank(s)  # were computed at start-up: a read)
        return self.plain.rank(s)  # exact inside the built index, else the plain certified bracket

    # ------------------------------------------------------------------ queries
    def info(self) -> dict:
        """The model, the store and the server's limits."""
        with self._lock:
            st = self.enum.stats
            return {"model": self.m.name, "constraint": self.constraint,
                    **{k: v for k, v in self.m.info.items() if v is not None},
                    "store": None if self._temporary else self.store, "readonly": True,
                    "built_bits": self.built_bits, "indexed_sequences": self.indexed, "prefixes": self.prefixes,
                    "store_forwards": int(st.get("store_forwards", 0)),
                    "forwards_since_start": int(st["forwards"]) - self.start_forwards,
                    "certified_bits": self.certified_bits,
                    "certified_resolution_bits": self.enum.certified_resolution_bits if self.certified_bits else None,
                    "limits": asdict(self.limits), "warm_seconds": round(self.warm_seconds, 3)}

    def rank(self, strings: Any, steps: bool = True) -> list[dict]:
        """Rank records of ``strings`` in order, as ``arenum rank --json`` writes them (without the
        command and model fields), each with ``steps`` (per-step log-probs) when asked. A string the
        model cannot produce gets ``{"string": s, "error": why}``; an unknown symbol is a 400."""
        out = self.rank_many([(strings, steps)])[0]
        if isinstance(out, BaseException):
            raise out
        return out

    def rank_many(self, requests: Sequence[tuple[Any, bool]]) -> list[list[dict] | Exception]:
        """:meth:`rank` of several requests at once (the server's micro-batch of concurrent rank
        requests): one lock take and one scoring call for all their strings. Each request gets its
        records, or the exception :meth:`rank` would raise for it alone (bad input: a
        :class:`RequestError`); one request's failure leaves the others' answers as they would be."""
        checked: list[tuple[list[str], bool] | Exception] = []
        for strings, steps in requests:
            try:
                checked.append((self._strings(strings), steps))
            except RequestError as exc:
                checked.append(exc)
        with self._lock:
            for i, c in enumerate(checked):
                if not isinstance(c, Exception):
                    try:
                        checked[i] = (c[0], c[1], [self._encode(f"strings[{j}]", s) for j, s in enumerate(c[0])])
                    except RequestError as exc:
                        checked[i] = exc
            flat = [s for c in checked if not isinstance(c, Exception) for s in c[0]]
            enc = [e for c in checked if not isinstance(c, Exception) for e in c[2]]  # encoded once, above
            _, scores, errors = score_strings(self.m, flat, enc) if flat else ([], [], [])
            out: list[list[dict] | Exception] = []
            at = 0
            for c in checked:
                if isinstance(c, Exception):
                    out.append(c)
                    continue
                strings, steps, enc = c
                n = len(strings)
                try:
                    out.append(self._records(strings, enc, scores[at:at + n], errors[at:at + n], steps))
                except Exception as exc:  # noqa: BLE001 - this request's answer is its error (describe_error)
                    out.append(exc)
                at += n
            return out

    def _records(self, strings: list[str], enc: list[tuple], scores: list[float], errors: list[str | None],
                 steps: bool) -> list[dict]:
        """The rank records of one request's strings (the caller holds the lock)."""
        out = []
        for j, s in enumerate(strings):
            if errors[j] is not None:
                out.append({"string": s, "error": errors[j]})
                continue
            before, t0 = self.m.forwards(), time.perf_counter()
            r = self._rank_one(scores[j])
            f = self.m.forwards()
            d = {"string": s, "tokens": list(enc[j]), **rank_record(r), "forwards": f - before,
                 "forwards_total": f, "seconds": round(time.perf_counter() - t0, 4)}
            if steps:
                d["steps"] = [json_safe(st) for st in self._steps(enc[j])]
            out.append(self._tag(json_safe(d)))
        return out

    def threshold(self, k: Any) -> dict:
        """``threshold(k)`` (1-based) as ``arenum threshold --json``: exact inside the index; past it the
        certified bracket when the DP reaches that deep, else a 422."""
        k = int_param("k", k, 1)
        with self._lock:
            if k > self.indexed:
                if not (self.certified_bits and self.enum.count_bracket(-self.certified_bits * LN2).lo >= k):
                    raise RequestError(self._past("k", k, k - 1), 422)
            r = self.enum.threshold(k)
            seq = self.enum.unrank(k - 1)[0] if r.exact else None
            return self._tag({"k": k, **threshold_record(r, self.m, seq)})

    def _past(self, name: str, v: int, rank: int) -> str:
        if self.built_bits == math.inf:  # the whole support is held: nothing past it
            return f"{name}={v:,} is past the end of the support ({self.indexed:,} sequences, all held exactly)"
        return (f"{name}={v:,} is past the built index: the server holds the {self.indexed:,} most likely "
                f"sequences exactly (restart it with --build N to hold rank {rank:,})")

    def unrank(self, i: Any) -> dict:
        """The sequence at 0-based rank ``i`` (exact), as ``arenum unrank --json``; past the index a 422."""
        i = int_param("i", i, 0)
        with self._lock:
            if i >= self.indexed:
                raise RequestError(self._past("i", i, i), 422)
            seq, lp = self.enum.unrank(i)
            return self._tag({**item(self.m, i, seq, lp), **EXACT_ITEMS})

    def slice(self, start: Any, k: Any) -> dict:
        """Ranks ``start .. start + k - 1`` (fewer at the end of the index), as ``arenum slice --json``."""
        start = int_param("start", start, 0)
        k = int_param("k", k, 1, self.limits.max_page)
        with self._lock:
            if start >= self.indexed and self.indexed:
                raise RequestError(self._past("start", start, start), 422)
            n = max(0, min(k, self.indexed - start))
            pairs = self.enum.slice(start, n) if n else []
            items = [item(self.m, start + j, s, lp) for j, (s, lp) in enumerate(pairs)]
            return self._tag({"start": start, "k": k, "items": items, "indexed_sequences": self.indexed,
                              "more": start + len(items) < self.indexed, **EXACT_ITEMS})

    def _threshold_arg(self, min_log_prob: Any, bits: Any) -> float:
        if (min_log_prob is None) == (bits is None):
            raise RequestError("give exactly one of min_log_prob and bits")
        if bits is not None:
            return -float_param("bits", bits) * LN2
        return float_param("min_log_prob", min_log_prob)

    def _answers_for(self, t: float) -> Any:
        """The facade when the answer is exact or certified within the computed cells, else the plain stage."""
        return self.enum if self._certifiable(t) or t >= -self.built_bits * LN2 else SimpleNamespace(answers=self.plain)

    def count(self, min_log_prob: Any = None, bits: Any = None) -> dict:
        """``count(t)`` as ``arenum count --json``: exact, certified or a plain bracket past the index."""
        t = self._threshold_arg(min_log_prob, bits)
        with self._lock:
            return self._tag({"min_log_prob": t, "bits": -t / LN2, **count_answer(self._answers_for(t), t)})

    def mass(self, min_log_prob: Any = None, bits: Any = None) -> dict:
        """``mass_above(t)`` with the count bracket, as ``arenum mass --json``."""
        t = self._threshold_arg(min_log_prob, bits)
        with self._lock:
            a = self._answers_for(t)
            src = a.answers if isinstance(a, SimpleNamespace) else a
            return self._tag({"min_log_prob": t, "bits": -t / LN2,
                              **mass_record(src.count_bracket(t), src.mass_above(t))})

    def curve(self, points: Any = 40) -> dict:
        """The model's guessing curve: exact points (rank, sequences at least that likely, their mass)
        over the built index, then certified points (count and mass brackets) down to ``certify_bits``."""
        from ..report import plot

        n = int_param("points", points, 2, self.limits.max_points)
        with self._lock:
            if self._curve is not None and self._curve["requested"] == n:
                return self._curve
            exact = [asdict(p) for p in plot.exact_curve(self.enum, self.indexed, n)] if self.indexed else []
            cert = []
            if self.certified_bits > self.built_bits:
                step = max(0.5, (self.certified_bits - self.built_bits) / 16)
                b = self.built_bits + step
                while b <= self.certified_bits + 1e-9:
                    t = -b * LN2
                    cb, mb = self.enum.count_bracket(t), self.enum.mass_above(t)
                    cert.append({"bits": b, "log_prob": t, "count_lo": cb.lo, "count_hi": cb.hi, "mass_lo": mb.lo,
                                 "mass_hi": mb.hi, "method": "certified"})
                    b += step
            self._curve = self._tag({"requested": n, "exact": exact, "certified": cert,
                                     "built_bits": self.built_bits, "indexed_sequences": self.indexed})
            return self._curve

    def children(self, prefix: Any, k: Any = None) -> dict:
        """The next tokens after ``prefix`` (``""``: the start) with their probabilities, most likely
        first: the prefix tree, one level at a time (one forward for a prefix not yet seen)."""
        if not isinstance(prefix, str):
            raise RequestError(f"prefix must be a string, got {type(prefix).__name__}")
        if len(prefix) > self.limits.max_chars:
            raise RequestError(f"prefix is {len(prefix)} characters long, past the limit of {self.limits.max_chars}")
        k = self.limits.max_page if k is None else int_param("k", k, 1, self.limits.max_page)
        with self._lock:
            ids = self._encode("prefix", prefix) if prefix else ()
            eos = self.enum.oracle.eos_id if self.enum.terminating else None
            if eos is not None and ids and ids[-1] == eos:
                ids = ids[:-1]
            if len(ids) >= self.enum.cap:
                raise RequestError(f"prefix is {len(ids)} tokens long: sequences end by {self.enum.cap} tokens")
            steps = self._steps(ids)
            lp0 = 0.0
            for st in steps:
                lp0 += st["log_prob"]
            o = self.enum.oracle
            toks, lps = o.table(o.tokens(ids))
            if eos is not None and len(ids) == self.enum.cap - 1:  # the last place: only the end can follow
                toks, lps = toks[toks == eos], lps[toks == eos]
            kids = []
            for tid, lp in zip(toks[:k].tolist(), lps[:k].tolist()):
                total = lp0 + lp
                kids.append({"token": int(tid), "text": self._label(tid), "end": eos is not None and tid == eos,
                             "log_prob": lp, "probability": math.exp(lp), "prefix_log_prob": total,
                             "bits": -total / LN2})
            return self._tag({"prefix": prefix, "tokens": list(ids), "log_prob": lp0, "bits": -lp0 / LN2,
                              "steps": steps, "children": kids, "more": int(toks.shape[0]) - len(kids)})

    def check(self) -> None:
        """Assert the enumerable's invariants (tests)."""
        with self._lock:
            self.enum._check()


def json_safe(d: dict) -> dict:
    """``d`` (a flat record: its values str, int, bool, None, lists of ints, or Python floats) with each
    non-finite float replaced by ``None`` in place, as the command line's JSON writes it: a rank record
    then goes through the C JSON encoder once, with no walk over it first (a few microseconds)."""
    for k, v in d.items():
        if v.__class__ not in _PLAIN and isinstance(v, float) and v - v != 0.0:  # inf - inf, nan - nan: nan
            d[k] = None
    return d


_PLAIN = frozenset({int, str, bool, list, type(None)})  # never a non-finite float: no isinstance call


def describe_error(exc: BaseException) -> tuple[int, str]:
    """``(status, one line)`` of an exception a query raised."""
    if isinstance(exc, RequestError):
        return exc.status, str(exc)
    if isinstance(exc, BudgetExceeded):
        return 422, f"past the server's caps: {one_line(exc)}"
    if isinstance(exc, IndexError):
        return 422, f"out of range: {one_line(exc)}"
    if isinstance(exc, (ValueError, TypeError)):
        return 400, one_line(exc)
    return 500, f"internal error: {type(exc).__name__}"
