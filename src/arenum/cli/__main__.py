"""``python -m arenum.cli``: the same as the ``arenum`` script."""
import sys

from . import main


sys.exit(main())
