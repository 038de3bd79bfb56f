"""`python -m tiersim.cli`."""

import sys

from tiersim.cli import main

sys.exit(main())
