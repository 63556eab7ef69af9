"""``python -m prep``: the same as the ``prep`` command."""

import sys

from prep.cli import main

if __name__ == "__main__":
    sys.exit(main())
