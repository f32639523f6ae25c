"""Temporary stand-in (replaced by the helper's module at merge)."""
from fractions import Fraction
SCALE = 1074
def to_float(S: int) -> float:
    return S / (1 << SCALE)
def float_units(x: float) -> int:
    f = Fraction(x) * (1 << SCALE)
    assert f.denominator == 1
    return int(f)
