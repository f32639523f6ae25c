"""Stage 4, reports: guessing curves of a test set and their plots.

``curves`` computes what fraction of a test set a guesser who tries sequences in the model's order
has found after ``g`` guesses (exact inside the exact head, bracketed or estimated past it, each
point saying which); ``plot`` draws curves and cumulative-mass curves to PNG, SVG or PDF. This is the only
place matplotlib is imported, and only when a plot is drawn.

Exports: :func:`guessing_curve` (a :class:`~arenum.report.curves.GuessCurve` of
:class:`~arenum.report.curves.CurvePoint`), :func:`draw_guessing_curves`, :class:`Mark`,
:func:`save_png` / :func:`save_figure` (PNG, SVG, PDF by the extension), the comparisons of
:mod:`~arenum.report.compare` (:func:`min_auto`, :func:`read_reference_csv`, :func:`reference_curve`), the module :mod:`~arenum.report.plot`, and the JSON of every result record
(:func:`result_json` and one function per record type, :mod:`~arenum.report.records`).
"""
from . import plot
from .compare import min_auto, read_reference_csv, reference_curve
from .curves import band_name, draw_guessing_curves, guessing_curve
from .plot import Mark, figure_format, save_figure, save_png
from .records import count_json, mass_json, nucleus_json, result_json, threshold_json

__all__ = ["Mark", "band_name", "count_json", "draw_guessing_curves", "figure_format", "guessing_curve", "mass_json",
           "min_auto", "nucleus_json", "plot", "read_reference_csv", "reference_curve", "result_json", "save_figure",
           "save_png", "threshold_json"]
