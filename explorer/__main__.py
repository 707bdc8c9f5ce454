"""Entry point for `python -m explorer`."""

import sys

from explorer.cli import main

sys.exit(main())
