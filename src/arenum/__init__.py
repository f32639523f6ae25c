"""arenum: count, rank and randomly access the sequences of any autoregressive model."""
__version__ = "0.1.0"
