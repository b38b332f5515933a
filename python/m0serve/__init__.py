"""m0serve: a WSGI (PEP 3333) application server.

The server is the `_m0serve` extension module, written in Rust. `main()` is the `m0serve`
command (the console script and `python -m m0serve`): it hands the command line to the
server, which runs until it stops and then ends the process with its exit code.
"""

import sys

from m0serve._m0serve import __version__

__all__ = ["__version__", "main"]

# A worker runs this with the interpreter and flags of the master (`python FLAGS -c ...`):
# Python's current-directory entry goes first, before m0serve is imported, so a local
# `m0serve.py` cannot stand in for the package.
WORKER_BOOT = (
    "import sys\n"
    "if sys.path and not (sys.flags.isolated or getattr(sys.flags, 'safe_path', False)):\n"
    "    del sys.path[0]\n"
    "import m0serve\n"
    "m0serve._serve()\n"
)


def main():
    """Runs m0serve with `sys.argv` and exits with its code (it does not return)."""
    # Python put the script's directory (the console script's bin/, or the current
    # directory for `-m`) first on sys.path; the app's path starts at --app-dir instead,
    # the same in the master (--check-config) and in the workers.
    if sys.path and not (sys.flags.isolated or getattr(sys.flags, "safe_path", False)):
        del sys.path[0]
    _serve()


def _serve():
    import subprocess

    from m0serve._m0serve import serve

    # Workers run this interpreter again with its own flags (-X, -W, -O...), so they import
    # the app from this environment. `-u` is not among the flags Python reports: an
    # unbuffered stdout says it.
    flags = list(getattr(subprocess, "_args_from_interpreter_flags", lambda: [])())
    if getattr(sys.stdout, "write_through", False) and "-u" not in flags:
        flags.append("-u")
    worker = [*flags, "-c", WORKER_BOOT]
    serve(["m0serve", *sys.argv[1:]], sys.executable or "", worker, sys.prefix)
