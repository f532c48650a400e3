"""`python -m engine.cli`: the same as the `compaction` command."""

import sys

from . import main

sys.exit(main())
