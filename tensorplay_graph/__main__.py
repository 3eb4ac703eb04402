"""``python -m tensorplay_graph ...`` is the ``tpgraph`` command."""

import sys

from .cli import main

sys.exit(main())
