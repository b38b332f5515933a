#!/usr/bin/env python3
"""Runs a benches/apps module under bjoern, which has no command line of its own.

    run_bjoern.py MODULE HOST PORT

Imports MODULE from benches/apps and serves its `app` with `bjoern.run` on one thread.
SIGINT and SIGTERM stop it with exit status 0.
"""

import os
import signal
import sys

import bjoern


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    module, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "apps"))
    app = getattr(__import__(module), "app")
    # bjoern's libev loop watches SIGINT itself and returns from run(), raising
    # KeyboardInterrupt; SIGTERM is turned into the same path.
    signal.signal(signal.SIGTERM, lambda *_: signal.raise_signal(signal.SIGINT))
    try:
        bjoern.run(app, host, port)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
