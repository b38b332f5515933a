"""Importing this module fails: the server must exit non-zero and show the traceback."""

raise RuntimeError("m0test-import-failure: this module cannot be imported")

app = None  # never reached
