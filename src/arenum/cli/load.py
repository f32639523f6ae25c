"""Loading a model for the command line: n-gram and PCFG files, local Hugging Face causal LMs."""
from __future__ import annotations

import argparse
import math
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from .common import CLIError, constraint_of
from .._validate import LN2


@dataclass
class Loaded:
    """A model behind the CLI: its enumerable and how strings map to token ids and back."""

    name: str
    enum: Any
    encode: Callable[[str], tuple]
    display: Callable[[Sequence[int]], str]
    info: dict = field(default_factory=dict)

    def forwards(self) -> int:
        """The model's forwards so far: the oracle's counter (what ``stats["forwards"]`` reads, without
        the walk over the tree that ``stats`` makes for its memory figures); a cluster sums its workers'."""
        oracle = getattr(self.enum, "oracle", None)
        if oracle is not None:
            return int(oracle.stats.forwards)
        return int(self.enum.stats["forwards"])


def _estimate_kwargs(args: argparse.Namespace | None) -> dict:
    """Enumerable keywords for estimates past ``--exact-limit`` and for ``--store``."""
    if args is None:
        return {}
    if getattr(args, "store", None) == "":
        raise CLIError("--store needs a folder (got an empty string)")
    store = {"store": args.store} if getattr(args, "store", None) else {}
    if getattr(args, "store_readonly", False):  # --readonly, and arenum serve: many readers, no lock
        if not store:
            raise CLIError("--readonly applies to --store DIR (a store to read without writing)")
        if getattr(args, "command", None) == "build":
            raise CLIError("build writes its store: run it without --readonly")
        store["store_readonly"] = True
    if getattr(args, "exact_limit", None) is None:
        return store
    if args.confidence >= 1.0:
        raise CLIError(f"--confidence must be < 1, got {args.confidence:g}")
    return {"exact_limit": args.exact_limit, "estimate_samples": args.samples, "estimate_seed": args.seed,
            "confidence": args.confidence, **store}


def ngram_loaded(model: Any, name: str, *, max_len: int | None, eos: Any, max_forwards: int,
                  extra: dict | None = None, lowercase: bool = False) -> Loaded:
    if eos is not None and eos != "auto" and eos != model.eos:
        raise CLIError(f"--eos {eos} is not this n-gram's EOS id ({model.eos}); use auto or none")
    terminating = eos is not None
    if not terminating and max_len is None:
        raise CLIError("--eos none (fixed length) needs --max-len")
    enum = model.enumerable(max_len=max_len, terminating=terminating, max_prefixes=max_forwards, **(extra or {}))
    vocab = model.vocab

    def encode(s: str) -> tuple:
        if lowercase:
            s = s.lower()
        items = s.split() if model.kind == "token" else s
        try:
            return tuple(model.encode(items, eos=terminating))
        except ValueError as exc:
            msg = str(exc).replace("fit with unknown='unk'", "fit with --unknown unk")
            if not lowercase and s.lower() != s:
                try:
                    model.encode(s.lower().split() if model.kind == "token" else s.lower(), eos=terminating)
                    msg += f"; --lowercase ranks it as {s.lower()!r}"
                except ValueError:
                    pass
            raise CLIError(f"cannot encode {s!r}: {msg}") from None

    def display(ids: Sequence[int]) -> str:
        ids = [int(t) for t in ids]
        if terminating and ids and ids[-1] == model.eos:
            ids = ids[:-1]
        syms = [vocab[t] if t != model.unk or model.kind != "char" else model.UNK_CHAR for t in ids]
        return "".join(syms) if model.kind == "char" else " ".join(str(s) for s in syms)

    info = {"type": "ngram", "kind": model.kind, "order": model.order, "smoothing": model.smoothing,
            "lowercase": model.lowercase or lowercase, "vocab_size": model.vocab_size, "n_sequences": model.n_sequences,
            "support": "terminating" if terminating else "fixed-length", "max_len": max_len}
    return Loaded(name, enum, encode, display, info)


