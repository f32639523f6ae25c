"""Stage 2, the exact engine and the tree on disk.

The prefix tree (``tree``, ``levels``, ``_arrays``) holds the live prefixes for a bit budget as
arrays per level; the index (``index``, ``exactsum``, ``quantize``) files every complete sequence
within the budget under its exact score; :class:`SeekIndex` (``seek``, ``budget``) deepens the
tree on demand and answers count, threshold, unrank, rank and mass exactly; ``count_index`` is the
spec's count index; ``best_first`` lists a support in exact order; ``store`` keeps the tree in a
folder, journaled and crash-safe.

Every answer of this stage is exact inside the budget it was built to. It never estimates: past a
cap it raises or reports the cap, and the regime beyond is :mod:`arenum.beyond`'s.

Exports: the names the other stages and the facade use (below).
"""
from .best_first import best_first, listing
from .budget import BUDGET_HINT
from .count_index import CountHistogram, CountIndex, autoregressive_count_index, build_count_index
from .exactsum import float_units, to_float, values
from .frontier import hist_cum
from .index import ExactIndex, mass_bracket
from .quantize import Quantizer
from .seek import Limits, SeekIndex, default_max_bytes
from .store import PROBES, READONLY_HINT, WRITER_HINT, TreeStore, cluster_workers, open_store, root_fingerprint
from .storefiles import MANIFEST, describe_store
from .tree import DEFAULT_TABLE_BYTES, HIST_BINS_PER_BIT, PrefixTree

__all__ = [
    "BUDGET_HINT", "CountHistogram", "CountIndex", "DEFAULT_TABLE_BYTES", "ExactIndex", "HIST_BINS_PER_BIT",
    "Limits", "MANIFEST", "PROBES", "PrefixTree", "Quantizer", "READONLY_HINT", "SeekIndex", "TreeStore", "WRITER_HINT",
    "autoregressive_count_index", "best_first", "hist_cum", "build_count_index", "default_max_bytes",
    "cluster_workers", "describe_store", "float_units", "listing", "mass_bracket", "open_store", "root_fingerprint", "to_float",
    "values",
]
