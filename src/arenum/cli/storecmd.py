"""``arenum build`` (an exact index into a store, resumable) and ``arenum info`` (what a store holds)."""
from __future__ import annotations

import argparse
import math
import os
import time

from .common import CLIError, kv
from .common import Output
from .load import Loaded
from .._validate import LN2


def cmd_build(args: argparse.Namespace, m: Loaded) -> Output:
    if not args.store:
        raise CLIError("build needs --store DIR (the folder that keeps the index)")
    before, t0 = m.forwards(), time.perf_counter()
    saved = int(m.enum.stats.get("store_forwards", 0))  # one process's store, or the workers' summed
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
    from ..exact import describe_store

    if os.path.exists(os.path.join(args.store_dir, "cluster.json")):  # --workers: one store per worker
        return _cluster_info(args.store_dir, describe_store)
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


def _cluster_info(root: str, describe_store) -> Output:
    """``arenum info`` of a store built with ``--workers``: the plan and every worker's store."""
    import json

    try:
        with open(os.path.join(root, "cluster.json"), encoding="utf-8") as f:
            c = json.load(f)
        n = int(c["workers"])
        plan = json.loads(c["plan"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CLIError(f"{os.path.join(root, 'cluster.json')}: not a readable cluster file ({exc})") from None
    ws = [describe_store(os.path.join(root, f"worker-{j}")) for j in range(n)]
    meta = ws[0]["meta"]
    support = "terminating" if meta.get("terminating") else "fixed-length"
    fp = str(c.get("fingerprint", ""))
    rows = [("store", root), ("workers", f"{n}, plan of {len(plan['units'])} units, {len(plan['tables'])} interior prefixes"),
            ("model", fp[:40] + ("..." if len(fp) > 40 else "")),
            ("support", f"{support}, max_len {meta.get('max_len')}, cap {meta.get('cap')}"),
            ("built", f"{min(w['built_bits'] for w in ws):.3f} bits, {sum(w['prefixes'] for w in ws):,} prefixes"),
            ("forwards", " + ".join(f"{w['forwards']:,}" for w in ws)),
            ("size", f"{sum(w['snapshot_bytes'] for w in ws) / 1e6:.1f} MB snapshots + "
                     f"{sum(w['journal_bytes'] for w in ws) / 1e6:.1f} MB journals")]
    doc = {"command": "info", "path": root, "workers": n, "fingerprint": fp, "units": len(plan["units"]),
           "stores": [{k: v for k, v in w.items() if not (isinstance(v, float) and math.isinf(v))} for w in ws]}
    return Output(doc, kv(rows))