def pcfg_loaded(model: Any, name: str, *, max_len: int | None, eos: Any, max_forwards: int,
                extra: dict | None = None, lowercase: bool = False) -> Loaded:
    """A :class:`~arenum.models.pcfg.PCFGModel` behind the CLI: strings in and out, token sequences inside."""
    if eos is None:
        raise CLIError("--eos none (fixed length) does not apply to a PCFG model: its passwords end with EOS")
    if eos != "auto" and eos != model.eos:
        raise CLIError(f"--eos {eos} is not this PCFG's EOS id ({model.eos}); use auto")
    enum = model.enumerable(max_len=max_len, max_prefixes=max_forwards, **(extra or {}))

    def encode(s: str) -> tuple:
        try:
            return model.encode(s.lower() if lowercase else s)
        except ValueError as exc:
            raise CLIError(f"cannot encode {s!r}: {exc}") from None

    def display(ids: Sequence[int]) -> str:
        try:
            return model.decode(ids)
        except ValueError:  # not a whole password (a prefix): its tokens
            return " ".join(model.vocab[int(t)] for t in ids)

    info = {"type": "pcfg", "lowercase": model.lowercase or lowercase, "structures": len(model.structures),
            "vocab_size": model.vocab_size, "n_sequences": model.n_sequences, "support": "terminating",
            "max_len": enum.max_len}
    return Loaded(name, enum, encode, display, info)


