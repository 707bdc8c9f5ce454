"""Entry point for `python -m explorer`."""

import signal
import sys

from explorer.cli.main import main

# Ctrl-C (SIGINT) raises KeyboardInterrupt in this process, whatever its parent left. A parent that ignores SIGINT
# (`nohup`, a script's `cmd &`, a test worker) hands its children SIG_IGN, and Python then installs no handler of its
# own: a command that ends on KeyboardInterrupt (a sweep closing its open streams) would run on after Ctrl-C. Set here,
# at the process's entry, not in main(), which tests call inside their own process.
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.exit(main())
