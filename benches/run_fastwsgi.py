#!/usr/bin/env python3
"""Runs a benches/apps module under FastWSGI (C: libuv and llhttp, one thread, the app
called on the loop), which has no command line for an app module of its own.

    run_fastwsgi.py MODULE HOST PORT

SIGINT and SIGTERM stop it.
"""

import os
import signal
import sys

import fastwsgi


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    module, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "apps"))
    app = getattr(__import__(module), "app")
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    signal.signal(signal.SIGINT, lambda *_: os._exit(0))
    fastwsgi.run(wsgi_app=app, host=host, port=port)


if __name__ == "__main__":
    main()
