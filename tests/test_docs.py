"""Every Python block of README.md and docs/*.md runs, on small fixtures, in seconds.

How a block declares what it needs: an HTML comment on the line right before its fence,

    <!-- docs-test: setup=passwords,hf replace=/models/distilgpt2=>{hf} -->
    ```python
    ...
    ```

``setup=`` names one or more of the fixtures below (their names become globals of the block, their
files sit in the block's working folder, a fresh temporary one); ``replace=OLD=>NEW`` substitutes
text in the block before it runs (``{hf}`` is the tiny checkpoint's folder), e.g. a model path that
stands for the reader's own. A block without the comment runs as it is, with nothing defined. A
signature or a data shape that is not code goes in a ``text`` fence, not a ``python`` one. Blocks
of ``>>>`` lines run as doctests. Each block must finish within ``LIMIT_S`` seconds.

Fixtures: ``passwords`` (``passwords``/``lines``/``test_set``/``test``/``counts``, an order-3
``model`` fitted on them, and files ``pw.npz``, ``pw4.npz``, ``rockyou-counts.txt``), ``ar`` (a small
terminating ``ar`` over a random model with ``EOS``, ``model``, ``bf16_model``, ``seq``, ``corpus``,
``t``, ``k``), ``hf`` (a tiny random GPT-2 with a word tokenizer, saved to a folder), ``rescore``
(``draft_enum``, ``target_enum``, ``draft_index``, ``target``, ``idx``), ``local_workers``
(``DistributedEnumerable`` runs its workers in this process: Ray itself is tested in
``tests/distributed``).
"""
from __future__ import annotations

import doctest
import os
import re
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LIMIT_S = 30.0
FENCE = re.compile(r"^(?P<ind>[ \t]*)```python[ \t]*\n(?P<body>.*?)^(?P=ind)```", re.S | re.M)
DIRECTIVE = re.compile(r"<!--\s*docs-test:(?P<args>.*?)-->\s*$")

PASSWORDS = ["password", "123456", "dragon", "monkey", "letmein", "hunter2", "qwerty", "abc123", "iloveyou",
             "sunshine", "princess", "shadow", "master", "football", "baseball", "welcome", "pass123",
             "admin", "login", "starwars", "trustno1", "correcthorse", "dragon1", "monkey1", "password1"]


def blocks() -> list[tuple[str, int, str, dict]]:
    out = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        for m in FENCE.finditer(text):
            line = text[: m.start()].count("\n") + 1
            prev = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
            d = DIRECTIVE.search(prev)
            opts = _parse(d.group("args")) if d else {}
            out.append((f"{path.relative_to(ROOT)}:{line}", line, textwrap.dedent(m.group("body")), opts))
    return out


def _parse(args: str) -> dict:
    opts: dict = {"setup": [], "replace": []}
    for tok in args.split():
        key, _, val = tok.partition("=")
        if key == "setup":
            opts["setup"] = [s for s in val.split(",") if s]
        elif key == "replace":
            old, _, new = val.partition("=>")
            opts["replace"].append((old, new))
        else:
            raise ValueError(f"unknown docs-test option {tok!r}")
    return opts


# ------------------------------------------------------------------ fixtures
def _passwords(ns: dict, tmp: Path) -> None:
    from arenum.models import NGramModel

    counts = [len(PASSWORDS) - i for i in range(len(PASSWORDS))]
    model = NGramModel.fit(PASSWORDS, order=3)
    model.save(tmp / "pw.npz")
    model.save(tmp / "pw4.npz")
    (tmp / "rockyou-counts.txt").write_text("".join(f"{c} {p}\n" for c, p in zip(counts, PASSWORDS)),
                                            encoding="latin-1")
    test = ["password", "dragon", "hunter2", "zebra!", "monkey1", "qwerty"]  # 'zebra!': unseen symbols
    ns.update(passwords=PASSWORDS, lines=PASSWORDS, counts=counts, test_set=test, test=test, model=model)


def _ar(ns: dict, tmp: Path) -> None:
    from arenum import AutoregressiveEnumerable
    from arenum.testing import RandomModel

    model = RandomModel(8, seed=1, eos=0, eos_boost=8.0)
    ar = AutoregressiveEnumerable(model, eos=0, max_len=16)
    seq = ar.unrank(5)[0]
    ns.update(ar=ar, model=model, bf16_model=model, EOS=0, seq=seq, corpus=[ar.unrank(i)[0] for i in range(8)],
              t=-6.0, k=50)


