"""`python -m tiersim`, the same as the `tiersim` command."""

import sys

from tiersim.cli import main

sys.exit(main())
