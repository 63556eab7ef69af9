"""``python -m prep``: the same as the ``prep`` command."""

import sys

from prep.cli import main

sys.exit(main())
