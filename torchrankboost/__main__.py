"""``python -m torchrankboost``: the command line (see :mod:`torchrankboost.cli`)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
