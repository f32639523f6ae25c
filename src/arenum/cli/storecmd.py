"""``arenum build`` (an exact index into a store, resumable) and ``arenum info`` (what a store holds)."""
from __future__ import annotations

import argparse
import math
import time

from .common import LN2, CLIError, kv
from .commands import Output
from .load import Loaded


def cmd_build(args: argparse.Namespace, m: Loaded) -> Output:
    if not args.store:
        raise CLIError("build needs --store DIR (the folder that keeps the index)")
    st = m.enum.store
    before, t0 = m.forwards(), time.perf_counter()
    saved = st.forwards if st is not None else int(m.enum.stats.get("store_forwards", 0))  # workers: theirs
    lp = float(m.enum.threshold(args.budget))
    stats = m.enum.stats
    doc = {"command": "build", "store": args.store, "budget": args.budget, "threshold_log_prob": lp,
           "built_bits": stats["built_bits"], "indexed_sequences": stats["indexed_sequences"],
           "prefixes": stats["tree_prefixes"], "forwards": m.forwards() - before, "forwards_before": saved,
           "store_forwards": stats.get("store_forwards", 0), "seconds": time.perf_counter() - t0,
           "resumed": saved > 0}
    rows = [("store", args.store),
            ("budget", f"{args.budget:,} sequences (threshold log p = {lp:.4f}, {-lp / LN2:.2f} bits)"),
            ("indexed", f"{stats['indexed_sequences']:,} sequences, {stats['tree_prefixes']:,} prefixes"),
            ("forwards", f"{doc['forwards']:,} now" + (f", {saved:,} already in the store" if saved else "")),
            ("time", f"{doc['seconds']:.2f} s")]
    return Output(doc, kv(rows))


def cmd_info(args: argparse.Namespace) -> Output:
    from ..store import describe_store

    d = describe_store(args.store_dir)
    meta = d["meta"]
    support = "terminating" if meta.get("terminating") else "fixed-length"
    rows = [("store", d["path"]), ("format", f"version {d['version']}, generation {d['generation']}"),
            ("model", d["fingerprint"][:40] + ("..." if len(d["fingerprint"]) > 40 else "")),
            ("support", f"{support}, max_len {meta.get('max_len')}, cap {meta.get('cap')}"),
            ("built", f"{d['built_bits']:.3f} bits, {d['prefixes']:,} prefixes, {d['levels']} levels"),
            ("forwards", f"{d['forwards']:,}"),
            ("size", f"{d['snapshot_bytes'] / 1e6:.1f} MB snapshot + {d['journal_bytes'] / 1e6:.1f} MB journal")]
    if d["journal_bytes"]:
        rows.append(("note", "the journal holds commits after the snapshot (figures above are the snapshot's)"))
    doc = {"command": "info", **{k: v for k, v in d.items() if not (isinstance(v, float) and math.isinf(v))}}
    return Output(doc, kv(rows))
