"""For tests/cli.rs: a module that calls sys.exit(0) while it is imported."""

import sys

sys.exit(0)
