"""`python -m engine.apps.cli`: the same as the `compaction` command."""

import sys

from . import main

if __name__ == "__main__":
    sys.exit(main())
