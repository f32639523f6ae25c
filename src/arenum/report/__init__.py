"""Stage 4, reports: guessing curves of a test set and their plots.

``curves`` computes what fraction of a test set a guesser who tries sequences in the model's order
has found after ``g`` guesses (exact inside the exact head, bracketed or estimated past it, each
point saying which); ``plot`` draws curves and cumulative-mass curves to PNG. This is the only
place matplotlib is imported, and only when a plot is drawn.

Exports: :func:`guessing_curve` (a :class:`~arenum.report.curves.GuessCurve` of
:class:`~arenum.report.curves.CurvePoint`), :func:`draw_guessing_curves`, :class:`Mark`,
:func:`save_png` and the module :mod:`~arenum.report.plot`.
"""
from . import plot
from .curves import draw_guessing_curves, guessing_curve
from .plot import Mark, save_png

__all__ = ["Mark", "draw_guessing_curves", "guessing_curve", "plot", "save_png"]