def load_model_file(path: str) -> Any:
    """The n-gram or PCFG model in ``path`` (by the format tag of the file), with one-line errors."""
    from ..models.pcfg import PCFGModel, file_format

    if os.path.isfile(path) and file_format(path) == "arenum.pcfg":
        try:
            return PCFGModel.load(path)
        except OSError as exc:
            raise CLIError(f"cannot read model file {path!r}: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise CLIError(str(exc).splitlines()[0]) from None
    return load_ngram_file(path)


def close_model(m: Loaded, finished: bool) -> None:
    """Close a command's enumerable (a store: snapshot and release its lock); a run interrupted
    (Ctrl-C) or failed keeps every table, so that the run again scores no saved prefix twice."""
    from ..enumerable import AutoregressiveEnumerable

    if finished or not isinstance(m.enum, AutoregressiveEnumerable):
        m.enum.close()
    else:
        m.enum.close(cut_tables=False)


def check_model_spec(spec: str) -> None:
    """What can be told of a ``--model`` without loading it: the folder or file is there and of a
    model's kind (one-line :class:`CLIError`, the loader's words), so that a command with several
    models (``eval``) refuses a bad one before it works on the others."""
    if spec.startswith("hf:"):
        path = spec[3:]
        if not path:
            raise CLIError("--model hf: needs a folder, e.g. hf:/models/distilgpt2")
        if not os.path.isdir(path):
            raise CLIError(f"hf model folder {path!r} does not exist (only local folders are read; nothing is downloaded)")
        return
    _check_model_file(spec)


def _check_model_file(path: str) -> None:
    if not os.path.exists(path):
        raise CLIError(f"model file {path!r} does not exist")
    if os.path.isdir(path):
        raise CLIError(f"model file {path!r} is a folder (for a Hugging Face model write hf:{path})")
    try:
        with open(path, "rb") as fh:
            magic = fh.read(4)
    except OSError as exc:
        raise CLIError(f"cannot read model file {path!r}: {exc.strerror or exc}") from None
    if magic != b"PK\x03\x04":
        raise CLIError(f"{path!r} is not an arenum n-gram model file (not a .npz archive written by 'arenum fit')")


def load_ngram_file(path: str) -> Any:
    """:meth:`NGramModel.load` with one-line errors for missing, unreadable or malformed files."""
    from ..models.ngram import NGramModel

    _check_model_file(path)
    try:
        return NGramModel.load(path)
    except OSError as exc:
        raise CLIError(f"cannot read model file {path!r}: {exc.strerror or exc}") from None
    except Exception as exc:  # zip, json, key and table errors of a file that is not ours
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise CLIError(f"{path!r} is not a valid arenum n-gram model file ({msg})") from None


def _hf_loaded(path: str, *, prompt: str | None, max_len: int | None, eos: Any, max_forwards: int,
               extra: dict | None = None, args: argparse.Namespace | None = None) -> Loaded:
    check_model_spec("hf:" + path)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # belt and braces: from_pretrained is local-only anyway
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        from transformers.utils import logging as hf_logging

        from ..models.hf import CausalLMOracle
    except ImportError as exc:
        raise CLIError(f"hf: models need torch and transformers (pip install 'arenum[hf]'): {exc}") from None
    hf_logging.disable_progress_bar()  # our own bar (or none) on stderr, not the loader's
    hf_logging.set_verbosity_error()
    try:
        oracle = CausalLMOracle.from_pretrained(path, prompt=prompt)
        c = constraint_of(args, oracle) if args is not None else None
        if c is not None:
            extra = {**(extra or {}), "constraint": c}
        enum = oracle.enumerable(max_len=max_len, eos=eos, max_prefixes=max_forwards, **(extra or {}))
    except (OSError, ValueError, TypeError) as exc:
        raise CLIError(f"cannot load hf model {path!r}: {str(exc).splitlines()[0]}") from None
    eos_id = enum.eos
    tok = oracle.tokenizer

    def encode(s: str) -> tuple:
        if tok is None:
            raise CLIError(f"the hf model at {path!r} has no tokenizer, so strings cannot be encoded")
        try:
            ids = list(tok.encode(s, add_special_tokens=False))
        except TypeError:
            ids = list(tok.encode(s))
        return tuple(int(t) for t in ids) + ((eos_id,) if eos_id is not None else ())

    def display(ids: Sequence[int]) -> str:
        ids = [int(t) for t in ids]
        if eos_id is not None and ids and ids[-1] == eos_id:
            ids = ids[:-1]
        return oracle.decode(ids)

    info = {"type": "hf", "path": path, "prompt": prompt, "vocab_size": oracle.vocab_size, "eos": eos_id,
            "support": "terminating" if eos_id is not None else "fixed-length", "max_len": max_len}
    return Loaded(f"hf:{path}", enum, encode, display, info)


def load_model(args: argparse.Namespace) -> Loaded:
    """The model named by ``--model`` with ``--max-len``/``--eos``/``--prompt``/``--max-forwards``;
    with ``--workers N`` its enumerable is a :class:`arenum.distributed.DistributedEnumerable`."""
    workers = getattr(args, "workers", None)
    if workers is None:
        if getattr(args, "ray_address", None):
            raise CLIError("--ray-address needs --workers N")
        from ..exact import cluster_workers  # the check every store opener makes (exact/store.py)

        n = cluster_workers(getattr(args, "store", None))
        if n:  # refused before the model loads, in the command line's words
            raise CLIError(f"store {args.store} holds a {n}-worker cluster's trees (worker-0 .. worker-{n - 1}): "
                           f"open it with --workers {n}, or give another folder to --store")
        m = _load_model(args)
        if getattr(args, "certify_resolution", None) is not None:
            m.enum.certified_resolution_bits = args.certify_resolution
        if getattr(args, "rank_exact_limit", None) is not None:
            m.enum.rank_exact_limit = args.rank_exact_limit
        return m
    if getattr(args, "exact_limit", None) is not None:
        raise CLIError("--exact-limit (estimates) is not available with --workers")
    if getattr(args, "certify_resolution", None) is not None:
        raise CLIError("--certify-resolution (certified brackets) is not available with --workers")
    if getattr(args, "rank_exact_limit", None) is not None:
        raise CLIError("--rank-exact-limit (certified ranks) is not available with --workers")
    if getattr(args, "store_readonly", False):
        raise CLIError("--readonly is not available with --workers (each worker holds its store's lock)")
    store = getattr(args, "store", None)
    args.store = None  # the local copy (strings to token ids and back) keeps no store
    try:
        m = _load_model(args)
    finally:
        args.store = store
    m.enum = _distributed(args, m, workers, store)
    m.info["workers"] = workers
    return m


def _distributed(args: argparse.Namespace, m: Loaded, workers: int, store: str | None) -> Any:
    from ..distributed import DistributedEnumerable, ModelSpec  # Ray itself is imported by the workers' backend

    path = os.path.abspath(args.model[3:] if args.model.startswith("hf:") else args.model)
    # the constraint as the flags build it, reading no model's tokens: each worker's own model binds
    # its tokens' text (no tokenizer travels with the spec; the name, the store's identity, is the same)
    c = None if m.enum.support.constraint is None else constraint_of(args)
    more = {} if c is None else {"constraint": c}
    if args.model.startswith("hf:"):
        spec = ModelSpec.hf(path, prompt=args.prompt, max_len=args.max_len, eos=args.eos,
                            max_prefixes=args.max_forwards, **more)
    elif m.info.get("type") == "pcfg":
        spec = ModelSpec.pcfg(path, max_len=m.enum.max_len, max_prefixes=args.max_forwards, **more)
    else:
        enum = m.enum
        spec = ModelSpec.ngram(path, max_len=enum.max_len, terminating=enum.terminating,
                               max_prefixes=args.max_forwards, **more)
    try:
        import ray  # noqa: F401
    except ImportError:
        raise CLIError("--workers needs Ray: pip install 'arenum[ray]'") from None
    import sys
    import time

    t0 = time.perf_counter()
    enum = DistributedEnumerable(spec, workers, address=getattr(args, "ray_address", None), store=store)
    if not getattr(args, "quiet", False):  # start-up is paid once per process: said apart from the query's time
        sys.stderr.write(f"arenum: note: {workers} Ray workers started in {time.perf_counter() - t0:.1f} s "
                         "(start-up, not counted in the time printed below; see docs/distributed.md)\n")
    return enum


def _load_model(args: argparse.Namespace) -> Loaded:
    spec = args.model
    if spec.startswith("hf:"):
        check_model_spec(spec)
        path = spec[3:]
        if args.eos is None and args.max_len is None:
            raise CLIError("--eos none (fixed length) needs --max-len")
        return _hf_loaded(path, prompt=args.prompt, max_len=args.max_len, eos=args.eos,
                          max_forwards=args.max_forwards, extra=_estimate_kwargs(args), args=args)
    if args.prompt is not None:
        raise CLIError("--prompt applies to hf: models only")
    model = load_model_file(spec)
    make = pcfg_loaded if type(model).__name__ == "PCFGModel" else ngram_loaded
    extra = _estimate_kwargs(args)
    c = constraint_of(args, model)
    if c is not None:
        extra["constraint"] = c
    return make(model, spec, max_len=args.max_len, eos=args.eos, max_forwards=args.max_forwards,
                extra=extra, lowercase=bool(getattr(args, "lowercase", False)))


def score_strings(m: Loaded, strings: Sequence[str],
                  encoded: Sequence[tuple] | None = None) -> tuple[list[tuple], list[float], list[str | None]]:
    """Encode and score every string (one batched scoring call): ``(token ids, log-probs, errors)``,
    where ``errors[j]`` says why string ``j`` cannot be produced (``None`` when it can). ``encoded``:
    the strings' token ids, already ``m.encode``-d by the caller (not encoded again)."""
    enc: list[tuple] = []
    errors: list[str | None] = []
    if encoded is not None:
        enc, errors = list(encoded), [None] * len(strings)
    for s in strings if encoded is None else ():
        try:
            enc.append(m.encode(s))
            errors.append(None)
        except CLIError as exc:
            enc.append(())
            errors.append(str(exc))
    good = [j for j, e in enumerate(errors) if e is None]
    scores = [-math.inf] * len(strings)
    if good:
        for j, v in zip(good, m.enum.score_sequences([enc[j] for j in good])):
            scores[j] = float(v)
    enum = m.enum
    for j in good:
        ids, lp = enc[j], scores[j]
        if lp == -math.inf:
            if enum.terminating and len(ids) > enum.cap:
                why = f"is {len(ids)} tokens long with EOS, past the length cap {enum.cap}"
            elif not enum.terminating and len(ids) != enum.max_len:
                why = f"is {len(ids)} tokens long, but the enumeration is fixed-length {enum.max_len}"
            elif (out := enum.support.why_outside(ids)) is not None:
                why = f"is outside the support: {out}"
            else:
                why = "has probability 0 under the model"
            errors[j] = f"string {strings[j]!r} {why}"
    return enc, scores, errors


def threshold_arg(args: argparse.Namespace) -> float:
    return args.min_log_prob if args.min_log_prob is not None else -args.bits * LN2
