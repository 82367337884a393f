"""``python -m app.cli``: the ``chunkwise`` command."""

import sys

from app.cli import main

sys.exit(main())
