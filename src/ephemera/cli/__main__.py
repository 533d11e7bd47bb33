"""`python -m ephemera.cli`: the same as the `ephemera` console script."""

import sys

from ephemera.cli.main import main

sys.exit(main())