HF_WORDS = ["<s>", "</s>", "My", "The", "password", "is", "hunter2", "dragon", "secret", "123456", "a", "the",
            "letmein", "qwerty", ".", ","] + [f"w{i}" for i in range(48)]


def _hf(ns: dict, tmp: Path) -> None:
    import tokenizers
    import torch
    import transformers

    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=len(HF_WORDS), n_positions=32, n_embd=16, n_layer=1, n_head=2,
                                  bos_token_id=0, eos_token_id=1)
    model = transformers.GPT2LMHeadModel(cfg)
    tk = tokenizers.Tokenizer(tokenizers.models.WordLevel({w: i for i, w in enumerate(HF_WORDS)}, unk_token="a"))
    tk.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>")
    path = tmp / "tiny-gpt2"
    model.save_pretrained(path)
    tok.save_pretrained(path)
    ns["_hf"] = str(path)


def _rescore(ns: dict, tmp: Path) -> None:
    from arenum import RescoredIndex
    from arenum.models import NGramModel

    corpus = "the cat sat on the mat the cat ate the rat".split()
    draft, target = NGramModel.fit(corpus, order=2), NGramModel.fit(corpus, order=3)
    draft_enum, target_enum = draft.enumerable(max_len=4), target.enumerable(max_len=4)
    idx = RescoredIndex(draft_enum.seek_index(), target_enum, rerank_window=16, assumed_gap=8.0)
    ns.update(draft_enum=draft_enum, target_enum=target_enum, draft_index=draft_enum.seek_index(),
              target=target_enum, idx=idx)


def _local_workers(ns: dict, tmp: Path, monkeypatch) -> None:
    from arenum import distributed
    from arenum.distributed import enumerable as de

    real = de.DistributedEnumerable

    class Local(real):
        def __init__(self, *a, **kw):
            kw.setdefault("backend", "local")
            super().__init__(*a, **kw)

    monkeypatch.setattr(distributed, "DistributedEnumerable", Local)


SETUPS = {"passwords": _passwords, "ar": _ar, "hf": _hf, "rescore": _rescore}


BLOCKS = blocks()


@pytest.mark.parametrize("where,line,code,opts", BLOCKS, ids=[b[0] for b in BLOCKS])
def test_doc_block_runs(where, line, code, opts, tmp_path, monkeypatch):
    from arenum.step import kernels

    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(kernels._state, "choice", kernels._state["choice"])  # a block's set_backend: its own
    ns: dict = {"__name__": "__docs__"}
    for name in opts.get("setup", []):
        if name == "local_workers":
            _local_workers(ns, tmp_path, monkeypatch)
        elif name in SETUPS:
            SETUPS[name](ns, tmp_path)
        else:
            raise AssertionError(f"{where}: unknown docs-test setup {name!r} (known: {sorted(SETUPS)}, local_workers)")
    for old, new in opts.get("replace", []):
        assert old in code, f"{where}: replace={old!r} is not in the block"
        code = code.replace(old, new.format(hf=ns.get("_hf", "")))
    t0 = time.perf_counter()
    if code.lstrip().startswith(">>>"):
        test = doctest.DocTestParser().get_doctest(code, ns, where, where, line)
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
        runner.run(test)
        assert runner.failures == 0, f"{where}: {runner.failures} doctest failures"
    else:
        exec(compile(code, where, "exec"), ns)  # noqa: S102 - the docs' own examples
    secs = time.perf_counter() - t0
    assert secs < LIMIT_S, f"{where} took {secs:.1f} s (limit {LIMIT_S} s): make its fixture smaller"
    for obj in list(ns.values()):  # close what a block opened (stores, workers)
        close = getattr(obj, "close", None)
        if callable(close) and type(obj).__module__.startswith("arenum"):
            try:
                close()
            except Exception:  # noqa: BLE001 - already closed
                pass


def test_every_block_is_found():
    assert len(BLOCKS) >= 20 and all(os.path.exists(ROOT / b[0].split(":")[0]) for b in BLOCKS)
