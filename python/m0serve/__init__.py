"""m0serve: a WSGI (PEP 3333) application server.

The server is the `_m0serve` extension module, written in Rust. `main()` is the `m0serve`
command (the console script and `python -m m0serve`): it hands the command line to the
server, which runs until it stops and then ends the process with its exit code.
"""

from m0serve._m0serve import __version__

__all__ = ["__version__", "main"]


def main():
    """Runs m0serve with `sys.argv` and exits with its code (it does not return)."""
    import subprocess
    import sys

    from m0serve._m0serve import serve

    # Workers run this interpreter again, with its own flags (-X, -W, -O...), as
    # `python -m m0serve`, and so import the app from this environment.
    flags = getattr(subprocess, "_args_from_interpreter_flags", lambda: [])()
    serve(["m0serve", *sys.argv[1:]], sys.executable or "", flags, sys.prefix)
