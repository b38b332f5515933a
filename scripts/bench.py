#!/usr/bin/env python3
"""Side-by-side HTTP benchmark: m0serve against Granian and bjoern, per thread.

The command line of the package scripts/m0bench/, whose docstring (the head of
scripts/m0bench/__init__.py) says what it does and how to run it; `--help` lists the
options.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from m0bench import cli  # noqa: E402  (scripts/ on the path first)

if __name__ == "__main__":
    sys.exit(cli.run())
