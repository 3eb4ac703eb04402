"""Suite-wide settings: every captured graph is linted, and so is the graph after every pass.

Outside tests lint runs only in debug mode (``TPG_LINT=1`` or a ``debug_dir``), since on
big programs it costs about as much as the planning passes; here it must catch every
broken invariant a change introduces.
"""

import os

os.environ["TPG_LINT"] = "1"
